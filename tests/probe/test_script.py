"""The probe script itself: portable sh, read-only, quoted parameters, framed and bounded."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, run_probe_raw, threaded_sleeper, wait_for
from vastprobe.parsers.snapshot import build_snapshot
from vastprobe.probe.script import ProbeParams, render_script, shell_quote
from vastprobe.probe.sections import split_sections

EXPECTED = {
    "meta", "host", "s0.now", "s0.proc", "s0.gpu", "s0.logs", "cmdline", "fd", "cgmap", "cgmem",
    "kmsg", "gpuapps", "df", "art.0", "s1.now", "s1.proc", "s1.gpu", "s1.logs", "times",
}  # fmt: skip

SHELLS = {
    "dash": ["dash"],
    "bash": ["bash", "--posix"],
    "busybox": ["busybox", "sh"],
}


def _shell(name: str) -> list[str]:
    cmd = SHELLS[name]
    if shutil.which(cmd[0]) is None:
        pytest.skip(f"{cmd[0]} is not installed (apt-get install {cmd[0]})")
    return cmd


@pytest.mark.parametrize("name", sorted(SHELLS))
def test_script_parses(name: str) -> None:
    shell = _shell(name)
    script = render_script(ProbeParams(logs=("/tmp/a b", "/x/'q'"), artifacts=("/tmp/*",)))
    check = ["busybox", "sh", "-n"] if name == "busybox" else [shell[0], "-n"]
    proc = subprocess.run(check, input=script.encode(), capture_output=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", sorted(SHELLS))
def test_script_runs_under_each_shell(name: str, tmp_path: Path) -> None:
    shell = _shell(name)
    log = tmp_path / "job.log"
    log.write_text("step 1\nstep 2\n")
    params = ProbeParams(sample=0.2, logs=(str(log),), artifacts=(str(tmp_path / "*"),))
    raw = run_probe_raw(params, shell)
    out = split_sections(raw, params.boundary)
    assert out.complete, raw[-500:]
    assert set(out.sections) >= EXPECTED, EXPECTED - set(out.sections)
    # `fr` lists the dump prefixes any process on the machine names: another test's holder of a prefix
    # with 20,000 files under it (tests/parsers/test_flight_recorder.py) cuts it by design, whatever this test does
    assert not [n for n, s in out.sections.items() if s.truncated and n != "fr"]
    snap = build_snapshot(out, params, "local", "local", len(raw))
    assert len(snap.processes) > 3
    assert snap.probe.sample_uptimes[1] > snap.probe.sample_uptimes[0]
    assert snap.logs[0].exists and snap.logs[0].tail == "step 1\nstep 2\n"
    assert [a.path for a in snap.artifacts[0].entries] == [str(log)]
    # host facts the probe leaves to the client: uid from the shell's status, CLK_TCK from its start
    assert snap.host.uid == os.getuid()
    assert snap.host.clk_tck == os.sysconf("SC_CLK_TCK")
    assert snap.host.own_pid_namespace is True


def test_pid_namespace_without_its_own_proc(tmp_path: Path) -> None:
    """`unshare --pid --fork` without --mount-proc: the probe shell is PID 1 of a new namespace
    but /proc is the host's, so /proc/1 is not its namespace's init."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare (util-linux)")
    params = ProbeParams(sample=0)
    raw = run_probe_raw(params, ["unshare", "--pid", "--fork", "dash"])
    out = split_sections(raw, params.boundary)
    snap = build_snapshot(out, params, "local", "local", len(raw))
    assert snap.probe.shell_pid == 1
    assert snap.host.own_pid_namespace is False


def test_busybox_applets_alone(tmp_path: Path) -> None:
    """A target with nothing but BusyBox: every command the script runs is an applet."""
    if shutil.which("busybox") is None:
        pytest.skip("busybox is not installed")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    applets = subprocess.run(["busybox", "--list"], capture_output=True, text=True).stdout.split()
    for a in applets:
        (bindir / a).symlink_to(shutil.which("busybox"))  # type: ignore[arg-type]
    params = ProbeParams(sample=0.2)
    script = render_script(params).replace(
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH", f"PATH={bindir}"
    )
    proc = subprocess.run([str(bindir / "sh"), "-s"], input=script.encode(), capture_output=True, timeout=60)
    out = split_sections(proc.stdout, params.boundary)
    assert out.complete
    snap = build_snapshot(out, params, "local", "local", len(proc.stdout))
    assert snap.probe.timeout_mode == "new"
    assert snap.host.clk_tck == 100  # inferred from the shell's start time: no getconf here
    me = snap.process(snap.probe.shell_pid or -1)
    assert me is not None and me.comm == "sh"
    assert any(p.fds for p in snap.processes if not isinstance(p.fds, type(None)))


