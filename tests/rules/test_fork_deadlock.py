"""fork-deadlock on real multiprocessing: DataLoader-style workers forked (the `fork` start method)
while another thread of the parent held a `threading.Lock` in a loop. Each worker's first acquire
never returns; the training loop waits in Queue.get() for its batches. It read HEALTHY (no wait
edge leads anywhere: the parent's thread moves). Now STALLED, exit 1, from one diagnosis and from
one sample; the same program with workers that do not wait on the lock is the healthy control."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cgroup_lab import OOM_KILLS, MemoryCgroup
from tests.helpers import children_of, proc_state, proc_wchan, vastprobe_json, wait_for

TRAINER = """
import multiprocessing as mp, os, signal, sys, threading, time

lock = threading.Lock()

def logger():  # a thread that takes a lock in a loop, as a logging or metrics thread does
    while True:
        with lock:
            time.sleep(2)
        time.sleep(0.001)

def worker(q, take_lock):
    while True:
        if take_lock:
            with lock:  # forked while the logger held it: never released in this process
                pass
        q.put(os.getpid())
        time.sleep(0.05)

if __name__ == "__main__":
    mp.set_start_method("fork")
    take_lock = sys.argv[1] == "lock"
    if sys.argv[2:] == ["term"]:  # a checkpoint-on-preemption handler, which the workers inherit
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    threading.Thread(target=logger, daemon=True).start()
    q = mp.Queue()
    workers = []
    for _ in range(2):
        while not lock.locked():
            time.sleep(0.001)
        w = mp.Process(target=worker, args=(q, take_lock), daemon=True)
        w.start()
        workers.append(w)
    print(" ".join(str(w.pid) for w in workers), flush=True)
    while True:
        q.get()  # the training loop, waiting for its next batch
