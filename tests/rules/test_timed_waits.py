"""A wait with a deadline is a timer: a futex wait with a timeout (`Event.wait(3600)`, a scheduler
between hourly runs), `select` with a timeout, an event loop waiting for its next timer
(`asyncio.sleep`). Only nanosleep was read so, and each read STALLED, exit 1, beside a quiet log; a
flock holder sleeping so between steps made the next cron run STALLED with a "did nothing" proof
(found by a helper). The untimed twin stays STALLED: it waits for ever."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import proc_wchan, vastprobe_json, wait_for

WAITS = {
    "event": "import threading; threading.Event().wait(3600)",
    "select": "import select; select.select([], [], [], 3600)",
    "asyncio": "import asyncio; asyncio.run(asyncio.sleep(3600))",
    "untimed": "import threading; threading.Event().wait()",
}
ASLEEP = ("futex", "do_select", "core_sys_select", "poll_schedule_timeout", "do_epoll_wait", "ep_poll")


def quiet_log(tmp_path: Path) -> Path:
    log = tmp_path / "job.log"
    log.write_text("waiting for the next run\n")
    os.utime(log, (1, 1))
    return log


@pytest.mark.parametrize("how", sorted(WAITS))
def test_a_job_waiting_with_a_deadline_beside_a_quiet_log_is_not_stalled(reap, tmp_path: Path, how: str) -> None:
    log = quiet_log(tmp_path)
    job = subprocess.Popen([sys.executable, "-c", WAITS[how]], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).startswith(ASLEEP), what="the job asleep")
    rc, host = vastprobe_json("--pid", str(job.pid), "--log", str(log), "--sample", "0.5")
    said = [
        (f["rule"], f["severity"], f["summary"])
        for f in host["findings"]
        if job.pid in f["pids"] or f["rule"] == "missing-logs"
    ]
    if how == "untimed":  # nothing wakes it: the control
        assert host["verdict"] == "stalled" and rc == 1, said
        return
    assert host["verdict"] == "degraded" and rc == 0, said
    assert any(r == "missing-logs" and "sleeps on a timer" in s for r, _sev, s in said), said


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock (util-linux)")
def test_the_next_cron_run_behind_a_holder_waiting_with_a_deadline_is_not_stalled(reap, tmp_path: Path) -> None:
    lock = tmp_path / "job.lock"
    holder = subprocess.Popen(["flock", str(lock), sys.executable, "-c", WAITS["event"]], start_new_session=True)
    reap.append(holder)
    wait_for(lambda: any(proc_wchan(int(d)).startswith("futex") for d in os.listdir("/proc") if d.isdigit()
                         and Path(f"/proc/{d}/stat").exists() and _ppid(int(d)) == holder.pid), what="the holder asleep")  # fmt: skip
    nxt = subprocess.Popen(["flock", str(lock), "true"], start_new_session=True)
    reap.append(nxt)
    wait_for(lambda: proc_wchan(nxt.pid).startswith(("flock", "locks_lock", "__flock")), what="the next run queued")
    rc, host = vastprobe_json("--pid", str(nxt.pid), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert host["verdict"] != "stalled" and rc == 0, said


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
