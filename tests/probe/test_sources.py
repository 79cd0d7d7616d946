"""The source table (probe/sources.py) and the script agree, and each new source's parser reads
lines recorded on this project's machine (Linux 6.18, x86-64)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import run_probe_raw
from vastprobe.analysis.wchan_families import timed_wait
from vastprobe.model import Syscall
from vastprobe.parsers.fd import parse_fd_section, unescape_ls
from vastprobe.parsers.locks import parse_locks
from vastprobe.parsers.mounts import parse_fuse_mounts
from vastprobe.parsers.net import inet_address, parse_net_section
from vastprobe.parsers.syscall import parse_syscall, parse_syscall_section, resumed
from vastprobe.parsers.threads import parse_threads_section
from vastprobe.probe import sources
from vastprobe.probe.script import ProbeParams
from vastprobe.probe.sections import split_sections

SCRIPT = (Path(sources.__file__).with_name("script.sh")).read_text()


def test_every_source_names_a_function_the_script_defines() -> None:
    defined = set(re.findall(r"^(vp_[a-z0-9_]+)\(\)", SCRIPT, re.M))
    for s in sources.SOURCES:
        assert s.function in defined, s


def test_a_real_run_writes_only_declared_sections_and_every_expected_one(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("x\n")
    params = ProbeParams(sample=0.2, logs=(str(log),), artifacts=(str(tmp_path / "*"),), python_stacks=True)
    out = split_sections(run_probe_raw(params), params.boundary)
    assert out.complete and not out.anomalies
    assert all(sources.declared(n) for n in out.sections)
    written = set(out.sections)
    for s in sources.SOURCES:
        if s is sources.KMSG_FALLBACK:
            continue  # only when dmesg is refused or empty
        names = {s.section(0), s.section(1)} if s.phase == "per-sample" else {s.section(0)}
        assert names <= written, (s.name, sorted(written))


def test_syscall_lines_recorded_here() -> None:
    # flock(1) blocked on fd 3, a reader in read(2) on fd 3, a FIFO open, a running process
    text = "\n".join(
        [
            "/proc/16196/syscall:73 0x3 0x2 0x0 0x1b6 0x7ffe558ab3f0 0x0 0x7ffe558ab3b8 0x7f3c66194897",
            "/proc/16189/syscall:0 0x3 0x7fc479801000 0x20000 0x7fc479894b60 0xffffffff 0x0 0x7ffcbbe5c698 0x7fc47997d2ad",
            "/proc/16191/syscall:257 0xffffff9c 0x7ffd259abaf2 0x0 0x0 0x0 0x0 0x7ffd259aa700 0x7f2e11cf5011",
            "/proc/5/syscall:running",
            "/proc/6/syscall:-1 0x7ffd259aa700 0x7f2e11cf5011",
            "grep: /proc/1/syscall: Operation not permitted",
        ]
    )
    calls, errors = parse_syscall_section(text, "x86_64")
    assert calls[16196] == Syscall(73, (3, 2, 0, 0x1B6, 0x7FFE558AB3F0, 0), "flock")
    assert calls[16189].name == "read" and calls[16189].args[0] == 3
    assert calls[16191].name == "openat"
    assert calls[5].running and calls[6].number == -1
    assert errors == {1: "Operation not permitted"}
    assert parse_syscall("63 0x3 0x0 0x0 0x0 0x0 0x0 0x0 0x0", "aarch64").name == "read"  # type: ignore[union-attr]
    assert parse_syscall("٣ 0x1", "x86_64") is None and parse_syscall("", "x86_64") is None


def test_restart_syscall_is_read_as_the_call_it_resumes() -> None:
    """Recorded here: `sleep 300`, `Event().wait(400)` and `poll(400000)`, each stopped and continued."""
    sleep = parse_syscall("219 0x0 0x0 0x7ffe8c5fa060 0x7ffe8c5fa0a0 0x0 0x0 0x7ffe8c5f 0x7f", "x86_64")
    futex = parse_syscall("219 0x55882d8c8250 0x89 0x0 0x7fff1673fae0 0x0 0xffffffff 0x7fff 0x7f", "x86_64")
    poll = parse_syscall("219 0x56510019be00 0x0 0x61a80 0x0 0x0 0x0 0x7ffd 0x7f", "x86_64")
    assert sleep is not None and sleep.name == "restart_syscall"
    assert resumed(sleep, "do_syscall_64").name == "nanosleep"  # type: ignore[union-attr]
    assert resumed(futex, "futex_do_wait").name == "futex" and timed_wait(resumed(futex, "futex_do_wait"))  # type: ignore[union-attr,arg-type]
    assert resumed(poll, "poll_schedule_timeout.constprop.0").name == "poll"  # type: ignore[union-attr]
    assert timed_wait(resumed(poll, "poll_schedule_timeout.constprop.0"))  # type: ignore[arg-type]
    assert resumed(sleep, "pipe_read") is sleep  # a wait channel that says nothing of it: left as read
    assert parse_syscall("128 0x0 0x0 0x0 0x0 0x0 0x0 0x0 0x0", "aarch64").name == "restart_syscall"  # type: ignore[union-attr]


def test_proc_locks_lines_recorded_here() -> None:
    locks = parse_locks(
        "1: FLOCK  ADVISORY  WRITE 16192 fe:00:2146594 0 EOF\n"
        "1: -> FLOCK  ADVISORY  WRITE 16196 fe:00:2146594 0 EOF\n"
        "2: OFDLCK ADVISORY  READ  -1 00:06:1234 0 EOF\n"
        "3: POSIX  ADVISORY  WRITE 0 fe:00:77 100 199\n"
        "garbage: line\n"
    )
    assert [(lk.number, lk.waiting, lk.pid, lk.inode) for lk in locks] == [
        (1, False, 16192, 2146594),
        (1, True, 16196, 2146594),
        (2, False, None, 1234),
        (3, False, None, 77),
    ]
    assert locks[0].kind == "FLOCK" and locks[0].access == "WRITE" and locks[3].end == "199"


def test_socket_tables_recorded_here() -> None:
    text = "\n".join(
        [
            "@ns self",
            "tcp:   0: 0100007F:DFE5 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 48746 1 00000000e4494f1d 100 0 0 10 0",
            "tcp:   2: 0100007F:DFE5 0100007F:8B34 01 00000000:00000012 00:00000000 00000000     0        0 48747 1 00000000e4b270d9 20 4 30 10 -1",
            "@ns 1151",
            "tcp:   3: 0100007F:8B34 0100007F:DFE5 01 00000000:00000000 00:00000000 00000000     0        0 48036 1 000000005bd0c1b9 20 0 0 11 -1",
            "unix:000000009e42ab5b: 00000003 00000000 00000000 0001 03 48035",
            "unix:00000000cc26a208: 00000003 00000000 00010000 0001 01 48100 /run/x.sock",
            "@ss u_str ESTAB 0      0                  * 48035            * 48034",
        ]
    )
    table = parse_net_section(text)
    by = table.by_inode()
    assert by[48746].state == "LISTEN" and by[48746].local == "127.0.0.1:57317" and by[48746].remote == ""
    assert by[48747].recv_queue == 0x12 and by[48747].remote == "127.0.0.1:35636" and by[48747].netns == 0
    assert by[48036].local == "127.0.0.1:35636" and by[48036].state == "ESTABLISHED" and by[48036].netns == 1151
    assert by[48035].peer_inode == 48034 and by[48035].state == "CONNECTED"
    assert by[48100].state == "LISTEN" and by[48100].local == "/run/x.sock"
    assert table.unix_peers_known
    assert inet_address("00000000000000000000000001000000", "1F90") == "[::1]:8080"
    assert inet_address("0000000000000000FFFF00000100007F", "0050") == "127.0.0.1:80"


def test_fuse_mounts_and_threads_recorded_here() -> None:
    (m,) = parse_fuse_mounts("0:40 /tmp/fm\\040x fuse.vastprobe-test vastprobe-test\n")
    assert (m.device, m.mount_point, m.fstype) == ("0:40", "/tmp/fm x", "fuse.vastprobe-test")
    assert m.waiting is None  # a capture from before the counter, or no fusectl
    a, b, c = parse_fuse_mounts("0:40 /a fuse.sshfs u@h: w=2\n0:41 /b fuse  w=0\n0:42 /c fuse.x w=9 w=0\n")
    assert (a.source, a.waiting, b.source, b.waiting) == ("u@h:", 2, "", 0)
    assert (c.source, c.waiting) == ("w=9", 0)  # a source named like the counter is a source
    threads = parse_threads_section(
        "/proc/1/task/59/stat:59 (vsock-console) S 0 0 0 0 -1 4194624 393 558617 0 261 0 6 2243 774 20 0 16 0 49 "
        "47325184 3039 18446744073709551615 1 1 0 0 0 0 0 4096 1256 0 0 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
        "/proc/1/task/59/wchan:request_wait_answer\n"
    )
    (t,) = threads[1]
    assert (t.tid, t.comm, t.state, t.wchan) == (59, "vsock-console", "S", "request_wait_answer")


def test_fd_section_escaped_by_gnu_ls() -> None:
    text = (
        "/proc/16706/fd:\n"
        "lrwx------ 1 0 0 64 Dec  3 02:04 4 -> /tmp/lab/x\\nlrwx------\\ 1\\ 0\\ 0\\ 64\\ Dec\\ \\ 3\\ 02:00\\ 9\\ ->\\ pipe:[123]\n"
        "l-wx------ 1 0 0 64 Dec  3 02:03 1 -> /tmp/out\\ (deleted)\n"
        "lrwx------ 1 0 0 64 Dec  3 02:04 8 -> /tmp/lab/\\ ->\\ arrow\n"
    )
    table = parse_fd_section(text, escaped=True)
    fds = {e.fd: e for e in table.fds[16706]}
    assert set(fds) == {4, 1, 8}  # the forged "9 -> pipe:[123]" stays inside fd 4's name
    assert fds[4].target == "/tmp/lab/x\nlrwx------ 1 0 0 64 Dec  3 02:00 9 -> pipe:[123]"
    assert fds[1].deleted and fds[1].path == "/tmp/out"
    assert fds[8].target == "/tmp/lab/ -> arrow"
    assert unescape_ls("\\303\\251\\\\") == "é\\"


def test_twenty_thousand_sockets_stay_within_the_caps(reap) -> None:
    """10,000 socketpairs (20,000 Unix sockets) in two processes: the fd listing keeps 256 fds of
    each, the socket tables and ss are filtered to held sockets inside one awk, nothing grows."""
    import resource
    import subprocess
    import sys
    import time

    from tests.helpers import wait_for
    from vastprobe.probe.script import MAX_NET_SECTION, MAX_PROC_SECTION
    from vastprobe.probe.sources import NET

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 10100 and hard != resource.RLIM_INFINITY:
        import pytest

        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below 10100")
    code = (
        "import resource, socket, sys, time\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (10100, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "keep = [socket.socketpair() for _ in range(5000)]\n"
        "print('ready', flush=True); time.sleep(1000)\n"
    )
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
        reap.append(p)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        wait_for(lambda p=p: len(list(Path(f"/proc/{p.pid}/fd").iterdir())) >= 10000, what="10,000 sockets open")
    params = ProbeParams(sample=0)
    t0 = time.monotonic()
    raw = run_probe_raw(params)
    elapsed = time.monotonic() - t0
    out = split_sections(raw, params.boundary)
    assert out.complete and elapsed < 30
    net = out.sections[NET.name]
    assert len(net.text) < MAX_NET_SECTION and len(out.sections["fd"].text) < MAX_PROC_SECTION
    table = parse_net_section(net.text)
    held = [s for s in table.sockets if s.proto == "unix"]
    assert 500 <= len(held) <= 1000  # each process's listed 256 fds (plus the rest of the host's)
    assert len(raw) < 4 * 1024 * 1024


def test_the_socket_section_is_cut_at_its_cap(monkeypatch) -> None:
    import socket

    import vastprobe.probe.script as render

    pairs = [socket.socketpair() for _ in range(20)]  # held by this test process: listed by the probe
    monkeypatch.setattr(render, "MAX_NET_SECTION", 300)
    params = ProbeParams(sample=0)
    out = split_sections(run_probe_raw(params), params.boundary)
    net = out.sections["net"]
    assert net.truncated and len(net.text) <= 300 + 100
    assert parse_net_section(net.text, truncated=net.truncated).truncated
    for a, b in pairs:
        a.close()
        b.close()


def test_every_source_names_a_parser_that_resolves() -> None:
    """Each source's parser is one function of a parsers module, the one Sections.read calls."""
    from vastprobe.parsers.reading import PARSER_MODULES, parser_of

    for s in (*sources.SOURCES, *sources.LEGACY):
        module, _, name = s.parser.partition(":")
        assert module.startswith("vastprobe.parsers.") and module in PARSER_MODULES and name, s
        assert callable(parser_of(s)), s


