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