def test_busybox_grep_puts_no_other_variable_of_an_environ_in_the_output(tmp_path: Path) -> None:
    """BusyBox `grep -z` anchors `^` after a newline inside a value too: an environ entry
    `NOTE=hunter2-SECRET\nRANK=7` matched whole, and the raw output (what `collect -o` saves) held
    the secret before its line. Only entries that start with an allowed name, newline-free, pass."""
    if shutil.which("busybox") is None:
        pytest.skip("busybox is not installed")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for a in subprocess.run(["busybox", "--list"], capture_output=True, text=True).stdout.split():
        (bindir / a).symlink_to(shutil.which("busybox"))  # type: ignore[arg-type]
    rank = threaded_sleeper(NOTE="hunter2-SECRET\nRANK=7", WORLD_SIZE="4")
    try:
        params = ProbeParams(sample=0)
        script = render_script(params).replace(
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH", f"PATH={bindir}"
        )
        proc = subprocess.run([str(bindir / "sh"), "-s"], input=script.encode(), capture_output=True, timeout=60)
    finally:
        rank.kill()
        rank.wait()
    assert b"hunter2-SECRET" not in proc.stdout
    assert f"/proc/{rank.pid}/environ:WORLD_SIZE=4".encode() in proc.stdout  # the allowed one still read


