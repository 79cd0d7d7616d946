"""stopped-child, zombie-child and d-state on real processes in those states."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (
    VFORK_C,
    children_of,
    compiled_c,
    proc_state,
    stopped_child,
    vastprobe_json,
    vastprobe_json_acting_between_samples,
    wait_for,
)
from vastprobe.rules.zombie_child import YOUNG_SECONDS


def test_stopped_child(reap) -> None:
    p, child = stopped_child(reap)
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    f = next(f for f in host["findings"] if f["rule"] == "stopped-child")
    assert f["pids"] == [child] and f["severity"] == "error" and rc == 1
    assert "kill -CONT" in f["hint"]
    assert not [x for x in host["findings"] if x["rule"] == "do-wait-orphan"]  # said once, by stopped-child
    os.kill(child, signal.SIGCONT)


LONG_LIVED_CHILD = """
import os, signal
if os.fork() == 0:
    while True:
        signal.pause()
while True:
    signal.pause()   # never reaps: the child, once killed, stays a zombie
"""

ZOMBIE_PARENT = """
import os, signal, sys
n = int(sys.argv[1])
signal.signal(signal.SIGUSR1, lambda *_: [os.waitpid(-1, 0) for _ in range(n)])
for _ in range(n):
    if os.fork() == 0:
        while True:
            signal.pause()  # until the test kills it: then a zombie, reaped on SIGUSR1 only
while True:
    signal.pause()
