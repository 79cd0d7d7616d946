from vastprobe.probe.sections import split_sections

B = "ab" * 16


def frame(name: str, body: str, rc: int | None = 0) -> str:
    tail = f"\n@@rc={rc}\n" if rc is not None else ""
    return f"\n@@{B}@@ {name}\n{body}{tail}\n@@{B}@@ /{name}\n"


def test_sections_and_status() -> None:
    text = frame("meta", "one\ntwo\n") + frame("host", "x", 3) + f"\n@@{B}@@ end\n"
    out = split_sections(text.encode(), B)
    assert out.complete and out.framed
    assert out.sections["meta"].text == "one\ntwo\n" and out.sections["meta"].rc == 0
    assert out.sections["host"].rc == 3


def test_cut_section_is_marked() -> None:
    out = split_sections((frame("meta", "x", None) + f"\n@@{B}@@ host\npartial").encode(), B)
    assert out.sections["meta"].truncated
    assert out.sections["host"].truncated and out.sections["host"].text == "partial"
    assert not out.complete


def test_forged_boundary_from_file_content_does_not_split() -> None:
    body = "\n@@" + "cd" * 16 + "@@ /meta\n@@rc=0\n"
    out = split_sections(frame("meta", body).encode(), B)
    assert out.sections["meta"].text == body


def test_garbage_is_not_framed() -> None:
    out = split_sections(b"\xff\xfe random \x00 bytes", B)
    assert not out.framed and not out.sections


def test_empty() -> None:
    out = split_sections(b"", B)
    assert not out.framed and not out.complete


def test_a_repeated_section_is_tampering_and_the_first_copy_wins() -> None:
    text = frame("meta", "shell_pid=1\n") + frame("meta", "shell_pid=666\n") + f"\n@@{B}@@ end\n"
    out = split_sections(text.encode(), B)
    assert out.sections["meta"].text == "shell_pid=1\n"
    assert out.anomalies == ("section 'meta' appears more than once",)


def test_an_undeclared_section_is_tampering_and_dropped() -> None:
    out = split_sections((frame("meta", "x") + frame("s9.proc", "forged")).encode(), B)
    assert "s9.proc" not in out.sections
    assert out.anomalies == ("unexpected section 's9.proc'",)
