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
fd = os.open(path, os.O_RDONLY if sys.argv[1] == "open" else os.O_RDWR | os.O_CREAT)
lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)  # struct flock; l_pid 0, as OFD locks require
ofd = kind == "ofd"
if sys.argv[1] == "hold":
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK if ofd else fcntl.F_SETLK, lock)
    print("held", flush=True)
    if sys.argv[4:] == ["stop"]:
        os.kill(os.getpid(), 19)  # SIGSTOP
    time.sleep(600)
elif sys.argv[1] == "open":  # a bystander: the file open to read, no lock, stopped
    print("held", flush=True)
    os.kill(os.getpid(), 19)
    time.sleep(600)
elif sys.argv[1] == "hold-then-wait":  # takes nothing on PATH, has it open; waits for a lock on argv[4]
    other = os.open(sys.argv[4], os.O_RDWR | os.O_CREAT)
    print("held", flush=True)
    fcntl.fcntl(other, fcntl.F_OFD_SETLKW, lock)
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


def _start(reap: list, *args: str) -> int:
    p = subprocess.Popen([sys.executable, "-c", LOCKER, *args], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)  # fmt: skip
    reap.append(p)
    assert p.stdout is not None and p.stdout.readline() == "held\n"
    return p.pid


def test_an_ofd_lock_is_not_said_held_by_a_stopped_reader_of_the_file(reap, tmp_path: Path) -> None:
    """The holder sleeps (it lets go later); a stopped process has the file open to read, with no lock.
    Its first version named every opener: the bystander made it STALLED, exit 1 (found by a helper). A
    write lock needs the file open for writing: the sleeping holder alone, no proof."""
    db = tmp_path / "db"
    holder = _start(reap, "hold", "ofd", str(db))
    bystander = _start(reap, "open", "ofd", str(db))
    wait_for(lambda: proc_state(bystander) == "T", what="the bystander stopped")
    waiter = subprocess.Popen([sys.executable, "-c", LOCKER, "wait", "ofd", str(db)], start_new_session=True)
    reap.append(waiter)
    wait_for(lambda: proc_wchan(waiter.pid).startswith(("fcntl_setlk", "locks_lock_inode_wait", "posix_lock"))
             and proc_wchan(holder).startswith("hrtimer"), what="the waiter on the lock, the holder asleep")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(waiter.pid), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"], f["pids"]) for f in host["findings"]]
    assert not [f for f in said if bystander in f[3]], said
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert host["verdict"] != "stalled" and rc == 0, said


def test_two_ofd_waiters_each_with_the_others_file_open_are_no_deadlock(reap, tmp_path: Path) -> None:
    """H1 holds B and H2 holds A, asleep; X has A open and waits for B, Y has B open and waits for A.
    Both got their locks when the holders let go, yet read as a cycle, critical, exit 1 (found by a
    helper): with two openers who holds each lock is unknown."""
    a, b = tmp_path / "A", tmp_path / "B"
    _start(reap, "hold", "ofd", str(b))
    _start(reap, "hold", "ofd", str(a))
    x = _start(reap, "hold-then-wait", "ofd", str(a), str(b))
    y = _start(reap, "hold-then-wait", "ofd", str(b), str(a))
    wait_for(lambda: all(proc_wchan(w).startswith(("fcntl_setlk", "locks_lock_inode_wait")) for w in (x, y)),
             what="both waiting")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(x), "--pid", str(y), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f[0] == "deadlock" or f[1] in ("error", "critical")], said
    assert host["verdict"] != "stalled" and rc == 0, said
