"""file-lock-wait on fcntl record locks, POSIX and OFD (F_OFD_SETLK: QEMU's image locks, Samba, Ceph):
/proc/locks names no process for an OFD lock (-1), so its holder is who else has the file open."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import proc_state, proc_wchan, vastprobe_json, wait_for

#: hold KIND PATH [stop]: take a write lock and sleep (stopping itself with `stop`); wait KIND PATH: wait for it
LOCKER = r"""
import fcntl, os, struct, sys, time
kind, path = sys.argv[2], sys.argv[3]
fd = os.open(path, os.O_RDWR | os.O_CREAT)
lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)  # struct flock; l_pid 0, as OFD locks require
ofd = kind == "ofd"
if sys.argv[1] == "hold":
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK if ofd else fcntl.F_SETLK, lock)
    print("held", flush=True)
    if sys.argv[4:] == ["stop"]:
        os.kill(os.getpid(), 19)  # SIGSTOP
    time.sleep(600)
else:
    fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if ofd else fcntl.F_SETLKW, lock)
"""


def _locked(reap: list, tmp_path: Path, kind: str, stop: bool) -> tuple[int, int]:
    path = tmp_path / f"{kind}.lock"
    holder = subprocess.Popen([sys.executable, "-c", LOCKER, "hold", kind, str(path), *(["stop"] if stop else [])],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    reap.append(holder)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    waiter = subprocess.Popen([sys.executable, "-c", LOCKER, "wait", kind, str(path)], start_new_session=True)
    reap.append(waiter)
    wait_for(lambda: proc_wchan(waiter.pid).startswith(("fcntl_setlk", "locks_lock_inode_wait", "posix_lock")),
             what="the waiter on the lock")  # fmt: skip
    if stop:
        wait_for(lambda: proc_state(holder.pid) == "T", what="the holder stopped")
    else:
        wait_for(lambda: proc_wchan(holder.pid).startswith("hrtimer"), what="the holder asleep")
    return holder.pid, waiter.pid


@pytest.mark.parametrize("sample", ["1", "0"])
@pytest.mark.parametrize("kind", ["ofd", "posix"])
def test_a_record_lock_held_by_a_stopped_process_is_a_stall(reap, tmp_path: Path, kind: str, sample: str) -> None:
    """An OFD lock held by a stopped process: DEGRADED at --sample 1 and HEALTHY at 0, "held by a process
    not visible here" (not in /proc/locks), though the request is there and the one other opener is the
    stopped holder (found by a helper). The POSIX twin always named its holder."""
    holder, waiter = _locked(reap, tmp_path, kind, stop=True)
    rc, host = vastprobe_json("--pid", str(waiter), "--sample", sample)
    (f,) = [f for f in host["findings"] if f["rule"] == "file-lock-wait"]
    assert f["pids"][:2] == [waiter, holder] and f"held by {holder} (python" in f["summary"], f["summary"]
    assert "not visible" not in f["summary"] and "not in /proc/locks" not in str(f["evidence"]), f
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, f["summary"]
    os.kill(holder, signal.SIGKILL)


@pytest.mark.parametrize("kind", ["ofd", "posix"])
def test_a_record_lock_held_by_a_sleeping_process_is_no_stall(reap, tmp_path: Path, kind: str) -> None:
    """The control: the holder sleeps on a timer, and may let go when it wakes."""
    holder, waiter = _locked(reap, tmp_path, kind, stop=False)
    rc, host = vastprobe_json("--pid", str(waiter), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert host["verdict"] != "stalled" and rc == 0, said
    assert holder > 0
