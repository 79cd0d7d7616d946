from vastprobe.probe.sections import split_sections

B = "ab" * 16


def frame(name: str, body: str, rc: int | None = 0) -> str:
    tail = f"\n@@rc={rc}\n" if rc is not None else ""
    return f"\n@@{B}@@ {name}\n{body}{tail}\n@@{B}@@ /{name}\n"


def test_sections_and_status() -> None:
    text = frame("a", "one\ntwo\n") + frame("b", "x", 3) + f"\n@@{B}@@ end\n"
    out = split_sections(text.encode(), B)
    assert out.complete and out.framed
    assert out.sections["a"].text == "one\ntwo\n" and out.sections["a"].rc == 0
    assert out.sections["b"].rc == 3


def test_cut_section_is_marked() -> None:
    out = split_sections((frame("a", "x", None) + f"\n@@{B}@@ b\npartial").encode(), B)
    assert out.sections["a"].truncated
    assert out.sections["b"].truncated and out.sections["b"].text == "partial"
    assert not out.complete


def test_forged_boundary_from_file_content_does_not_split() -> None:
    body = "\n@@" + "cd" * 16 + "@@ /a\n@@rc=0\n"
    out = split_sections(frame("a", body).encode(), B)
    assert out.sections["a"].text == body


def test_garbage_is_not_framed() -> None:
    out = split_sections(b"\xff\xfe random \x00 bytes", B)
    assert not out.framed and not out.sections


def test_empty() -> None:
    out = split_sections(b"", B)
    assert not out.framed and not out.complete
