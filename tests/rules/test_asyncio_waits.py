"""asyncio programs that can never wake, on real asyncio (found by a helper, each read HEALTHY, exit 0):
the subprocess deadlock the Python docs warn of (`await proc.wait()` before reading a child's output
that outgrows the pipe), and a task awaiting what no task will do (an asyncio.Lock taken twice, an
Event whose setter died). /proc proves each: the loop waits in epoll with no timeout, its interest
list holds only its own wake-up socket, and nothing else can write it. The controls wait on a
timer, on a signal handler, on a listening socket, or read the child's output."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import children_of, descendants, proc_wchan, vastprobe_json, wait_for

SUBPROCESS = """
import asyncio, sys
async def main():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; sys.stdout.write('x' * 2_000_000); sys.stdout.flush()",
        stdout=asyncio.subprocess.PIPE)
    print(proc.pid, flush=True)
    if sys.argv[1] == "wait-first":
        await proc.wait()  # the child fills the pipe and blocks; the loop never reads it
    await proc.communicate()
    await asyncio.sleep(600)
asyncio.run(main())
"""

WAITS = """
import asyncio, signal, socket, sys
async def main():
    mode = sys.argv[1]
    if mode == "sigterm":  # a service waiting to be told to stop
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if mode == "server":  # an idle server: its listening socket is in the loop's set
        await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    print("start", flush=True)
    if mode == "lock":  # a task re-enters a lock it holds: nothing can ever release it
        lock = asyncio.Lock()
        async with lock:
            async with lock:
                pass
    elif mode == "event":  # the task that was to set the event failed first
        event = asyncio.Event()
        async def setter():
            raise RuntimeError("before set()")
        asyncio.get_running_loop().create_task(setter())
        await event.wait()
    elif mode == "sleep":
        await asyncio.sleep(3600)
    elif mode == "sigterm":
        await stop.wait()
    else:
        await asyncio.Event().wait()
