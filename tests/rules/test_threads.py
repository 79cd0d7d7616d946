"""Threads as waiters, with real multiprocessing: a child whose queue feeder thread writes a pipe that
only its parent reads, while the parent waits for the child to exit (Queue.put() before join(): the
child cannot exit until the feeder has flushed). The main thread of the child waits in a futex for
the feeder, so only the thread's own wait shows the cycle. Found from /proc alone, no --log."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import children_of, compiled_c, proc_state, proc_wchan, vastprobe_json, wait_for

PUT_BEFORE_JOIN = textwrap.dedent("""
    import multiprocessing as mp
    def worker(q):
        q.put(b"x" * 10_000_000)          # the feeder thread blocks on the full pipe
    if __name__ == "__main__":
        q = mp.Queue()
        p = mp.Process(target=worker, args=(q,))
        p.start()
        p.join()                          # waits for the child, which waits for its feeder
        print(len(q.get()))
""")

GET_BEFORE_JOIN = textwrap.dedent("""
    import multiprocessing as mp, time
    def worker(q):
        for i in range(100000):
            q.put(b"x" * 65536)
            time.sleep(0.001)
    if __name__ == "__main__":
        q = mp.Queue()
        p = mp.Process(target=worker, args=(q,))
        p.start()
        while True:
            q.get()                       # the parent keeps reading: the feeder keeps flowing
""")


def thread_wchans(pid: int) -> list[str]:
    out = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out.append((t / "wchan").read_text())
    return out


def start(reap: list, tmp_path: Path, source: str) -> tuple[int, int]:
    script = tmp_path / "job.py"
    script.write_text(source)
    job = subprocess.Popen([sys.executable, str(script)], start_new_session=True, stdout=subprocess.DEVNULL)
    reap.append(job)
    wait_for(lambda: bool(children_of(job.pid)), what="the worker started")
    (child,) = children_of(job.pid)
    return job.pid, child


@pytest.mark.parametrize("sample", ["1", "0"])
def test_a_queue_feeder_thread_writing_to_a_parent_that_joins_is_a_deadlock(reap, tmp_path: Path, sample: str) -> None:
    parent, child = start(reap, tmp_path, PUT_BEFORE_JOIN)
    wait_for(lambda: any(w.endswith("pipe_write") for w in thread_wchans(child)), what="the feeder blocked")
    rc, host = vastprobe_json("--pid", str(parent), "--sample", sample)
    dead = [f for f in host["findings"] if f["rule"] == "deadlock"]
    assert dead, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    f = dead[0]
    assert "waits for python" in f["summary"] and f"({child}) to exit" in f["summary"], f["summary"]
    assert "'s thread " in f["summary"] and "get() every result before join()" in f["hint"]
    if sample == "1":
        assert f["severity"] == "critical" and host["verdict"] == "stalled" and rc == 1
    else:
        assert f["severity"] == "warning" and host["verdict"] == "degraded" and rc == 0


def test_a_queue_read_while_its_feeder_writes_is_healthy(reap, tmp_path: Path) -> None:
    parent, child = start(reap, tmp_path, GET_BEFORE_JOIN)
    wait_for(lambda: len(list(Path(f"/proc/{child}/task").iterdir())) > 1, what="the feeder thread started")
    rc, host = vastprobe_json("--pid", str(parent), "--sample", "1")
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


IDLE_AND_BLOCKED = textwrap.dedent("""
    import os, threading
    r, w = os.pipe()
    idle = threading.Event()
    for i in range(3):
        threading.Thread(target=idle.wait, daemon=True).start()   # futex waits: nothing to read
    threading.Thread(target=os.read, args=(r, 1), daemon=True).start()  # a pipe wait: named
    idle.wait()