def test_the_snapshot_reads_each_section_through_its_sources_parser(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Over the recorded captures, every section present is read by the parser its source names
    (clk, the first revision's, is read with meta by meta's parser)."""
    from tests.hostile_captures import load_corpus
    from vastprobe.parsers import reading
    from vastprobe.parsers.snapshot import build_snapshot

    called: set[str] = set()
    real = reading.parser_of

    def spy(source: sources.Source):  # type: ignore[no-untyped-def]
        called.add(source.name)
        return real(source)

    monkeypatch.setattr(reading, "parser_of", spy)
    present: set[str] = set()
    for seed in load_corpus():
        out = split_sections(seed.raw, seed.params.boundary, seed.params)
        present |= {s.name for s in sources.SOURCES if any(s.pattern.match(n) for n in out.sections)}
        build_snapshot(out, seed.params, "t", "ssh", len(seed.raw))
    assert present - called == set()
    assert called <= {s.name for s in sources.SOURCES}


def test_a_failing_parser_names_its_section_and_only_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Sections.read names the section whose parser raised: one of the several readers of the
    process section (wchan) costs s0.proc; the kernel log's parser costs kmsg; the rest is read."""
    from tests.hostile_captures import load_corpus
    from vastprobe.capture import Capture
    from vastprobe.parsers import kmsg, wchan
    from vastprobe.pipeline import snapshot_of

    seed = next(s for s in load_corpus() if s.name == "waits-host")
    cap = Capture("t", "ssh", "ok", None, seed.raw, False, seed.params)

    def breaking(real):  # type: ignore[no-untyped-def]
        def parser(text: str | None, *args: object, **kwargs: object) -> object:
            if text:  # a bug the section's content sets off; read as absent, it parses
                raise ValueError("boom")
            return real(text, *args, **kwargs)

        return parser

    with monkeypatch.context() as m:
        m.setattr(wchan, "parse_wchan_section", breaking(wchan.parse_wchan_section))
        snap, err = snapshot_of(cap)
        assert err is None and snap is not None
        assert snap.probe.unreadable_sections == (("s0.proc", "ValueError: boom"),)
        assert not snap.processes  # the process section read as absent
    with monkeypatch.context() as m:
        m.setattr(kmsg, "parse_kmsg_sections", breaking(kmsg.parse_kmsg_sections))
        snap, err = snapshot_of(cap)
        assert err is None and snap is not None
        assert snap.probe.unreadable_sections == (("kmsg", "ValueError: boom"),)
        assert snap.processes
