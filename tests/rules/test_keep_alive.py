"""`sleep infinity`, the keep-alive a container's entrypoint ends with (or a placeholder a script waits
on), idles by design: beside a quiet log it proves no stall of the job (a warning, exit 0). A lock held
by one is held for ever, though: the lock's waiter stays STALLED. Real coreutils sleep, real flock."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_wchan, vastprobe_json, wait_for

pytestmark = pytest.mark.skipif(shutil.which("sleep") is None, reason="needs coreutils sleep")


def quiet(log: Path) -> None:
    os.utime(log, (1, 1))  # its last line long ago


@pytest.mark.parametrize("shape", ["entrypoint", "placeholder"])
def test_a_keep_alive_beside_a_quiet_log_is_no_stall(reap, tmp_path: Path, shape: str) -> None:
    """An entrypoint that starts a worker logging elsewhere every few seconds, then `exec sleep
    infinity`; and `sleep infinity & wait` under a shell. Each read STALLED, exit 1 (missing-logs,
    do-wait-orphan "makes no progress"), found by a helper."""
    log = tmp_path / "entry.log"
    script = {
        "entrypoint": f"exec >>{log} 2>&1; echo ready; (while :; do date >> {tmp_path}/worker.log; sleep 5; done) & "
        "exec sleep infinity",
        "placeholder": f"exec >>{log} 2>&1; echo ready; sleep infinity & wait",
    }[shape]
    job = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    reap.append(job)
    sleeper = job.pid if shape == "entrypoint" else None

    def settled() -> bool:
        nonlocal sleeper
        if sleeper is None:
            sleeper = next((k for k in children_of(job.pid) if proc_wchan(k).endswith("do_sys_pause")), None)
        return sleeper is not None and proc_wchan(sleeper).endswith("do_sys_pause") and log.stat().st_size > 0

    wait_for(settled, what="sleep infinity in pause()")
    quiet(log)
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert host["verdict"] == "degraded" and rc == 0, said
    assert any(r == "missing-logs" and "keep-alive (`sleep infinity`)" in s for r, _sev, s in said), said


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock (util-linux)")
def test_a_lock_held_by_a_keep_alive_still_stalls_its_waiter(reap, tmp_path: Path) -> None:
    """The control: `flock L sleep infinity` holds L for ever; the next `flock L` waits for ever."""
    lock = tmp_path / "job.lock"
    holder = subprocess.Popen(["flock", str(lock), "sleep", "infinity"], start_new_session=True)
    reap.append(holder)
    wait_for(
        lambda: any(proc_wchan(k).endswith("do_sys_pause") for k in children_of(holder.pid)), what="the holder asleep"
    )
    waiter = subprocess.Popen(["flock", str(lock), "true"], start_new_session=True)
    reap.append(waiter)
    wait_for(lambda: proc_wchan(waiter.pid).startswith(("locks_", "flock_")), what="the waiter on the lock")
    rc, host = vastprobe_json("--pid", str(waiter.pid), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert any(r == "file-lock-wait" and sev == "error" for r, sev, _s in said), said
    assert host["verdict"] == "stalled" and rc == 1, said


def test_a_pipe_a_keep_alive_holds_open_still_stalls_its_reader(reap, tmp_path: Path) -> None:
    """`x=$(sleep infinity & echo hi)`: the orphan keep-alive holds the substitution's pipe open, and
    bash waits for its end of file for ever. The quiet log's finding said "the job only sleeps, in a
    keep-alive" beside that error (the attack on the keep-alive change found it): a keep-alive ends no
    wait on what it holds."""
    log = tmp_path / "job.log"
    job = subprocess.Popen(["bash", "-c", f"exec >>{log} 2>&1; echo start; x=$(sleep infinity & echo hi); echo $x"],
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).endswith("pipe_read") and log.stat().st_size > 0, what="bash reading the pipe")
    quiet(log)
    rc, host = vastprobe_json("--pid", str(job.pid), "--log", str(log), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if "keep-alive" in f[2]], said
    assert host["verdict"] == "stalled" and rc == 1, said
