"""pool-lost-task on real multiprocessing: `Pool.map` whose worker was SIGKILLed (no OOM kill, no
log line) while it ran a task. The pool starts a new worker; the task is lost and map() waits for
ever while every worker idles on the task queue. It read HEALTHY; now STALLED, exit 1, from one
diagnosis (a note with one sample). Controls: a pool at work, and an idle pool whose workers were
replaced by maxtasksperchild while its parent sleeps, stay HEALTHY."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, proc_text, proc_wchan, vastprobe_json, wait_for

MAP = """
import multiprocessing as mp, sys, time

def work(x):
    time.sleep(3600 if x == 0 else 0.05)  # task 0 runs long: its worker is the one killed
    return x

if __name__ == "__main__":
    mp.set_start_method(sys.argv[1] if len(sys.argv) > 1 else "fork")
    with mp.Pool(3) as pool:
        print(" ".join(str(p.pid) for p in pool._pool), flush=True)
        print(sum(pool.map(work, range(6), chunksize=1)), flush=True)
"""

# maxtasksperchild=1: every task ends its worker and a new one starts; then the parent sleeps
IDLE = """
import multiprocessing as mp, time

if __name__ == "__main__":
    mp.set_start_method("fork")
    pool = mp.Pool(3, maxtasksperchild=1)
    first = [p.pid for p in pool._pool]
    time.sleep(0.8)
    pool.map(abs, range(3), chunksize=1)
    print("done", flush=True)
    time.sleep(3600)
"""

# workers replaced by design, and a source that yields a task now and then: the pool's task
# handler thread sleeps in the generator (a remote queue, a sensor)
SLOW_SOURCE = """
import multiprocessing as mp, time

def source():
    yield 0
    time.sleep(3600)
    yield 1

if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(3, maxtasksperchild=1) as pool:
        time.sleep(0.8)  # the first task's worker is replaced well after the others started
        for r in pool.imap(abs, source()):
            print("waiting", flush=True)
"""

BUSY = """
import multiprocessing as mp

def spin(x):
    while True:
        x += 1

if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(2) as pool:
        print("started", flush=True)
        pool.map(spin, range(2), chunksize=1)
"""


IDLE_WAITS = ("futex", "anon_pipe_read", "pipe_read")


def age(pid: int) -> float:
    """Seconds since `pid` started, by the kernel's clock (its stat's starttime and /proc/uptime)."""
    start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    return float(Path("/proc/uptime").read_text().split()[0]) - start


def pool_workers(parent: int) -> list[int]:
    """The pool's workers: the parent's children, or the forkserver's (multiprocessing's resource
    tracker, a child of the parent with forkserver, is none)."""
    out = []
    for k in children_of(parent):
        if "multiprocessing.forkserver" in proc_text(k, "cmdline"):
            out += children_of(k)
        elif "resource_tracker" not in proc_text(k, "cmdline"):
            out.append(k)
    return [k for k in out if proc_state(k) not in (None, "Z")]


@pytest.mark.parametrize(
    ("sample", "method"), [("1", "fork"), ("0", "fork"), ("1", "forkserver")], ids=["fork", "fork-0", "forkserver"]
)
def test_map_after_a_worker_was_killed_waits_for_ever(reap, tmp_path: Path, sample: str, method: str) -> None:
    """With `forkserver` (Python 3.14's default start method on Linux) the workers are the fork
    server's children, not the parent's: that pool read HEALTHY, exit 0 (found by a helper)."""
    script = tmp_path / "pool_map.py"  # a file: forkserver's workers import the main module by its path
    script.write_text(MAP)
    job = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None
    first = [int(w) for w in job.stdout.readline().split()]

    def settled() -> bool:  # the long task running in one worker, the short ones done
        waits = [proc_wchan(w) for w in first]
        return waits.count("hrtimer_nanosleep") == 1 and all(
            w.startswith(IDLE_WAITS) for w in waits if w != "hrtimer_nanosleep"
        )

    wait_for(settled, what="one worker on the long task, the others idle")
    victim = next(w for w in first if proc_wchan(w) == "hrtimer_nanosleep")
    # killed a while into its task, as a worker dies mid-run (its replacement starts that much later)
    wait_for(lambda: age(victim) >= 1.0, what="the long task under way for a second")
    os.kill(victim, signal.SIGKILL)
    fresh: list[int] = []

    def replaced() -> bool:  # one read per look: two reads of the children disagreed once in a full suite
        now = pool_workers(job.pid)
        fresh[:] = [w for w in now if w not in first]
        return len(now) == 3 and victim not in now and len(fresh) == 1

    wait_for(replaced, what="a new worker")
    new = fresh[0]
    wait_for(lambda: all(proc_wchan(w).startswith(IDLE_WAITS) for w in pool_workers(job.pid)),
             what="every worker idle on the task queue")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
    found = [f for f in host["findings"] if f["rule"] == "pool-lost-task"]
    assert found, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    f = found[0]
    assert f["pids"][0] == job.pid and new in f["pids"] and f"{new} (python" in f["summary"], f["summary"]
    assert any(e["source"] == "replaced" and e["detail"].startswith(f"{new} (") for e in f["evidence"])
    if sample == "1":
        assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, host["headline"]
    else:
        assert f["severity"] == "info" and f["summary"].endswith("(seen in one sample)")
        assert host["verdict"] == "healthy" and rc == 0


def test_an_idle_pool_whose_workers_were_replaced_is_healthy(reap) -> None:
    job = subprocess.Popen([sys.executable, "-c", IDLE], stdout=subprocess.PIPE, text=True, start_new_session=True)
    reap.append(job)
    assert job.stdout is not None and job.stdout.readline().strip() == "done"
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    assert not [f for f in host["findings"] if f["rule"] == "pool-lost-task"], host["findings"]
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


# a service: its pool's workers replaced by maxtasksperchild after a few requests, a side thread accepting
# the next request, the main thread waiting for it on a queue (or joining the accepting thread)
SERVICE = """
import multiprocessing as mp, queue, socket, sys, threading, time

def square(x):
    return x * x

if __name__ == "__main__":
    mp.set_start_method("fork")
    pool = mp.Pool(2, maxtasksperchild=1)
    for i in range(3):
        pool.apply(square, (i,))
        time.sleep(0.7)
    work = queue.Queue()
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)

    def accept():
        while True:
            c, _ = ls.accept()
            work.put((int(c.recv(100) or b"0"), c))

    t = threading.Thread(target=accept)
    t.start()
    print(ls.getsockname()[1], flush=True)
    if sys.argv[1] == "join":
        t.join()
    while True:
        n, c = work.get()
        c.sendall(str(pool.apply(square, (n,))).encode())
        c.close()
