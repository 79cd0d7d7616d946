"""oom-killed-child on real OOM kills: blame during the job, context before it."""

from __future__ import annotations

import subprocess
import sys

from tests.cgroup_lab import MemoryCgroup
from tests.helpers import children_of, vastprobe_json, wait_for

HOG = "b = bytearray(200 * 1024 * 1024)"


def oom_kill_now(cg: MemoryCgroup) -> None:
    before = cg.oom_kills()
    r = subprocess.run(["sh", "-c", f"echo $$ > {cg.procs_file}; exec {sys.executable} -c '{HOG}'"])
    assert r.returncode == -9  # SIGKILL from the OOM killer (a shell would report 137)
    wait_for(lambda: cg.oom_kills() > before, what="oom_kill counter")


def test_kill_older_than_the_watched_processes_is_context(reap) -> None:
    cg = MemoryCgroup(40 * 1024 * 1024)
    try:
        oom_kill_now(cg)
        p = subprocess.Popen(["bash", "-c", "sleep 1000 & wait"], start_new_session=True)
        reap.append(p)
        wait_for(lambda: len(children_of(p.pid)) == 1, what="watched job started")
        rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
        ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child"]
        assert ooms and all(f["severity"] == "info" for f in ooms), [
            (f["summary"], f["evidence"], host["scope"]) for f in ooms if f["severity"] != "info"
        ]
        assert host["verdict"] == "healthy" and rc == 0
    finally:
        cg.remove()


def test_kill_during_the_job_names_the_parent_that_lost_it(reap) -> None:
    cg = MemoryCgroup(40 * 1024 * 1024)
    try:
        script = f"sleep 1000 & sh -c 'echo $$ > {cg.procs_file}; exec {sys.executable} -c \"{HOG}\"'; wait"
        p = subprocess.Popen(["bash", "-c", script], start_new_session=True)
        reap.append(p)
        wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="OOM kill")
        _rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
        f = next(f for f in host["findings"] if f["rule"] == "oom-killed-child")
        assert f["severity"] == "error" and f["pids"] == [p.pid]
        details = " ".join(e["detail"] for e in f["evidence"])
        assert "40 MiB" in details and cg.name in details and "resident at death" in details
    finally:
        cg.remove()