asyncio.run(main())
"""


def launch(reap, program: str, arg: str) -> tuple[subprocess.Popen, str]:
    """`program` with its one argument, in a session of its own, reaped after the test: it and the first
    line it prints (a child's pid, or that it started)."""
    job = subprocess.Popen([sys.executable, "-c", program, arg], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None
    return job, job.stdout.readline().strip()


def in_epoll(pid: int) -> bool:
    return proc_wchan(pid) in ("do_epoll_wait", "ep_poll")


@pytest.mark.parametrize("order", ["wait-first", "communicate"])
def test_an_asyncio_parent_waiting_for_a_child_it_does_not_read_is_deadlocked(reap, order: str) -> None:
    job, said = launch(reap, SUBPROCESS, order)
    child = int(said)
    if order == "wait-first":
        wait_for(lambda: proc_wchan(child) == "anon_pipe_write" and in_epoll(job.pid), what="the child blocked")
    else:
        wait_for(lambda: child not in children_of(job.pid) and in_epoll(job.pid), what="the output read")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    found = [f for f in host["findings"] if f["rule"] == "deadlock"]
    if order == "communicate":
        assert not found and host["verdict"] == "healthy" and rc == 0, host["findings"]
        return
    assert found, [(f["rule"], f["summary"]) for f in host["findings"]]
    f = found[0]
    assert f["pids"] == [job.pid, child] and "event loop does not watch" in f["summary"], f["summary"]
    assert "proc.communicate()" in f["hint"] and f"Kill {child}" in f["hint"], f["hint"]
    assert any("its own wake-up channel alone" in e["detail"] for e in f["evidence"]), f["evidence"]
    assert f["severity"] == "critical" and host["verdict"] == "stalled" and rc == 1, host["headline"]


#: A child given stdin=PIPE, the pipe never closed, and the loop awaiting the child's exit: `cat` waits for
#: EOF, the loop for cat (`computes`: a child that never reads its stdin, and works); `readout`: the loop
#: writes a line and reads cat's output to its end instead (`await proc.stdout.read()`)
UNCLOSED_STDIN = """
import asyncio, sys
async def main():
    mode = sys.argv[1]
    child = [sys.executable, "-c", "while True: pass"] if mode.endswith("computes") else ["cat"]
    out = asyncio.subprocess.PIPE if mode.startswith("readout") else asyncio.subprocess.DEVNULL
    proc = await asyncio.create_subprocess_exec(*child, stdin=asyncio.subprocess.PIPE, stdout=out)
    print(proc.pid, flush=True)
    if mode.startswith("readout"):
        proc.stdin.write(b"hello\\n")
        await proc.stdin.drain()
        await proc.stdout.read()
    await proc.wait()
asyncio.run(main())
"""


@pytest.mark.parametrize("child", ["cat", "computes", "readout", "readout-computes"])
def test_an_asyncio_parent_awaiting_a_child_whose_stdin_it_never_closes_is_deadlocked(reap, child: str) -> None:
    """The loop watches its own wake-up socket and the write end of the child's stdin (for readability:
    it fires when the child closes it); its watcher thread waits for the child, and cat waits for the EOF
    only the parent can give. The same bug with subprocess.Popen read as a deadlock; with asyncio HEALTHY,
    no finding (found by a helper, 6 runs of 6)."""
    job, said = launch(reap, UNCLOSED_STDIN, child)
    kid = int(said)
    if not child.endswith("computes"):
        wait_for(lambda: proc_wchan(kid) in ("anon_pipe_read", "pipe_read") and in_epoll(job.pid), what="cat waiting")
    else:
        wait_for(lambda: in_epoll(job.pid), what="the loop waiting")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    found = [f for f in host["findings"] if f["rule"] == "deadlock"]
    if child.endswith("computes"):
        assert not found and host["verdict"] == "healthy" and rc == 0, host["findings"]
        return
    assert found and found[0]["pids"] == [job.pid, kid], [(f["rule"], f["summary"]) for f in host["findings"]]
    assert "stdin=DEVNULL" in found[0]["hint"], found[0]["hint"]
    # not "alone": it watches cat's stdin (and, reading its output, cat's stdout: it read HEALTHY, no finding)
    words = "its own wake-up channel and " + ("pipes only its children read or write" if child == "readout" else
                                              "a pipe only its children read")  # fmt: skip
    assert any(words in e["detail"] for e in found[0]["evidence"]), found[0]["evidence"]
    assert found[0]["severity"] == "critical" and host["verdict"] == "stalled" and rc == 1, host["headline"]


@pytest.mark.parametrize("mode", ["lock", "event", "sleep", "sigterm", "server"])
def test_an_asyncio_task_awaiting_what_no_task_will_do_is_stuck(reap, tmp_path: Path, mode: str) -> None:
    job, said = launch(reap, WAITS, mode)
    assert said == "start"
    wait_for(lambda: in_epoll(job.pid), what="the loop waiting")
    for sample in ("0.5", "0"):
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
        found = [f for f in host["findings"] if f["rule"] == "thread-deadlock"]
        if mode in ("sleep", "sigterm", "server"):
            assert not found and host["verdict"] == "healthy" and rc == 0, host["findings"]
            continue
        assert [f["pids"] for f in found] == [[job.pid]], [(f["rule"], f["summary"]) for f in host["findings"]]
        assert "waits in its event loop for ever" in found[0]["summary"], found[0]["summary"]
        assert found[0]["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, host["headline"]


STEP = """
import asyncio, subprocess, sys
step = ["sh", "-c", f"exec >>{sys.argv[2]}; echo step; sleep 600"]  # a long, legitimate pause on a timer
if sys.argv[1] == "asyncio":
    async def main():
        await asyncio.to_thread(subprocess.run, step)
    asyncio.run(main())
else:
    subprocess.run(step)
"""


@pytest.mark.parametrize("how", ["asyncio", "plain"])
def test_a_step_asleep_on_a_timer_under_asyncio_is_judged_as_without_it(reap, tmp_path: Path, how: str) -> None:
    """`await asyncio.to_thread(subprocess.run, step)`, the step asleep on a timer and the log 10
    minutes old: the loop, sealed, waits on its thread waiting for the step, and the chain read as a
    job that makes no progress, STALLED, where the same step without asyncio reads DEGRADED, "sleeps on
    a timer" (found by a helper). Both are a warning."""
    log = tmp_path / "job.log"
    job = subprocess.Popen([sys.executable, "-c", STEP, how, str(log)], start_new_session=True)
    reap.append(job)
    wait_for(lambda: log.exists() and any(proc_wchan(k).endswith("nanosleep") for k in descendants(job.pid)),
             what="the step asleep")  # fmt: skip
    if how == "asyncio":
        wait_for(lambda: in_epoll(job.pid), what="the loop waiting")
    old = time.time() - 600
    os.utime(log, (old, old))
    rc, host = vastprobe_json("--pid", str(job.pid), "--log", str(log), "--sample", "0.5")
    errors = [(f["rule"], f["summary"]) for f in host["findings"] if f["severity"] in ("error", "critical")]
    assert not errors and host["verdict"] == "degraded" and rc == 0, errors or host["findings"]


#: One thread: an epoll loop with no timeout over its own socketpair and the write end of a child's stdin,
#: which fires when the child closes it (exits). The child computes: the loop waits for it, as it should
LOOP_ON_A_CHILD = """
import select, socket, subprocess, sys
a, b = socket.socketpair()
kid = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.PIPE)
ep = select.epoll()
ep.register(a.fileno(), select.EPOLLIN)
ep.register(kid.stdin.fileno(), select.EPOLLIN)
print(kid.pid, flush=True)
ep.poll()
"""


def test_a_one_thread_loop_waiting_for_its_working_child_to_close_its_stdin_is_healthy(reap) -> None:
    """Its child can wake it (by exiting), so it does not wait "on nothing but its own wake-up channel": it
    read STALLED, thread-deadlock, once a pipe only its children read counted as sealing a loop (found
    checking the twenty-fifth session's change)."""
    job, said = launch(reap, LOOP_ON_A_CHILD, "")
    wait_for(lambda: in_epoll(job.pid), what="the loop waiting")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    assert host["verdict"] == "healthy" and rc == 0, [(f["rule"], f["summary"]) for f in host["findings"]]
    assert int(said) in descendants(job.pid)
