"""A waiter that polls for an unrelated process to exit, as its command line says: `tail --pid=P`
(an entrypoint waiting for its daemon), and a shell loop `while kill -0 P; do sleep 1; done`. It
sleeps on a timer between polls, so no wait channel shows P; with P stopped it read HEALTHY (found by
a helper). P stopped: STALLED, naming P; P at work: HEALTHY."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import children_of, proc_state, proc_text, vastprobe_json, wait_for

WORK = "while True: sum(range(1000))"


@pytest.mark.parametrize("how", ["tail", "kill-0"])
@pytest.mark.parametrize("target", ["stopped", "computes"])
def test_a_waiter_polling_for_a_process_to_exit_waits_on_it(reap, how: str, target: str) -> None:
    daemon = subprocess.Popen([sys.executable, "-c", WORK], start_new_session=True)
    reap.append(daemon)
    if target == "stopped":
        os.kill(daemon.pid, signal.SIGSTOP)
        wait_for(lambda: proc_state(daemon.pid) == "T", what="the daemon stopped")
    script = (
        f"tail --pid={daemon.pid} -f /dev/null; echo done"
        if how == "tail"
        else f"while kill -0 {daemon.pid} 2>/dev/null; do sleep 1; done; echo done"
    )
    waiter = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    reap.append(waiter)
    # its child is tail (or the loop's sleep), asleep: a child seen just after fork is still bash, whose
    # command line names no PID to poll for (a clean-clone CI read it so: no finding)
    wait_for(lambda: any(proc_text(k, "comm").strip() in ("tail", "sleep") and proc_state(k) == "S"
                         for k in children_of(waiter.pid)), what="the waiter polling")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(waiter.pid), "--sample", "0.5")
    errors = [f for f in host["findings"] if f["severity"] in ("error", "critical")]
    if target == "computes":
        assert not errors and host["verdict"] == "healthy" and rc == 0, host["findings"]
        return
    assert errors, host["findings"]
    f = errors[0]
    assert f"python ({daemon.pid}), which is stopped (T)" in f["summary"] and daemon.pid in f["pids"], f["summary"]
    assert f"kill -CONT {daemon.pid}" in f["hint"], f["hint"]
    assert any("polls for" in e["detail"] for e in f["evidence"]), f["evidence"]
    assert host["verdict"] == "stalled" and rc == 1


#: forks a child that exits at once, prints its PID, and stops itself before reaping it: a zombie whose
#: parent is stopped
UNREAPED = """
import os, signal
kid = os.fork()
if kid == 0:
    os._exit(0)
print(kid, flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
os.wait()
"""


def test_a_waiter_polling_for_a_zombie_whose_parent_is_stopped_waits_on_the_parent(reap) -> None:
    """kill(Z, 0) answers for a zombie until its parent reaps it: `tail --pid=Z` of a child whose
    parent is stopped waits for ever. It read HEALTHY: the chain ended at the zombie (found by a
    helper). The wait is on the parent, stopped: STALLED."""
    parent = subprocess.Popen([sys.executable, "-c", UNREAPED], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)  # fmt: skip
    reap.append(parent)
    assert parent.stdout is not None
    zombie = int(parent.stdout.readline())
    wait_for(lambda: proc_state(parent.pid) == "T" and proc_state(zombie) == "Z", what="a zombie, its parent stopped")
    waiter = subprocess.Popen(["bash", "-c", f"tail --pid={zombie} -f /dev/null; echo done"], start_new_session=True,
                              stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(waiter)
    wait_for(lambda: any(proc_text(k, "comm").strip() == "tail" and proc_state(k) == "S" for k in children_of(waiter.pid)),
             what="tail polling")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(waiter.pid), "--sample", "0.5")
    errors = [f for f in host["findings"] if f["severity"] in ("error", "critical")]
    assert errors and parent.pid in errors[0]["pids"], host["findings"]
    assert f"({parent.pid}), which is stopped (T)" in errors[0]["summary"], errors[0]["summary"]
    assert host["verdict"] == "stalled" and rc == 1
    parent.send_signal(signal.SIGCONT)
