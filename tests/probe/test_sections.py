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


def test_a_repeated_section_is_tampering_and_every_copy_is_dropped() -> None:
    """A forger of the probe's own user can write into its stdout before the probe does: the first
    copy is not the probe's by being first. Neither copy is believed."""
    text = frame("meta", "shell_pid=666\n") + frame("meta", "shell_pid=1\n") + f"\n@@{B}@@ end\n"
    out = split_sections(text.encode(), B)
    assert "meta" not in out.sections
    assert out.anomalies == ("section 'meta' appears 2 times: every copy dropped",)


def test_an_undeclared_section_is_tampering_and_dropped() -> None:
    out = split_sections((frame("meta", "x") + frame("s9.proc", "forged")).encode(), B)
    assert "s9.proc" not in out.sections
    assert out.anomalies == ("unexpected section 's9.proc'",)


def test_a_section_out_of_the_probes_order_is_dropped() -> None:
    """A kmsg section that arrives before the process section was not written in turn: dropped;
    the sections in the probe's order around it are kept."""
    text = frame("meta", "format=3\n") + frame("kmsg", "|forged Xid") + frame("s0.proc", "x") + frame("fd", "y")
    out = split_sections((text + f"\n@@{B}@@ end\n").encode(), B)
    assert sorted(out.sections) == ["fd", "meta", "s0.proc"]
    assert out.anomalies == ("section 'kmsg' arrived out of the probe's order",)
    old = frame("meta", "kernel=x\n") + frame("fd", "y") + frame("cgmap", "z")  # format 1 wrote cgmap after fd
    assert sorted(split_sections(old.encode(), B).sections) == ["cgmap", "fd", "meta"]


def test_sections_after_the_end_marker_and_a_second_end_are_tampering() -> None:
    text = frame("meta", "x") + f"\n@@{B}@@ end\n" + frame("kmsg", "|late") + f"\n@@{B}@@ end\n"
    out = split_sections(text.encode(), B)
    assert "kmsg" not in out.sections and not out.complete
    assert out.anomalies == ("section 'kmsg' arrived after the end marker", "the end marker appears 2 times")
    once = split_sections((frame("meta", "x") + f"\n@@{B}@@ end\n" + frame("kmsg", "|late")).encode(), B)
    assert not once.complete and "kmsg" not in once.sections


def test_sections_the_probe_was_not_asked_for_are_tampering() -> None:
    from vastprobe.probe.script import ProbeParams

    params = ProbeParams(sample=0, logs=("/a",), artifacts=("/tmp/*",), boundary=B)
    text = frame("meta", "x") + frame("log.0", "|a") + frame("log.1", "|b") + frame("art.0", "") + frame("s1.now", "1")
    out = split_sections(text.encode(), B, params)
    assert sorted(out.sections) == ["art.0", "log.0", "meta"]
    assert out.anomalies == (
        "unexpected section 'log.1' (the probe was given 1 --log path(s))",
        "unexpected section 's1.now' (the probe took one sample)",
    )


def test_every_declared_section_has_its_place_in_the_probes_order() -> None:
    """A new source left out of ORDER would be dropped as written out of turn in every run."""
    from vastprobe.probe import sources

    for s in sources.SOURCES:
        assert sources.rank(s.section(0)) is not None, s.name
