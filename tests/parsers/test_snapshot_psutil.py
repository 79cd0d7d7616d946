"""psutil reads /proc its own way; the parsed `local` snapshot must agree with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import local_snapshot, proc_state, wait_for
from vastprobe.model import Unavailable
from vastprobe.probe.script import ProbeParams

STATE = {"sleeping": "S", "running": "R", "stopped": "T", "zombie": "Z", "disk-sleep": "D", "idle": "I"}

THREADED = """
import sys, threading, time
fs = [open(p, "w") for p in sys.argv[1:]]
ev = threading.Event()
ts = [threading.Thread(target=ev.wait) for _ in range(4)]
[t.start() for t in ts]
print("ready", flush=True)
ev.wait()
"""


@pytest.fixture
def live_tree(tmp_path: Path):
    files = [str(tmp_path / "a.log"), str(tmp_path / "b with space.log")]
    threaded = subprocess.Popen([sys.executable, "-c", THREADED, *files], stdout=subprocess.PIPE, text=True)
    assert threaded.stdout is not None and threaded.stdout.readline().strip() == "ready"
    shell = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 301 & wait"])
    stopped = subprocess.Popen(["sleep", "302"])
    stopped.send_signal(19)  # SIGSTOP
    wait_for(lambda: proc_state(stopped.pid) == "T", what="child stopped")
    # forked and exec'd: a child still named sh (not yet sleep) read 'sh' in the probe and 'sleep' in psutil
    wait_for(lambda: sorted(c.name() for c in psutil.Process(shell.pid).children()) == ["sleep", "sleep"],
             what="sleepers started")  # fmt: skip
    procs = [threaded, shell, stopped]
    pids = [p.pid for p in procs] + [c.pid for c in psutil.Process(shell.pid).children()]
    # each settled in its wait: the threaded one prints "ready" before its main thread blocks, and a
    # loaded CI machine's probe read it running (R) where psutil, just after, read it asleep
    wait_for(lambda: all(proc_state(pid) in ("S", "T") for pid in pids), what="every process in its wait")
    yield pids
    stopped.send_signal(18)
    for p in psutil.Process(shell.pid).children():
        p.kill()
    for p in procs:
        p.kill()
        p.wait()


def test_snapshot_agrees_with_psutil(live_tree: list[int]) -> None:
    snap = local_snapshot(ProbeParams(sample=0.1))
    for pid in live_tree:
        ps = psutil.Process(pid)
        p = snap.process(pid)
        assert p is not None, pid
        assert p.ppid == ps.ppid()
        assert p.comm == ps.name()
        assert p.state == STATE[ps.status()]
        assert p.threads == ps.num_threads()
        assert not isinstance(p.fds, Unavailable)
        ours = {e.path for e in p.fds if e.path.startswith("/") and Path(e.path).is_file()}
        theirs = {f.path for f in ps.open_files()}
        assert ours == theirs, (pid, ours, theirs)
        assert list(p.cmdline) == ps.cmdline()


def test_every_live_process_is_seen(live_tree: list[int]) -> None:
    """Every process that lived through the whole probe is in the snapshot."""
    before = set(psutil.pids())
    snap = local_snapshot(ProbeParams(sample=0))
    stable = before & set(psutil.pids())
    seen = {p.pid for p in snap.processes}
    assert set(live_tree) <= seen
    assert stable - seen == set()