"""


def seconds_since_start(pid: int) -> float:
    start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    return float(Path("/proc/uptime").read_text().split()[0]) - start / os.sysconf("SC_CLK_TCK")


def _zombie_parents(reap: list, counts: dict[str, int], age: float) -> dict[str, tuple[int, list[int]]]:
    """Parents (name -> n children) whose children run `age` seconds, then are killed: zombies."""
    parents = {
        name: subprocess.Popen([sys.executable, "-c", ZOMBIE_PARENT, str(n)], start_new_session=True)
        for name, n in counts.items()
    }
    reap.extend(parents.values())
    wait_for(lambda: all(len(children_of(parents[k].pid)) == n for k, n in counts.items()), what="children")
    kids = {name: sorted(children_of(p.pid)) for name, p in parents.items()}
    every = [c for cs in kids.values() for c in cs]
    wait_for(lambda: min(map(seconds_since_start, every)) >= age, timeout=age + 30, what=f"children {age} s old")
    for c in every:
        os.kill(c, signal.SIGKILL)
    wait_for(lambda: all(proc_state(c) == "Z" for c in every), what="zombies")
    return {name: (p.pid, kids[name]) for name, p in parents.items()}


@pytest.fixture(scope="module")
def old_zombies(reap_module) -> Iterator[dict[str, tuple[int, list[int]]]]:
    """Zombies that exited YOUNG_SECONDS ago (the rule's bar), made once for the module, and a
    parent whose child has lived that long ("long-lived": a test ends it). Everything here runs on
    one CPU: a zombie's exit time is read from the scheduler's clock, and in a VM each CPU's clock
    can be seconds apart (2.7 s on this project's)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        made = _zombie_parents(reap_module, {"one": 1, "three": 3, "to-reap": 3}, 0)
        live = subprocess.Popen([sys.executable, "-c", LONG_LIVED_CHILD], start_new_session=True)
        reap_module.append(live)
        wait_for(lambda: len(children_of(live.pid)) == 1, what="the long-lived child")
        every = [z for _parent, zs in made.values() for z in zs] + children_of(live.pid)
        wait_for(lambda: min(map(seconds_since_start, every)) >= YOUNG_SECONDS + 0.5, timeout=YOUNG_SECONDS + 30,
                 what=f"zombies {YOUNG_SECONDS} s old")  # fmt: skip
        yield {**made, "long-lived": (live.pid, children_of(live.pid))}
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.slow
def test_zombie_child(old_zombies) -> None:
    parent, zombies = old_zombies["one"]
    rc, host = vastprobe_json("--pid", str(parent), "--sample", "0.3")
    found = [f for f in host["findings"] if f["rule"] == "zombie-child"]
    seen = [(p["pid"], p["state"], p["exited_ago"], p["starttime"]) for p in host["snapshot"]["processes"]
            if p["pid"] in zombies]  # fmt: skip
    assert found, (seen, host["snapshot"]["host"]["uptime"], [g["summary"] for g in host["findings"]])
    f = found[0]
    assert f["pids"] == [parent, *zombies] and f["severity"] == "warning"
    assert host["verdict"] == "degraded" and rc == 0


@pytest.mark.slow
def test_a_zombie_seen_in_one_sample_is_a_note(old_zombies) -> None:
    """Every exiting process is a zombie for a moment: one instant of one or two is no problem."""
    parent, zombies = old_zombies["one"]
    rc, host = vastprobe_json("--pid", str(parent), "--sample", "0")
    f = next(f for f in host["findings"] if f["rule"] == "zombie-child")
    assert f["severity"] == "info" and f["summary"].endswith("(seen in one sample)")
    assert f["pids"] == [parent, *zombies] and host["verdict"] == "healthy" and rc == 0


@pytest.mark.slow
def test_a_pile_up_of_zombies_seen_in_one_sample_is_a_warning(old_zombies) -> None:
    parent, zombies = old_zombies["three"]
    rc, host = vastprobe_json("--pid", str(parent), "--sample", "0")
    f = next(f for f in host["findings"] if f["rule"] == "zombie-child")
    assert f["severity"] == "warning" and f["pids"] == [parent, *zombies] and rc == 0


@pytest.mark.slow
def test_a_zombie_reaped_before_the_second_sample_is_not_reported(old_zombies) -> None:
    parent, zombies = old_zombies["to-reap"]
    rc, host = vastprobe_json_acting_between_samples(lambda: os.kill(parent, signal.SIGUSR1), "--pid", str(parent))
    assert not [f for f in host["findings"] if f["rule"] == "zombie-child"], host["findings"]
    assert all(z not in host["scope"] or proc_state(z) is None for z in zombies)
    assert host["verdict"] == "healthy" and rc == 0


@pytest.mark.skipif(not Path("/proc/self/sched").exists(), reason="needs /proc/PID/sched (CONFIG_SCHED_DEBUG)")
@pytest.mark.slow
def test_a_zombie_that_just_exited_after_a_long_life_is_no_finding(old_zombies) -> None:
    """A batch reaper's zombie of a process that ran for minutes: old by its start, but it exited a
    moment ago (by /proc/PID/sched), so it has not waited on its parent at all."""
    parent, [child] = old_zombies["long-lived"]
    os.kill(child, signal.SIGKILL)
    wait_for(lambda: proc_state(child) == "Z", what="zombie")
    rc, host = vastprobe_json("--pid", str(parent), "--sample", "0.3")
    zombie = next(p for p in host["snapshot"]["processes"] if p["pid"] == child)
    assert zombie["exited_ago"] is not None and zombie["exited_ago"] < YOUNG_SECONDS
    assert not [f for f in host["findings"] if f["rule"] == "zombie-child"], host["findings"]
    assert host["verdict"] == "healthy" and rc == 0


def test_zombies_of_processes_that_just_started_are_no_finding(reap) -> None:
    """A parent that reaps in batches (this VM's PID 1 every ~2 s) has fresh zombies in every
    sample, a pile-up included: a process that started a moment ago cannot have waited long."""
    for sample in ("0", "0.3"):
        # a fresh parent for each diagnose: on a loaded CI machine two diagnoses in a row took the
        # first parent past the rule's 10 s
        parent, zombies = _zombie_parents(reap, {"batch": 3}, 0)["batch"]
        rc, host = vastprobe_json("--pid", str(parent), "--sample", sample)
        assert all(proc_state(z) == "Z" for z in zombies) and set(zombies) <= set(host["scope"])
        assert not [f for f in host["findings"] if f["rule"] == "zombie-child"], host["findings"]
        assert host["verdict"] == "healthy" and rc == 0


def _vfork_parent_in_d(tmp_path: Path, reap) -> subprocess.Popen:
    """A vfork() parent sleeps uninterruptibly until its child execs or exits: a real D state."""
    p = subprocess.Popen([str(compiled_c(tmp_path, "vforker", VFORK_C))], start_new_session=True)
    reap.append(p)
    wait_for(lambda: proc_state(p.pid) == "D", what="parent in D")
    return p


def test_d_state_seen_in_one_sample_is_a_note(tmp_path: Path, reap) -> None:
    p = _vfork_parent_in_d(tmp_path, reap)
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0")
    f = next(f for f in host["findings"] if f["rule"] == "d-state")
    assert f["severity"] == "info" and f["summary"].endswith("(seen in one sample)") and rc == 0


def test_d_state_parent_of_a_vfork_child(tmp_path: Path, reap) -> None:
    p = _vfork_parent_in_d(tmp_path, reap)
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    f = next(f for f in host["findings"] if f["rule"] == "d-state")
    assert f["pids"] == [p.pid] and f["severity"] == "error" and rc == 1
    assert any(e["source"] == "/proc/wchan" and e["detail"] == "kernel_clone" for e in f["evidence"])
    # it waits for its vfork child, not on storage (the hint said "disk, NFS/FUSE, driver"; found by a helper)
    assert "vfork" in f["hint"] and "storage" not in f["hint"], f["hint"]


def test_d_state_that_moves_is_slow_not_stuck() -> None:
    """A process seen in D in both samples whose I/O counters moved is doing heavy I/O."""
    import dataclasses

    from tests.helpers import local_snapshot
    from vastprobe.model import ProcIO
    from vastprobe.probe.script import ProbeParams
    from vastprobe.rules.base import RuleOptions
    from vastprobe.rules.engine import run_rules

    snap = local_snapshot(ProbeParams(sample=0.1))
    p = next(
        p for p in snap.processes if len(p.samples) == 2 and not p.kernel_thread and p.pid not in snap.excluded_pids
    )
    io0, io1 = ProcIO(100, 100, 0, 0), ProcIO(100, 5_000_000, 0, 4_096_000)
    base = dataclasses.replace(p.samples[0], state="D", utime=7, stime=3, io=io0)
    moving = dataclasses.replace(p, state="D", samples=(base, dataclasses.replace(base, io=io1)))
    stuck = dataclasses.replace(p, state="D", samples=(base, base))
    for proc, flagged in ((moving, False), (stuck, True)):
        s = dataclasses.replace(snap, processes=tuple(proc if x.pid == p.pid else x for x in snap.processes))
        found = [f for f in run_rules(s, (p.pid,), RuleOptions()) if f.rule == "d-state"]
        assert bool(found) == flagged


def test_d_state_on_a_slow_disk_is_a_warning_and_elsewhere_an_error() -> None:
    """D over the whole window with no I/O completed, in a block-I/O wait: a disk slower than one
    request a window looks so (`dd oflag=direct` to a throttled disk read STALLED 6 probes of 9, found
    by a helper); a warning, DEGRADED. The same stillness in a driver's or an RPC's wait stays an error."""
    import dataclasses

    from tests.helpers import local_snapshot
    from vastprobe.model.report import verdict
    from vastprobe.probe.script import ProbeParams
    from vastprobe.rules.base import RuleOptions
    from vastprobe.rules.engine import run_rules

    snap = local_snapshot(ProbeParams(sample=0.1))
    p = next(
        p for p in snap.processes if len(p.samples) == 2 and not p.kernel_thread and p.pid not in snap.excluded_pids
    )
    base = dataclasses.replace(p.samples[0], state="D", utime=7, stime=3)
    for wchan, severity in (("iomap_dio_rw", "warning"), ("folio_wait_bit_common", "warning"),
                            ("rpc_wait_bit_killable", "error"), ("uvm_wait_for_gpu", "error")):  # fmt: skip
        stuck = dataclasses.replace(p, state="D", wchan=wchan, samples=(base, base))
        s = dataclasses.replace(snap, processes=tuple(stuck if x.pid == p.pid else x for x in snap.processes))
        found = [f for f in run_rules(s, (p.pid,), RuleOptions()) if f.rule == "d-state"]
        assert [f.severity for f in found] == [severity], (wchan, found)
        assert verdict(tuple(found)) == ("degraded" if severity == "warning" else "stalled"), wchan


FREEZER_V1 = Path("/sys/fs/cgroup/freezer")
FREEZER_V2 = Path("/sys/fs/cgroup/unified")


@pytest.mark.parametrize("sample", ["0.3", "0"])
def test_a_frozen_process_is_said_to_be_frozen_not_a_storage_hang(reap, sample: str) -> None:
    """`docker pause` freezes the container's cgroup: its tasks read D, each in the wait it was in
    (here `hrtimer_nanosleep`). The finding blamed storage or a driver (found by a helper); it now
    says the cgroup is likely frozen and how to thaw it. The verdict stays: nothing moves till thawed.
    From one read too: D in a wait that sleeps interruptibly unless frozen (HEALTHY at --sample 0,
    found by a helper)."""
    if not (FREEZER_V1 / "cgroup.procs").exists() or os.geteuid() != 0:
        pytest.skip("needs root and the cgroup v1 freezer (what docker pause uses there)")
    cg = FREEZER_V1 / f"vastprobe-test-{os.getpid()}-{sample}"
    cg.mkdir()
    p = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"], start_new_session=True)
    reap.append(p)
    try:
        (cg / "cgroup.procs").write_text(str(p.pid))
        (cg / "freezer.state").write_text("FROZEN")
        wait_for(lambda: (cg / "freezer.state").read_text().strip() == "FROZEN" and proc_state(p.pid) == "D",
                 what="the process frozen")  # fmt: skip
        rc, host = vastprobe_json("--pid", str(p.pid), "--sample", sample)
        f = next(f for f in host["findings"] if f["rule"] == "d-state")
        assert f["summary"].endswith("(frozen?)") and "docker unpause" in f["hint"], f
        assert "storage" not in f["hint"] and f["severity"] == "error" and rc == 1 and host["verdict"] == "stalled"
    finally:
        (cg / "freezer.state").write_text("THAWED")
        p.kill()
        p.wait()
        wait_for(lambda: not (cg / "cgroup.procs").read_text().strip(), what="the cgroup empty")
        cg.rmdir()


@pytest.mark.parametrize("sample", ["0.3", "0"])
def test_a_process_frozen_by_cgroup_v2_is_stalled(reap, sample: str) -> None:
    """cgroup v2's freezer (`docker pause` on a v2 host) holds a task asleep (S) in its signal trap
    (do_freezer_trap, get_signal once inlined), not in D: it read HEALTHY, no finding, at one sample
    and at two (found by a helper)."""
    root = next((r for r in (FREEZER_V2, Path("/sys/fs/cgroup")) if (r / "cgroup.subtree_control").exists()), None)
    if root is None or os.geteuid() != 0:
        pytest.skip("needs root and a cgroup v2 hierarchy")
    cg = root / f"vastprobe-test-{os.getpid()}-v2-{sample}"
    try:
        cg.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup v2 group here: {exc}")
    p = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"], start_new_session=True)
    reap.append(p)
    try:
        if not (cg / "cgroup.freeze").exists():
            pytest.skip("this cgroup v2 has no freezer (cgroup.freeze)")
        (cg / "cgroup.procs").write_text(str(p.pid))
        (cg / "cgroup.freeze").write_text("1")
        wait_for(lambda: "frozen 1" in (cg / "cgroup.events").read_text() and proc_state(p.pid) == "S",
                 what="the process frozen")  # fmt: skip
        rc, host = vastprobe_json("--pid", str(p.pid), "--sample", sample)
        said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        assert any(r == "d-state" and sev == "error" and "(its cgroup's freezer)" in s for r, sev, s in said), said
        assert host["verdict"] == "stalled" and rc == 1, said
    finally:
        if (cg / "cgroup.freeze").exists():
            (cg / "cgroup.freeze").write_text("0")
        p.kill()
        p.wait()
        wait_for(lambda: not (cg / "cgroup.procs").read_text().strip(), what="the cgroup empty")
        cg.rmdir()


@pytest.mark.skipif(shutil.which("cpulimit") is None, reason="needs cpulimit (CI installs it)")
@pytest.mark.parametrize("how", ["launched-f", "launched", "by-pid", "by-pid-glued"])
def test_a_job_throttled_by_cpulimit_is_not_stopped_at_one_read(reap, tmp_path: Path, how: str) -> None:
    """cpulimit stops and continues its job about ten times a second: at --sample 0 a working job read
    STALLED, exit 1, "python3 is stopped (T)", 7 runs of 7, its log growing (found by a helper). With a
    throttler of it running, one read of T proves nothing: its parent (`-f`), beside it (a launch without
    -f), or naming its PID (`-p N`, `-pN`)."""
    script = tmp_path / "busy.py"
    script.write_text("while True:\n    sum(range(100000))\n")
    busy = [sys.executable, str(script)]
    if how.startswith("launched"):
        limiter = subprocess.Popen(["cpulimit", "-l", "5", *(["-f"] if how == "launched-f" else []), "--", *busy],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        reap.append(limiter)

        def job_pid() -> int | None:
            for d in Path("/proc").iterdir():
                try:
                    if d.name.isdigit() and (d / "cmdline").read_bytes().split(b"\0")[:2] == [b.encode() for b in busy]:
                        return int(d.name)
                except OSError:
                    continue
            return None

        wait_for(lambda: job_pid() is not None, what="the job cpulimit launched")
        target = job_pid()
        assert target is not None
        if how == "launched":  # cpulimit runs beside it: it is no child of the limiter, killed below
            reap.append(subprocess.Popen(["sh", "-c", f"while kill -0 {target} 2>/dev/null; do sleep 1; done"]))
    else:
        job = subprocess.Popen(busy, start_new_session=True)
        reap.append(job)
        target = job.pid
        pid_args = ["-p", str(job.pid)] if how == "by-pid" else [f"-p{job.pid}"]
        limiter = subprocess.Popen(["cpulimit", "-l", "5", *pid_args], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        reap.append(limiter)
    for _attempt in range(20):  # a read that finds it stopped: the case
        wait_for(lambda: proc_state(target) == "T", what="the job stopped by cpulimit")
        rc, host = vastprobe_json("--pid", str(target), "--sample", "0")
        p = next((q for q in host["snapshot"]["processes"] if q["pid"] == target), None)
        if p is not None and p["state"] == "T":
            break
    else:
        pytest.skip("never read stopped: the case not met")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert host["verdict"] != "stalled" and rc == 0, said


@pytest.mark.skipif(shutil.which("cpulimit") is None, reason="needs cpulimit (CI installs it)")
def test_a_process_stopped_below_a_cpulimit_target_is_still_stopped(reap) -> None:
    """cpulimit throttles its target only (without -m): a `sleep` the target's bash stopped is continued
    by nobody, and read HEALTHY at --sample 0 while the throttler's every ancestor counted (found by a
    helper)."""
    job = subprocess.Popen(["cpulimit", "-f", "-l", "50", "--", "bash", "-c", "sleep 1000 & kill -STOP $!; wait"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: bool(children_of(job.pid)) and bool(children_of(children_of(job.pid)[0])), what="bash's sleep")
    bash = children_of(job.pid)[0]
    sleeper = children_of(bash)[0]
    wait_for(lambda: proc_state(sleeper) == "T", what="the sleep stopped")
    rc, host = vastprobe_json("--pid", str(bash), "--sample", "0")
    (f,) = [f for f in host["findings"] if f["rule"] == "stopped-child"]
    assert sleeper in f["pids"] and f["severity"] == "error", f
    assert host["verdict"] == "stalled" and rc == 1, host["findings"]


#: in a PID namespace of its own (so other tests' stopped processes are not this host's story): a tmux pane
#: runs a tracer at its prompt, attached to a sleeper (PTRACE_ATTACH, then `input()` at its terminal)
DEBUGGER_AT_A_PROMPT = r"""
cat > "$D/tracer.py" <<'PY'
import ctypes, os, subprocess, sys
sleeper = subprocess.Popen([sys.executable, "-c", "import time\nwhile 1: time.sleep(1)"])
libc = ctypes.CDLL(None, use_errno=True)
assert libc.ptrace(16, sleeper.pid, 0, 0) == 0  # PTRACE_ATTACH: it stops, traced (t)
os.waitpid(sleeper.pid, os.WUNTRACED | 0x40000000)  # __WALL
open(os.environ["D"] + "/sleeper", "w").write(str(sleeper.pid))
input("(tracer) ")
PY
tmux -S "$D/sock" -f /dev/null new-session -d -s g -x 120 -y 30 "$PY $D/tracer.py; sleep 600"
i=0; until [ -s "$D/sleeper" ] || [ $i -ge 200 ]; do sleep 0.05; i=$((i+1)); done
sleep 0.3
"$PY" -m vastprobe diagnose local --format json --sample 0.3 || true
tmux -S "$D/sock" kill-server
"""


@pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("unshare") is None, reason="needs tmux and unshare")
def test_a_process_held_by_a_debugger_at_its_prompt_is_a_note_on_a_whole_host(tmp_path: Path) -> None:
    """gdb attached at its `(gdb)` prompt in a tmux pane: the whole host read STALLED, exit 1, "python3
    is stopped (t)" (found by a helper). Someone debugging holds it on purpose, as Ctrl-Z does: a note
    with no scope (a stand-in tracer: PTRACE_ATTACH, then its prompt)."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a PID namespace")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TMUX")},
        "PY": sys.executable,
        "D": str(tmp_path),
    }
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", DEBUGGER_AT_A_PROMPT],
                       capture_output=True, text=True, env=env, timeout=120, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert r.stdout, r.stderr
    host = json.loads(r.stdout)["hosts"][0]
    sleeper = int((tmp_path / "sleeper").read_text())
    said = [(f["rule"], f["severity"], f["summary"], f["pids"]) for f in host["findings"]]
    held = [f for f in said if f[0] == "stopped-child" and sleeper in f[3]]
    assert held and held[0][1] == "info" and "held by a debugger someone works in" in held[0][2], said
    assert host["verdict"] != "stalled" and not [f for f in said if f[1] in ("error", "critical")], said