"""


def start(reap, mode: str, *extra: str) -> tuple[subprocess.Popen, list[int]]:
    job = subprocess.Popen([sys.executable, "-c", TRAINER, mode, *extra], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None
    workers = [int(w) for w in job.stdout.readline().split()]
    assert len(workers) == 2 and set(workers) <= set(children_of(job.pid))
    return job, workers


@pytest.mark.parametrize(("sample", "handler"), [("1", ""), ("0", ""), ("1", "term")])
def test_workers_forked_while_a_thread_held_a_lock_are_deadlocked(reap, sample: str, handler: str) -> None:
    """With "term" the trainer catches SIGTERM before it forks: the workers inherit the handler,
    which proves nothing about them (a program of its own with one is waiting for a signal)."""
    job, workers = start(reap, "lock", *([handler] if handler else []))
    for w in workers:
        wait_for(lambda w=w: proc_wchan(w).startswith("futex") and proc_state(w) == "S", what="the worker on the lock")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
    found = [f for f in host["findings"] if f["rule"] == "fork-deadlock"]
    assert {f["pids"][0] for f in found} == set(workers), [(f["rule"], f["summary"]) for f in host["findings"]]
    for f in found:
        assert f["severity"] == "error" and "is deadlocked, likely at fork" in f["summary"], f["summary"]
        assert "its parent python" in f["summary"] and f"({job.pid})" in f["summary"]
        details = [e["detail"] for e in f["evidence"]]
        assert any("FUTEX_PRIVATE_FLAG, no timeout" in d for d in details), details
        assert any(d.startswith(f"{job.pid} (python") and "waits on pipe:[" in d for d in details), details
        assert "spawn" in f["hint"]
    assert host["verdict"] == "stalled" and rc == 1, host["headline"]


def test_workers_feeding_a_queue_beside_a_busy_thread_are_healthy(reap) -> None:
    """The control: the same trainer, a multiprocessing queue in use, and workers that never wait on
    the inherited lock."""
    job, _workers = start(reap, "free")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    assert not [f for f in host["findings"] if f["rule"] == "fork-deadlock"]
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


SIGNAL_WAITER = """
import signal, subprocess, sys, threading
stop = threading.Event()
signal.signal(getattr(signal, sys.argv[1]), lambda *a: stop.set())
child = subprocess.Popen(["sleep", "600"])  # for SIGCHLD: its exit is the signal
print(child.pid, flush=True)
stop.wait()  # a service's main loop, waiting to be stopped: its only thread on its own lock
"""


@pytest.mark.parametrize(("scope", "signame"), [("--pid", "SIGTERM"), ("", "SIGTERM"), ("--pid", "SIGCHLD")])
def test_a_program_waiting_for_its_signal_handler_is_no_deadlock(reap, scope: str, signame: str) -> None:
    """threading.Event().wait() with a SIGTERM handler to set it (or a SIGCHLD handler, for its
    child's exit): the same futex wait as a fork deadlock, but its handler releases it. It read
    STALLED, exit 1, "waits for ever"."""
    job = subprocess.Popen([sys.executable, "-c", SIGNAL_WAITER, signame], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None
    child = int(job.stdout.readline())
    wait_for(lambda: proc_wchan(job.pid).startswith("futex") and proc_state(job.pid) == "S", what="the wait")
    rc, host = vastprobe_json(*([scope, str(job.pid)] if scope else []), "--sample", "0.3")
    mine = [f for f in host["findings"] if job.pid in f["pids"]]
    if scope:
        assert [(f["rule"], f["severity"]) for f in mine] == [("fork-deadlock", "info")], mine
        assert f"catches {signame}: it waits for a signal" in mine[0]["summary"]
        assert host["verdict"] == "healthy" and rc == 0, host["headline"]
    else:  # the whole host: someone else's process may be stuck on this shared machine, not this one
        assert not mine, mine
    os.kill(child if signame == "SIGCHLD" else job.pid, signal.SIGTERM)
    assert job.wait(timeout=10) == 0  # the handler did release it


ORPHANED_CONSUMER = """
import queue, sys, threading
q = queue.Queue()
def producer():
    raise RuntimeError("the producer died")  # before it put anything: nobody will
t = threading.Thread(target=producer)
t.start()
t.join()
print("waiting", flush=True)
q.get()  # no timeout: a lock only the dead producer's put() would release
"""


def test_a_consumer_whose_producer_thread_died_is_not_told_about_fork(reap) -> None:
    """A queue consumer left alone after its producer thread died with an exception: single-threaded,
    on a futex with no timeout, nothing can release it (STALLED). Its parent, a shell, has one thread:
    the hint spoke only of fork start methods (found by a helper); it names the thread that exited."""
    job = subprocess.Popen(["bash", "-c", f"{sys.executable} -c {shlex.quote(ORPHANED_CONSUMER)} 2>/dev/null; true"],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None and job.stdout.readline() == "waiting\n"
    [consumer] = children_of(job.pid)
    wait_for(lambda: proc_wchan(consumer).startswith("futex"), what="the consumer in q.get()")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    f = next(f for f in host["findings"] if f["rule"] == "fork-deadlock")
    assert f["pids"][0] == consumer and "a thread that exited" in f["hint"], f
    assert "without fork" not in f["hint"] and rc == 1 and host["verdict"] == "stalled"


#: A threaded launcher that exec's a program which takes its own lock twice: not forked without exec
EXECD = """
import subprocess, sys, threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import threading; l = threading.Lock(); l.acquire(); l.acquire()"])
print(child.pid, flush=True)
child.wait()
"""


def _child_on_a_lock(reap: list, program: str, sample: str) -> tuple[int, dict, dict, int]:
    """Run `program` (it prints the PID of the child that will wait on a lock), wait for that child on its
    futex, and diagnose the job: the exit code, the host, its one fork-deadlock finding, the child."""
    job = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, start_new_session=True)
    reap.append(job)
    assert job.stdout is not None
    child = int(job.stdout.readline())
    wait_for(lambda: proc_wchan(child).startswith("futex") and proc_state(child) == "S", what="the child on its lock")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
    (f,) = [f for f in host["findings"] if f["rule"] == "fork-deadlock"]
    return rc, host, f, child


def test_a_program_execd_by_a_threaded_parent_is_not_told_it_deadlocked_at_fork(reap) -> None:
    """Found by a helper: a process exec'd and orphaned to a multi-threaded init was told it deadlocked
    at fork on a lock its parent's thread held, and to use spawn. Only a child running its parent's
    command line (forked without exec) is; this one waits on a lock of its own."""
    rc, host, f, child = _child_on_a_lock(reap, EXECD, "1")
    assert f["pids"][0] == child and "at fork" not in f["summary"], f["summary"]
    assert "waits for ever on a lock no thread of its own can release" in f["summary"] and "spawn" not in f["hint"]
    assert any("was not forked from it without exec" in e["detail"] for e in f["evidence"]), f["evidence"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1


#: a server with a SIGTERM handler (as uvicorn has) whose one thread took its lock twice in a handler
LISTENING_SIGNAL_WAITER = """
import signal, socket, sys, threading
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
if sys.argv[1:] == ["usr1"]:  # a publisher whose SIGUSR1 handler sends its subscribers the next event
    signal.signal(signal.SIGUSR1, lambda *a: None)
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.recv(100)
lock = threading.Lock(); lock.acquire(); lock.acquire()  # the handler's bug: its own lock, twice
"""


#: a client that sent its request and waits for the answer (curl)
ASKING_CLIENT = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); c.sendall(b"GET /\\r\\n")
c.recv(100)
"""


@pytest.mark.parametrize("who", ["queued", "none", "client", "client-usr1"])
def test_a_server_catching_sigterm_with_clients_in_its_accept_queue_is_stuck(reap, who: str) -> None:
    """Named alone, a deadlocked uvicorn read HEALTHY ("it waits for a signal") while the client in its
    accept queue read STALLED (found by a helper). A server that left connections in its accept queue
    over the window is no service waiting to be stopped: an error. With no one queued, still a note.
    `client`: the client whose request it read waits for the answer (curl on a uvicorn whose handler took
    a lock twice): the server named alone, and the client named alone, each read HEALTHY (a signal it
    catches may stop it, never answer the client; found by a helper). Both STALLED now. `client-usr1`: the
    server catches SIGUSR1 too, as a publisher whose handler sends the next event does: a client waiting on
    it waits for that signal, as the server does (its first version read STALLED; found by a helper)."""
    usr1 = who == "client-usr1"
    srv = subprocess.Popen([sys.executable, "-c", LISTENING_SIGNAL_WAITER, *(["usr1"] if usr1 else [])],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline())
    first, client = None, None
    if who.startswith("client"):
        client = subprocess.Popen([sys.executable, "-c", ASKING_CLIENT, str(port)], start_new_session=True)
        reap.append(client)
    else:
        first = socket.create_connection(("127.0.0.1", port))
        first.sendall(b"GET /\r\n")
    wait_for(lambda: proc_wchan(srv.pid).startswith("futex"), what="the server on its own lock")
    second = socket.create_connection(("127.0.0.1", port)) if who == "queued" else None
    if client is not None:
        wait_for(lambda: proc_wchan(client.pid) == "wait_woken", what="the client waiting for its answer")
    rc, host = vastprobe_json("--pid", str(srv.pid), "--sample", "0.3")
    mine = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"] if srv.pid in f["pids"]]
    if who == "queued":
        assert [(r, sev) for r, sev, _s in mine] == [("fork-deadlock", "error")], mine
        assert "1 connection(s) wait in the accept queue" in mine[0][2], mine
        assert host["verdict"] == "stalled" and rc == 1
    elif client is not None and usr1:
        assert [(r, sev) for r, sev, _s in mine] == [("fork-deadlock", "info")], mine
        assert host["verdict"] == "healthy" and rc == 0
        rc, host = vastprobe_json("--pid", str(client.pid), "--sample", "0.3")
        assert host["verdict"] != "stalled" and rc == 0, host["findings"]
    elif client is not None:
        assert [(r, sev) for r, sev, _s in mine] == [("fork-deadlock", "error")], mine
        assert f"and {client.pid} (python" in mine[0][2] and "a server stuck, not a service" in mine[0][2], mine
        assert host["verdict"] == "stalled" and rc == 1
        rc, host = vastprobe_json("--pid", str(client.pid), "--sample", "0.3")
        (f,) = [f for f in host["findings"] if f["rule"] == "socket-peer-wait"]
        assert f["pids"][:2] == [client.pid, srv.pid] and "a signal it catches (SIGTERM) may end it" in " ".join(
            e["detail"] for e in f["evidence"]
        ), f
        assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, f["summary"]
    else:
        assert [(r, sev) for r, sev, _s in mine] == [("fork-deadlock", "info")], mine
        assert host["verdict"] == "healthy" and rc == 0
    for c in (first, second):
        if c is not None:
            c.close()


#: a service waiting for its SIGTERM that is the client of a server: it sent its first line and waits
SIGNAL_WAITING_CLIENT = """
import signal, socket, sys, threading
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); c.sendall(b"hello\\n")
threading.Event().wait()
"""
#: a one-connection server reading its client's next line (inetd's, a forking server's child)
LINE_SERVER = """
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
while c.recv(100):
    pass
"""


def test_a_service_waiting_for_its_signal_is_no_stuck_server_to_the_server_it_is_a_client_of(reap) -> None:
    """The server waits for its client's next line, the client (single-threaded, catching SIGTERM) waits for
    its signal: the client was called "a server stuck" since the server waited on a connection it holds
    (found by a helper). It accepted nothing: a service waiting to be stopped, a note."""
    srv = subprocess.Popen([sys.executable, "-c", LINE_SERVER], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = srv.stdout.readline().strip()
    svc = subprocess.Popen([sys.executable, "-c", SIGNAL_WAITING_CLIENT, port], start_new_session=True)
    reap.append(svc)
    wait_for(lambda: proc_wchan(svc.pid).startswith("futex") and proc_wchan(srv.pid) == "wait_woken",
             what="the service waiting for its signal, the server for its next line")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(svc.pid), "--sample", "0.3")
    mine = [(f["rule"], f["severity"]) for f in host["findings"] if svc.pid in f["pids"]]
    assert mine == [("fork-deadlock", "info")], host["findings"]
    assert host["verdict"] == "healthy" and rc == 0


#: A program whose child holds a `multiprocessing.Lock`. `killed`: the child is killed holding it (as the
#: OOM killer does), and the program waits on the lock for ever; `term`: the same, the program catching
#: SIGTERM; `alive`: the child holds it asleep, alive; `grandchild`: the child forks one that takes it,
#: then exits: a process of the program's own still holds it, reparented away from it; `oom`: the child
#: holding it grows until its memory cgroup's OOM killer takes it
ORPHANED_LOCK = """
import multiprocessing as mp, os, signal, sys, time

def hold(lock, mode):
    if mode == "grandchild":
        if os.fork() == 0:
            lock.acquire()
            time.sleep(3600)
            os._exit(0)
        while lock.acquire(block=False):
            lock.release()
            time.sleep(0.01)
        os._exit(0)
    lock.acquire()
    junk = []
    while mode == "oom":  # until its memory cgroup's limit: the OOM killer takes it, holding the lock
        junk.append(bytearray(8 << 20))
    time.sleep(3600)

if __name__ == "__main__":
    mode, method = sys.argv[1], sys.argv[2]
    if mode == "oom":
        with open(sys.argv[4], "w") as procs:  # into the memory cgroup, its child with it
            procs.write(str(os.getpid()))
    mp.set_start_method(method)
    if mode == "term":
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    lock = mp.Lock()
    child = mp.Process(target=hold, args=(lock, mode))
    child.start()
    while lock.acquire(block=False):  # until the child (or its child) holds it
        lock.release()
        time.sleep(0.01)
    if mode in ("killed", "term"):
        os.kill(child.pid, signal.SIGKILL)
    with open(sys.argv[3], "w") as out:
        out.write(str(child.pid))
    lock.acquire()
"""


def start_orphaned_lock(reap, tmp_path: Path, mode: str, method: str, *extra: str) -> tuple[subprocess.Popen, int]:
    """ORPHANED_LOCK in `mode`, from a file (`spawn` imports the child's function from it): the program
    and its child's pid, once the child (or its own child) holds the lock."""
    script, said = tmp_path / "orphaned_lock.py", tmp_path / "child.pid"
    script.write_text(ORPHANED_LOCK)
    job = subprocess.Popen([sys.executable, str(script), mode, method, str(said), *extra], start_new_session=True)
    reap.append(job)
    wait_for(lambda: said.exists() and said.read_text().isdigit(), timeout=30, what="the child holding the lock")
    return job, int(said.read_text())


@pytest.mark.parametrize(("mode", "method"), [("killed", "fork"), ("killed", "spawn"), ("term", "fork"),
                                              ("alive", "fork"), ("grandchild", "fork")])  # fmt: skip
def test_a_program_waiting_on_a_lock_its_dead_child_held_is_deadlocked(reap, tmp_path: Path, mode: str,
                                                                       method: str) -> None:  # fmt: skip
    """A `multiprocessing.Lock` whose holder was killed: the program waits on it for ever, and read
    HEALTHY, no finding (a shared futex, which another process could post; found by the session's own
    hunt). Its children have all exited (a zombie it never reaps: it waits) and no other process runs
    its program: none is left to release it, STALLED, exit 1. With a SIGTERM handler, a note for the
    named job (only a signal wakes it); with the holder alive, or a grandchild of its own program holding
    it, nothing: a process that can release it is there."""
    job, child = start_orphaned_lock(reap, tmp_path, mode, method)
    wait_for(lambda: proc_wchan(job.pid) == "futex_do_wait", what="the program on the lock")
    if mode in ("killed", "term", "grandchild"):
        wait_for(lambda: proc_state(child) == "Z", what="its child exited")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    found = [(f["severity"], f["summary"]) for f in host["findings"] if f["rule"] == "fork-deadlock"]
    if mode == "killed":
        [(sev, summary)] = found
        assert sev == "error" and "every one of them has exited" in summary and str(child) in summary, summary
        assert host["verdict"] == "stalled" and rc == 1, host["headline"]
        # the same on the whole host, as a cron sweep reads it (other tests' processes may be stalled
        # too: only this finding is asserted, and the exit code it makes)
        rc, whole = vastprobe_json("--sample", "1")
        ours = [f for f in whole["findings"] if f["rule"] == "fork-deadlock" and job.pid in f["pids"]]
        assert ours and ours[0]["severity"] == "error" and rc == 1, [f["summary"] for f in whole["findings"]]
    elif mode == "term":
        [(sev, summary)] = found
        assert sev == "info" and "catches SIGTERM" in summary, summary
        assert rc == 0 and host["verdict"] in ("healthy", "degraded"), host["headline"]
    else:
        assert not found, found
        assert rc == 0 and host["verdict"] in ("healthy", "degraded"), host["headline"]


@OOM_KILLS
def test_a_program_waiting_on_a_lock_its_oom_killed_child_held_is_deadlocked(reap, memcg: MemoryCgroup,
                                                                             tmp_path: Path) -> None:  # fmt: skip
    """The same with a real OOM kill: the child grows in a memory cgroup of 40 MiB, holding the lock, and
    the kernel kills it. The wait it left is an error: STALLED, exit 1 (by hand, the kill was one too:
    "python3 was OOM-killed …; 26937 (python3) lost it")."""
    job, child = start_orphaned_lock(reap, tmp_path, "oom", "fork", str(memcg.procs_file))
    wait_for(lambda: memcg.oom_kills() >= 1, timeout=30, what="the child OOM-killed")
    wait_for(
        lambda: proc_state(child) == "Z" and proc_wchan(job.pid) == "futex_do_wait", what="the program on the lock"
    )
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    errors = {f["rule"]: f["summary"] for f in host["findings"] if f["severity"] == "error"}
    # (the kill's own finding is not asserted: the kernel rate-limits OOM reports, and other tests'
    # kills share the log)
    assert "every one of them has exited" in errors.get("fork-deadlock", ""), errors
    assert host["verdict"] == "stalled" and rc == 1, host["headline"]


#: a job whose own POSIX timer (or a peer's sigqueue) will end its wait: the handler sets the event
RT_SIGNAL_WAITER = """
import signal, sys, threading
done = threading.Event()
signal.signal(signal.SIGRTMIN + int(sys.argv[1]), lambda *a: done.set())
print("ready", flush=True)
done.wait()
"""


@pytest.mark.parametrize("offset", [0, 3])
def test_a_wait_a_real_time_signal_handler_ends_is_no_stall(reap, offset: int) -> None:
    """A job whose timer's SIGRTMIN handler sets what it waits on read STALLED, exit 1 ("waits for
    ever on a lock no thread of its own can release"), and finished 25 s later (found by a helper):
    SIGRTMIN and up are signals only a program's own code uses, as USR1 is."""
    job = subprocess.Popen([sys.executable, "-c", RT_SIGNAL_WAITER, str(offset)], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None and job.stdout.readline() == "ready\n"
    wait_for(lambda: proc_wchan(job.pid).startswith("futex") and proc_state(job.pid) == "S", what="the event wait")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    mine = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"] if job.pid in f["pids"]]
    assert all(sev != "error" for _r, sev, _s in mine), mine
    name = "SIGRTMIN" if offset == 0 else f"SIGRTMIN+{offset}"
    assert any(name in s for _r, _sev, s in mine), mine
    assert rc == 0 and host["verdict"] != "stalled", host["findings"]
    os.kill(job.pid, signal.SIGRTMIN + offset)  # the proof that the wait ends: the handler sets it
    assert job.wait(30) == 0


#: a parent with a warm ThreadPoolExecutor forks; the child submits to the pool and waits on the result:
#: the pool's threads stayed in the parent, no lock was held at the fork
FORKED_AWAY_POOL = """
import os, sys, time
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(2)
pool.submit(time.sleep, 0).result()
child = os.fork()
if child == 0:
    pool.submit(time.sleep, 0).result()
    os._exit(0)
print(child, flush=True)
os.waitpid(child, 0)
"""


def test_a_child_whose_pool_stayed_in_the_parent_is_not_said_to_inherit_a_held_lock(reap) -> None:
    """The verdict was right, STALLED, but the evidence said "one of them held the lock when it forked"
    as a fact of a child whose pool's threads simply did not come with the fork (found by a helper)."""
    rc, host, f, _child = _child_on_a_lock(reap, FORKED_AWAY_POOL, "0.3")
    said = [e["detail"] for e in f["evidence"] if e["source"] == "parent"]
    assert said and "none of them came with it" in said[0] and "held the lock" not in said[0], said
    assert "or one only a thread that did not come with the fork would release" in f["summary"], f["summary"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, f["summary"]


#: a launcher: two workers that keep working, then it waits for Ctrl-C (KeyboardInterrupt) in Event().wait()
CTRL_C_LAUNCHER = """
import subprocess, sys, threading
work = "import time\\nwhile True:\\n    sum(range(20000)); time.sleep(0.2)"
procs = [subprocess.Popen([sys.executable, "-c", work]) for _ in range(2)]
print("workers running; Ctrl-C to stop", flush=True)
try:
    threading.Event().wait()
except KeyboardInterrupt:
    for p in procs:
        p.terminate()
    print("stopped", flush=True)
"""


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_a_launcher_waiting_for_ctrl_c_in_its_terminal_is_no_stall(reap, tmp_path: Path) -> None:
    """In the foreground of a tmux pane, its workers working: it read STALLED, exit 1 ("waits for ever on
    a lock no thread of its own can release"), and Ctrl-C ended it as designed (found by a helper).
    Its terminal's Ctrl-C is the signal it waits for: a note for the named job, HEALTHY."""
    sock = tmp_path / "tmux.sock"
    script = tmp_path / "launcher.py"
    script.write_text(CTRL_C_LAUNCHER)
    tmux = ["tmux", "-S", str(sock)]
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    subprocess.run([*tmux, "-f", "/dev/null", "new-session", "-d", "-s", "l", "-x", "120", "-y", "30",
                    f"{sys.executable} {script}; sleep 600"], check=True, env=env)  # fmt: skip
    try:

        def launcher() -> int | None:
            for d in Path("/proc").iterdir():
                with contextlib.suppress(OSError):
                    mine = d.name.isdigit() and str(script).encode() in (d / "cmdline").read_bytes()
                    if mine and len(children_of(int(d.name))) == 2:
                        return int(d.name)
            return None

        wait_for(lambda: launcher() is not None, what="the launcher and its 2 workers")
        pid = launcher()
        assert pid is not None
        wait_for(lambda: proc_wchan(pid).startswith("futex") and proc_state(pid) == "S", what="the launcher waiting")
        rc, host = vastprobe_json("--pid", str(pid), "--sample", "0.5")
        said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        assert not [f for f in said if f[1] in ("error", "critical")], said
        assert [f for f in said if "catches SIGINT (Ctrl-C at its terminal)" in f[2]], said
        assert host["verdict"] != "stalled" and rc == 0, said
        subprocess.run([*tmux, "send-keys", "-t", "l", "C-c"], check=True, env=env)  # the proof: Ctrl-C ends it
        wait_for(lambda: "stopped" in subprocess.run([*tmux, "capture-pane", "-p", "-t", "l"], capture_output=True,
                                                     text=True, env=env).stdout, what="the launcher stopped")  # fmt: skip
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, env=env)