"""


@pytest.mark.parametrize("main", ["queue", "join"])
def test_a_service_whose_pool_workers_were_replaced_is_healthy(reap, main: str) -> None:
    """Its main thread waits on a queue for the next request, or joins the accepting thread: the futex
    call a wait for results makes. It read STALLED, exit 1, "lost a task", with a hint to end the
    service, which answered the next request at once (found by a helper, 12 runs of 12)."""
    job = subprocess.Popen([sys.executable, "-c", SERVICE, main], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None
    port = int(job.stdout.readline())
    wait_for(lambda: len(pool_workers(job.pid)) == 2 and all(proc_wchan(w).startswith(IDLE_WAITS)
             for w in pool_workers(job.pid)), what="the pool idle")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    assert not [f for f in host["findings"] if f["rule"] == "pool-lost-task"], host["findings"]
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]
    if main == "queue":  # it serves: the request is answered
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            c.sendall(b"7")
            assert c.recv(10) == b"49"


def test_a_pool_at_work_is_healthy(reap) -> None:
    job = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True, start_new_session=True)
    reap.append(job)
    assert job.stdout is not None and job.stdout.readline().strip() == "started"
    wait_for(lambda: len(pool_workers(job.pid)) == 2, what="the workers")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    assert not [f for f in host["findings"] if f["rule"] == "pool-lost-task"], host["findings"]
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


def test_a_pool_fed_by_a_slow_source_is_healthy(reap) -> None:
    """maxtasksperchild=1 replaced the workers, and the parent waits for the next result while the
    task handler sleeps in the generator: it read STALLED, exit 1, "results that will never come"."""
    job = subprocess.Popen([sys.executable, "-c", SLOW_SOURCE], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None and job.stdout.readline().strip() == "waiting"
    wait_for(lambda: len(pool_workers(job.pid)) == 3 and all(proc_wchan(w).startswith(IDLE_WAITS)
             for w in pool_workers(job.pid)) and max(age(w) for w in pool_workers(job.pid)) - min(
             age(w) for w in pool_workers(job.pid)) >= 0.6, what="one worker replaced, all idle")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    assert not [f for f in host["findings"] if f["rule"] == "pool-lost-task"], host["findings"]
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]
