"""stopped-child, zombie-child and d-state on real processes in those states."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, vastprobe_json, wait_for


def test_stopped_child(reap) -> None:
    p = subprocess.Popen(["sh", "-c", "sleep 1000 & wait"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 1, what="child started")
    child = children_of(p.pid)[0]
    import os

    os.kill(child, signal.SIGSTOP)
    wait_for(lambda: proc_state(child) == "T", what="child stopped")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    f = next(f for f in host["findings"] if f["rule"] == "stopped-child")
    assert f["pids"] == [child] and f["severity"] == "error" and rc == 1
    assert "kill -CONT" in f["hint"]
    assert not [x for x in host["findings"] if x["rule"] == "do-wait-orphan"]  # said once, by stopped-child
    os.kill(child, signal.SIGCONT)


def test_zombie_child(reap) -> None:
    # the parent execs into sleep, which never waits: its exited child stays a zombie
    p = subprocess.Popen(["sh", "-c", "sh -c 'exit 0' & exec sleep 1000"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: any(proc_state(c) == "Z" for c in children_of(p.pid)), what="zombie")
    zombie = next(c for c in children_of(p.pid) if proc_state(c) == "Z")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    f = next(f for f in host["findings"] if f["rule"] == "zombie-child")
    assert f["pids"] == [p.pid, zombie] and f["severity"] == "warning"
    assert host["verdict"] == "degraded" and rc == 0


VFORK_C = r"""
#include <unistd.h>
int main(void) { if (vfork() == 0) { for (;;) pause(); } return 0; }
"""


def test_d_state_parent_of_a_vfork_child(tmp_path: Path, reap) -> None:
    """A vfork() parent sleeps uninterruptibly until its child execs or exits: a real D state."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler to make a vfork() parent")
    src, exe = tmp_path / "vfork.c", tmp_path / "vforker"
    src.write_text(VFORK_C)
    subprocess.run([cc, "-o", str(exe), str(src)], check=True)
    p = subprocess.Popen([str(exe)], start_new_session=True)
    reap.append(p)
    wait_for(lambda: proc_state(p.pid) == "D", what="parent in D")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    f = next(f for f in host["findings"] if f["rule"] == "d-state")
    assert f["pids"] == [p.pid] and f["severity"] == "error" and rc == 1
    assert any(e["source"] == "/proc/wchan" and e["detail"] == "kernel_clone" for e in f["evidence"])