""")


def test_only_threads_that_wait_on_something_else_than_a_futex_have_their_stat_read(reap, tmp_path: Path) -> None:
    """Probe format 5: the stat (name and state) of an idle thread in a futex wait is not read; a
    thread waiting on a pipe keeps its name and state, and the futex waiters are still listed."""
    script = tmp_path / "threads.py"
    script.write_text(IDLE_AND_BLOCKED)
    job = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    reap.append(job)

    def settled() -> bool:
        w = [x.strip() for x in thread_wchans(job.pid)]
        return len(w) == 5 and sum("futex" in x for x in w) == 4 and sum("pipe_read" in x for x in w) == 1

    wait_for(settled, what="three idle threads, one on the pipe")
    _rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0")
    (p,) = [p for p in host["snapshot"]["processes"] if p["pid"] == job.pid]
    threads = p["threads_detail"]
    assert len(threads) == 4, threads
    piped = [t for t in threads if "pipe_read" in (t["wchan"] or "")]
    idle = [t for t in threads if "futex" in (t["wchan"] or "")]
    assert len(piped) == 1 and piped[0]["comm"] == p["comm"] and piped[0]["state"] == "S", piped
    assert len(idle) == 3 and all(t["comm"] == "" and t["state"] == "S" for t in idle), idle


THREADED_C = r"""
#include <pthread.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static void *nap(void *a) { (void)a; pthread_mutex_lock(&m); for (;;) pthread_cond_wait(&c, &m); return 0; }
int main(void) { pthread_t t; pthread_create(&t, 0, nap, 0); nap(0); }
"""


def test_the_jobs_threads_are_read_first_on_a_host_busier_than_the_bound(reap, tmp_path: Path) -> None:
    """The probe reads the threads of 192 multi-threaded processes. On a host with 220 newer ones
    (other tenants, daemons, a pool's workers), the --pid job's threads come first: the feeder's
    pipe wait is still seen, and the deadlock is still a stall (it read healthy before)."""
    exe = compiled_c(tmp_path, "threaded", THREADED_C, "-O2", "-pthread")
    parent, child = start(reap, tmp_path, PUT_BEFORE_JOIN)
    wait_for(lambda: any(w.endswith("pipe_write") for w in thread_wchans(child)), what="the feeder blocked")
    others = [subprocess.Popen([str(exe)], start_new_session=True) for _ in range(220)]
    reap.extend(others)
    wait_for(lambda: all(len(thread_wchans(p.pid)) == 2 for p in others), what="220 newer processes of 2 threads")
    rc, host = vastprobe_json("--pid", str(parent), "--sample", "1")
    dead = [f for f in host["findings"] if f["rule"] == "deadlock"]
    assert dead and dead[0]["severity"] == "critical", [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]
    assert f"({child}) to exit" in dead[0]["summary"] and "'s thread " in dead[0]["summary"]
    assert host["verdict"] == "stalled" and rc == 1


PREFETCH = textwrap.dedent("""
    import queue, socket, sys, threading
    def prefetch(q):  # a data loader's download thread
        c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        c.sendall(b"GET /shard-0 HTTP/1.0\\r\\n\\r\\n")
        q.put(c.recv(1 << 16))
    q = queue.Queue()
    threading.Thread(target=prefetch, args=(q,), daemon=True).start()
    q.get()  # the trainer waits for its batch
""")


@pytest.mark.parametrize("sample", ["1", "0"])
def test_a_download_thread_reading_a_stopped_server_holds_the_trainer(reap, tmp_path: Path, sample: str) -> None:
    """A trainer waits for its batch (a queue, untimed) while its prefetch thread reads the answer of
    a server that is stopped: HEALTHY, exit 0, with --pid on the trainer (found by a helper): only a
    thread's pipe or socket write, lock or FUSE wait was followed, not a read. A thread reading a
    connection whose other end cannot move is now."""
    import signal
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", "import socket, time\n"
                               f"s = socket.socket(fileno={listener.fileno()})\nc, _ = s.accept()\ntime.sleep(3600)"],
                              pass_fds=(listener.fileno(),))  # fmt: skip
    reap.append(server)
    listener.close()
    wait_for(lambda: "accept" in Path(f"/proc/{server.pid}/wchan").read_text(), what="the server accepting")
    server.send_signal(signal.SIGSTOP)
    wait_for(lambda: Path(f"/proc/{server.pid}/stat").read_text().split(") ")[1][0] == "T", what="server stopped")
    trainer = subprocess.Popen([sys.executable, "-c", PREFETCH, str(port)], stdin=subprocess.DEVNULL)
    reap.append(trainer)

    def reading() -> bool:
        tasks = Path(f"/proc/{trainer.pid}/task").iterdir()
        return any("tcp" in (t / "wchan").read_text() or "wait_woken" in (t / "wchan").read_text() for t in tasks)

    wait_for(reading, what="the prefetch thread reading its answer")
    try:
        rc, host = vastprobe_json("--pid", str(trainer.pid), "--sample", sample)
        f = next((f for f in host["findings"] if f["rule"] == "socket-peer-wait"), None)
        assert f is not None and f["severity"] == "error", [(g["rule"], g["summary"]) for g in host["findings"]]
        assert f"whose peer {server.pid} (python" in f["summary"] and "(T " in f["summary"], f["summary"]
        assert host["verdict"] == "stalled" and rc == 1
    finally:
        server.send_signal(signal.SIGCONT)


#: a consumer reading its stdin in a thread, handing lines to a worker thread, the main thread joining both
THREADED_CONSUMER = """
import queue, sys, threading
q = queue.Queue()
def reader():
    for line in sys.stdin:
        q.put(line)
    q.put(None)
def worker():
    while q.get() is not None:
        pass
threads = [threading.Thread(target=reader), threading.Thread(target=worker)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


@pytest.mark.parametrize("producer", ["stopped", "alive"])
def test_a_reader_thread_behind_a_stopped_producer_is_stalled(reap, producer: str) -> None:
    """The consumer's stdin is read by a thread of its own, and its only writer is stopped: every thread
    waits with no timeout on what cannot come. It read HEALTHY, no finding, where the same consumer
    reading in its main thread read STALLED (found by a helper). An idle producer: no finding."""
    prod = subprocess.Popen([sys.executable, "-c", "import time\nprint('one', flush=True)\ntime.sleep(3600)"],
                            stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    reap.append(prod)
    cons = subprocess.Popen([sys.executable, "-c", THREADED_CONSUMER], stdin=prod.stdout, start_new_session=True)
    reap.append(cons)
    assert prod.stdout is not None
    prod.stdout.close()
    wait_for(lambda: len(os.listdir(f"/proc/{cons.pid}/task")) == 3
             and any(Path(f"/proc/{cons.pid}/task/{t}/wchan").read_text().endswith("pipe_read")
                     for t in os.listdir(f"/proc/{cons.pid}/task"))
             and proc_wchan(prod.pid).endswith("nanosleep"), what="the reader thread waiting")  # fmt: skip
    if producer == "stopped":
        os.kill(prod.pid, signal.SIGSTOP)
        wait_for(lambda: proc_state(prod.pid) == "T", what="the producer stopped")
    rc, host = vastprobe_json("--pid", str(cons.pid), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"], f["pids"]) for f in host["findings"]]
    if producer == "alive":
        assert not [f for f in said if f[1] in ("error", "critical")], said
        assert rc == 0 and host["verdict"] != "stalled", said
        return
    assert any(f[1] == "error" and prod.pid in f[3] for f in said), said
    assert host["verdict"] == "stalled" and rc == 1, said
    os.kill(prod.pid, signal.SIGCONT)
