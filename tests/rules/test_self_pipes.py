"""A process reading a pipe that only it holds the write end of is a deadlock (a critical finding),
save for two idioms found on real programs that read STALLED, exit 1: a command listener on a
named pipe it opened read-write (anyone may open the FIFO by its path and write a command), and
the self-pipe trick (`signal.set_wakeup_fd`: the program's own signal handler writes the pipe)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import proc_wchan, vastprobe_json, wait_for

SELF_PIPE = """
import os, signal, subprocess
r, w = os.pipe()
os.set_blocking(w, False)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGCHLD, lambda *a: None)
child = subprocess.Popen(["sleep", "600"])
print(child.pid, flush=True)
print("woken by", os.read(r, 1)[0], flush=True)
"""


def test_a_command_listener_on_a_fifo_it_holds_read_write_is_healthy(reap, tmp_path: Path) -> None:
    ctl, log = tmp_path / "ctl", tmp_path / "log"
    os.mkfifo(ctl)
    job = subprocess.Popen(["bash", "-c", f"exec 3<>{ctl}; while read -r l <&3; do echo \"got $l\" >> {log}; done"],
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).endswith("pipe_read"), what="the listener reading its FIFO")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    assert not [f for f in host["findings"] if f["rule"] == "deadlock"], host["findings"]
    assert host["verdict"] == "healthy" and rc == 0, host["headline"]
    with open(ctl, "w") as f:  # anyone can: that is why it was never a deadlock
        f.write("hello\n")
    wait_for(lambda: log.exists() and log.read_text() == "got hello\n", what="the command served")


def test_a_program_waiting_on_its_self_pipe_for_a_signal_is_a_note(reap) -> None:
    job = subprocess.Popen([sys.executable, "-c", SELF_PIPE], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None
    child = int(job.stdout.readline())
    wait_for(lambda: proc_wchan(job.pid).endswith("pipe_read"), what="reading its self-pipe")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    found = [f for f in host["findings"] if f["rule"] == "deadlock"]
    assert [f["severity"] for f in found] == ["info"], found
    assert "catches SIGCHLD: it waits for a signal (the self-pipe trick" in found[0]["summary"]
    assert host["verdict"] == "healthy" and rc == 0, host["headline"]
    os.kill(child, signal.SIGTERM)
    assert job.stdout.readline().strip() == "woken by 17"  # SIGCHLD, written by the handler
    assert job.wait(timeout=10) == 0
