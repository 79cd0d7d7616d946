"""no-progress with real processes: a trainer that holds its log open and hangs inside itself (a
lock it already holds: the futex names no other process), found without --log. The silent log is
the symptom under it. Controls: the same trainer logging, one that computes without logging, a
whole host (no scope), one sample, and a wait chain that explains the silence itself."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import children_of, cpu_throttled_cgroup, proc_wchan, vastprobe_json, wait_for

TRAINER = textwrap.dedent("""
    import sys, threading, time
    log = open(sys.argv[1], "w")
    log.write("epoch 1 loss 0.93\\n"); log.flush()
    mode = sys.argv[2]
    if mode == "lock":               # a lock taken twice: waits on itself for ever
        lock = threading.Lock(); lock.acquire(); lock.acquire()
    elif mode == "logging":          # healthy: a line a tenth of a second
        while True:
            log.write("step\\n"); log.flush(); time.sleep(0.1)
    elif mode == "compute":          # healthy: a long step that logs at its end
        while True:
            sum(i * i for i in range(10000))
    elif mode == "thread":           # healthy: the step in a worker thread the main thread joins
        def step():
            while True:
                sum(i * i for i in range(10000))
        worker = threading.Thread(target=step); worker.start(); worker.join()
""")


def trainer(reap: list, tmp_path: Path, mode: str, stale: bool = True) -> tuple[int, Path]:
    script, log = tmp_path / "train.py", tmp_path / "train.log"
    script.write_text(TRAINER)
    p = subprocess.Popen([sys.executable, str(script), str(log), mode], start_new_session=True)
    reap.append(p)
    wait_for(lambda: log.exists() and log.stat().st_size > 0, what="the first log line")
    if mode == "lock":
        wait_for(lambda: proc_wchan(p.pid).startswith("futex"), what="the trainer in its lock")
    if stale:
        old = time.time() - 900
        os.utime(log, (old, old))  # as if the last line were 15 minutes old
    return p.pid, log


def rules(host: dict) -> list[str]:
    return [f["rule"] for f in host["findings"]]


def test_a_trainer_hung_inside_itself_is_named_without_log(reap, tmp_path: Path) -> None:
    pid, log = trainer(reap, tmp_path, "lock")
    rc, host = vastprobe_json("--pid", str(pid), "--sample", "1")
    assert rc == 1 and host["verdict"] == "stalled"
    (f,) = [f for f in host["findings"] if f["rule"] == "no-progress"]
    assert f["summary"].startswith("python") and f"({pid}) is alive but makes no progress" in f["summary"]
    assert str(log) in f["summary"] and "futex" in f["summary"], f["summary"]
    assert f["pids"] == [pid] and "py-spy dump --pid" in f["hint"]
    first = host["incidents"][0]
    assert first["root"]["rule"] == "no-progress"  # the cause first, the silent log under it
    assert [c["rule"] for c in first["consequences"]] == ["missing-logs"]
    assert host["headline"].startswith(f["summary"])


def test_one_sample_cannot_say_no_progress(reap, tmp_path: Path) -> None:
    pid, _log = trainer(reap, tmp_path, "lock")
    _rc, host = vastprobe_json("--pid", str(pid), "--sample", "0")
    assert "no-progress" not in rules(host) and "missing-logs" in rules(host)


@pytest.mark.parametrize("mode", ["logging", "compute"])
def test_a_trainer_that_works_is_no_finding(reap, tmp_path: Path, mode: str) -> None:
    pid, _log = trainer(reap, tmp_path, mode, stale=mode == "compute")  # computing: its log is old, it moves
    _rc, host = vastprobe_json("--pid", str(pid), "--sample", "1")
    assert "no-progress" not in rules(host), host["findings"]


def test_a_whole_host_is_no_job(reap, tmp_path: Path) -> None:
    """Without a scope a quiet daemon holding a quiet log is no stall."""
    pid, _log = trainer(reap, tmp_path, "lock")
    _rc, host = vastprobe_json("--sample", "1")
    assert not [f for f in host["findings"] if f["rule"] == "no-progress" and pid in f["pids"]]


def test_a_wait_chain_explains_it_instead(reap, tmp_path: Path) -> None:
    """A shell holding the log and waiting on a child that sleeps: the chain (do-wait-orphan) says
    what it waits for; no-progress stays out."""
    log = tmp_path / "job.log"
    p = subprocess.Popen(["sh", "-c", f"echo start > '{log}'; exec 3>>'{log}'; sleep 1000 & wait"],
                         start_new_session=True)  # fmt: skip
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 1 and proc_wchan(p.pid) != "", what="the shell waiting")
    old = time.time() - 900
    os.utime(log, (old, old))
    _rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "1")
    assert "no-progress" not in rules(host), host["findings"]


def test_a_worker_thread_starved_of_cpu_still_works(reap, tmp_path: Path) -> None:
    """The main thread joins a worker that computes under a CPU quota of 1 ms a second (`docker --cpus`
    on a crowded host): the process counts no clock tick over the window, and read STALLED, exit 1, "no
    CPU, I/O or context switch" (found by a helper). Its worker was read running (R): it works."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a cgroup")
    pid, _log = trainer(reap, tmp_path, "thread")
    cg, procs = cpu_throttled_cgroup(f"vastprobe-test-{os.getpid()}-np")
    try:
        procs.write_text(str(pid))
        wait_for(lambda: len(list(Path(f"/proc/{pid}/task").iterdir())) == 2 and proc_wchan(pid).startswith("futex"),
                 what="the main thread joining its worker")  # fmt: skip
        rc, host = vastprobe_json("--pid", str(pid), "--sample", "1")
        [p] = [p for p in host["snapshot"]["processes"] if p["pid"] == pid]
        ticks = [s["utime"] + s["stime"] for s in p["samples"]]
        if ticks[0] != ticks[-1] or not any(t["state"] == "R" for t in p["threads_detail"]):
            pytest.skip(f"the worker was not read running with no tick counted (ticks {ticks}): the case not met")
        said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        assert "no-progress" not in rules(host), said
        assert host["verdict"] != "stalled" and rc == 0, said
    finally:
        os.kill(pid, 9)
        wait_for(lambda: not procs.read_text().strip(), what="the cgroup empty")
        cg.rmdir()