def test_parameters_are_data_not_code(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    evil = f"/tmp/x'; touch {canary}; echo '$(touch {canary})`touch {canary}`\"$HOME\""
    params = ProbeParams(sample=0, logs=(evil,), artifacts=(evil + "*",))
    raw = run_probe_raw(params)
    assert not canary.exists()
    snap = build_snapshot(split_sections(raw, params.boundary), params, "local", "local", len(raw))
    assert snap.logs[0].path == evil
    assert not snap.logs[0].exists


def test_shell_quote_round_trips() -> None:
    for value in ["", "a b", "it's", "$(x)", "`y`", '"', "\\", "\n"]:
        out = subprocess.run(["sh", "-c", f"printf %s {shell_quote(value)}"], capture_output=True, text=True).stdout
        assert out == value


def test_probe_writes_nothing(tmp_path: Path) -> None:
    """Run the probe under strace and check no call opens a file for writing or unlinks one."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    params = ProbeParams(sample=0.1, logs=(str(tmp_path / "l"),))
    trace = tmp_path / "trace"
    subprocess.run(
        ["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=openat,open,creat,unlink,unlinkat,rename,renameat,mkdir",
         "dash", "-s"],
        input=render_script(params).encode(),
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    bad = []
    for line in trace.read_text().splitlines():
        if any(c in line for c in ("creat(", "unlink", "rename", "mkdir(")) or (
            "openat(" in line and ("O_WRONLY" in line or "O_RDWR" in line) and "/dev/null" not in line
        ):
            bad.append(line)
    assert not bad, bad[:5]


def test_output_sections_are_capped() -> None:
    params = ProbeParams(sample=0)
    script = render_script(params).replace("VP_MAXPROC='8388608'", "VP_MAXPROC='2000'")
    proc = subprocess.run(["sh", "-s"], input=script.encode(), capture_output=True, timeout=60)
    out = split_sections(proc.stdout, params.boundary)
    stat = out.sections["s0.proc"]
    assert stat.truncated and len(stat.text.encode()) <= 2000
    for name in ("cmdline", "fd"):
        assert out.sections[name].truncated and len(out.sections[name].text.encode()) <= 2000
    # the cgroup sections come from the same awk as s0.proc: a cut s0.proc still ends them
    assert out.sections["cgmap"].rc == 0 and "\tv" in out.sections["cgmap"].text
    assert out.complete


def test_artifact_listing_is_cut_in_the_shell(tmp_path: Path) -> None:
    """More matches than max_artifacts: the count says all, the entries are the first ones in glob
    order, and names with spaces, quotes and newlines stay whole."""
    names = [f"f{i:02d} 'q' $(x)" for i in range(30)] + ["f99\nline"]
    for n in names:
        (tmp_path / n).write_text("x")
    params = ProbeParams(sample=0, artifacts=(str(tmp_path / "f*"),), max_artifacts=10)
    raw = run_probe_raw(params)
    snap = build_snapshot(split_sections(raw, params.boundary), params, "local", "local", len(raw))
    listing = snap.artifacts[0]
    assert listing.matched == 31
    assert [e.path for e in listing.entries] == [str(tmp_path / n) for n in sorted(names)[:10]]


def test_hostile_comm_survives_the_probe() -> None:
    """comm may hold spaces, parentheses and a newline: the stat record is cut at the last ')'."""
    import sys
    import time

    from tests.helpers import local_snapshot

    code = "open('/proc/self/comm','w').write('x) R 1 (y\\nz'); import time; print('ok', flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ok"
        snap = local_snapshot(ProbeParams(sample=0))
        proc = snap.process(p.pid)
        assert proc is not None
        assert proc.comm == "x) R 1 (y\nz"
        assert proc.state == "S" and proc.ppid > 1
        # the kernel-thread filter reads flags after the last ") ", so this one is a user process
        assert not proc.kernel_thread and proc.cmdline and proc.fds and proc.uid is not None
        del time
    finally:
        p.kill()


def test_argument_lists_too_long_fall_back_to_xargs(tmp_path: Path) -> None:
    """Every per-process file list (stat; status/io/wchan/cgroup; cmdline; fds; the second
    sample's) is handed to xargs when exec refuses it. Exec's limit is forced low instead of
    spawning tens of thousands of processes: a 256 KiB stack limit puts it at its 128 KiB floor,
    and a 112 KiB environment variable leaves the lists about 16 KiB, which 1000 sleepers pass."""
    from tests.helpers import run_probe_raw

    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(1000)]
    try:
        params = ProbeParams(sample=0.1)
        env = {**os.environ, "VP_TEST_FILLER": "x" * 112_000}
        raw = run_probe_raw(params, ["bash", "-c", 'ulimit -s 256 && exec dash "$@"', "probe"], env=env)
        out = split_sections(raw, params.boundary)
        assert out.complete
        for name in ("s0.proc", "fd", "s1.proc"):
            assert "Argument list too long" in out.sections[name].text, name  # the fast path failed
        snap = build_snapshot(out, params, "local", "local", len(raw))
        for sleeper in sleepers:
            proc = snap.process(sleeper.pid)
            assert proc is not None, sleeper.pid
            assert proc.cmdline == ("sleep", "600") and proc.fds and proc.uid is not None
            assert isinstance(proc.wchan, str) and len(proc.samples) == 2
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()


def test_kernel_threads_get_stat_only() -> None:
    """Kernel threads are known by PF_KTHREAD in stat; their status, io, wchan, cmdline and fds
    are not read (a many-core host runs more of them than user processes)."""
    params = ProbeParams(sample=0.1)
    before = {int(d) for d in os.listdir("/proc") if d.isdigit()}
    raw = run_probe_raw(params)
    after = {int(d) for d in os.listdir("/proc") if d.isdigit()}
    out = split_sections(raw, params.boundary)
    snap = build_snapshot(out, params, "local", "local", len(raw))
    kthreads = [p for p in snap.processes if p.kernel_thread]
    if not kthreads:
        pytest.skip("no kernel threads visible here (a container)")
    text = out.sections["s0.proc"].text + out.sections["fd"].text
    for k in kthreads[:20]:
        assert k.fds == () and k.uid is None
        assert f"/proc/{k.pid}/status:" not in text and f"/proc/{k.pid}/fd:" not in text
        assert len(k.samples) == 2  # stat is still sampled twice
    # processes alive before and after the probe (others come and go on a shared host) were read whole
    lived = before & after
    assert all(p.uid is not None for p in snap.processes if not p.kernel_thread and p.state != "Z" and p.pid in lived)


def test_a_log_line_never_passes_for_the_probes_own(tmp_path: Path) -> None:
    """Format 3 prefixes every log-tail line: a log that writes the probe's markers stays content."""
    log = tmp_path / "job.log"
    text = "step 1\n@@notregular\n@@rc=0\n\n@@" + "ab" * 16 + "@@ /log.0\nlast\n"
    log.write_text(text)
    params = ProbeParams(sample=0, logs=(str(log),))
    raw = run_probe_raw(params)
    snap = build_snapshot(split_sections(raw, params.boundary), params, "local", "local", len(raw))
    assert snap.logs[0].tail == text
    missing = ProbeParams(sample=0, logs=(str(tmp_path / "gone.log"),))
    raw = run_probe_raw(missing)
    snap = build_snapshot(split_sections(raw, missing.boundary), missing, "local", "local", len(raw))
    assert not isinstance(snap.logs[0].tail, str)


@pytest.mark.parametrize("name", sorted(SHELLS))
def test_a_finished_probe_leaves_no_process_behind(name: str) -> None:
    """When the probe's shell exits, nothing of its session is left: the watchdog's half-second
    tick used to outlive it, adopted by the target's init, and the next probe read it as a child of
    a PID 1 entrypoint (a chain that moved: the seed case read as no stall)."""
    shell = _shell(name)
    script = render_script(ProbeParams(sample=0.0, deadline=30))
    p = subprocess.Popen(["setsid", *shell, "-s"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    p.communicate(script.encode(), timeout=90)  # past the deadline: a probe cut by it leaves nothing either
    left = []
    for d in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(") ", 1)[1].split()
        if d.isdigit() and fields[3] == str(p.pid) and fields[0] != "Z":  # (a guard's exited child: dead)
            left.append((d, stat.split(" (")[1].split(")")[0]))
    assert left == [], f"left behind in the probe's session: {left}"


def test_no_literal_bound_is_longer_than_the_parser_assumes() -> None:
    """parsers/own_processes.py tells an earlier probe's BusyBox `timeout` watchers (whose arguments were
    gone) by LONGEST_LITERAL_BOUND: no `tmo N` or `VP_FILE_T=N` in the script may be longer."""
    import re

    from vastprobe.probe.script import LONGEST_LITERAL_BOUND, script_template

    text = script_template()
    bounds = [int(n) for n in re.findall(r"\btmo (\d+) ", text) + re.findall(r"\bVP_FILE_T=(\d+)", text)]
    assert len(bounds) >= 10, bounds  # the pattern still finds the script's bounds
    assert max(bounds) == LONGEST_LITERAL_BOUND, bounds


def test_the_script_is_read_once_per_run() -> None:
    """A sweep renders the script per host: script.sh is read from disk once, not once a host."""
    from vastprobe.probe.script import script_template

    assert script_template() is script_template()


def test_the_probe_leaves_no_zombie_to_an_init_that_reaps_nothing(tmp_path: Path) -> None:
    """A container whose PID 1 is a program that reaps nothing (`python main.py`, no tini): every
    child the probe did not wait for became that init's zombie for good, 3 a probe with a --log
    (15 after 5 probes), thousands in an hour of `watch -n 1`. Now each guarded child is waited for
    by the pipeline side that started it."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.skip("needs root, unshare and nsenter (util-linux) for a PID namespace")
    init_holder = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                                    "import time; time.sleep(600)"], start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: bool(children_of(init_holder.pid)), what="the namespace's init")
        (init,) = children_of(init_holder.pid)
        script = render_script(ProbeParams(sample=0, logs=(str(tmp_path / "x.log"),)))
        for _ in range(5):
            r = subprocess.run(["nsenter", "-t", str(init), "-p", "-m", "/bin/sh", "-s"], input=script.encode(),
                               capture_output=True, timeout=60)  # fmt: skip
            assert b"@@ end" in r.stdout[-200:], r.stdout[-300:]
        zombies = [k for k in children_of(init) if proc_state(k) == "Z"]
        assert not zombies, f"{len(zombies)} zombies of the init after 5 probes"
    finally:
        os.killpg(init_holder.pid, signal.SIGKILL)
        init_holder.wait()
