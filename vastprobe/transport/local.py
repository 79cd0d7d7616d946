"""`local`: the same probe script, run by /bin/sh on this machine, in a session of its own so its
own processes are easy to leave out and a deadline can end all of them.

The bounded runner here (run_argv: the script on a child's stdin, its output read under a byte cap
and a deadline, the child's whole session killed past either) serves every transport that runs a
command on this machine: `sh -s` itself, and the container runtimes' `docker exec -i NAME sh -s`
(container.py), whose CLI relays stdin and output the same way."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import selectors
import signal
import subprocess
import time

from vastprobe.transport.base import KeepsNothing, Render, Take, TransportResult, TransportSettings

#: Seconds a reading thread waits for the event loop to answer a sweep's `take`; past it (the
#: loop is gone: Ctrl-C) reading stops.
TAKE_WAIT_S = 5.0
#: Seconds to wait for the probe's shell to exit once killed (or once its output ended); past it the
#: shell is in D state, which no signal ends, and is left behind rather than waited on for ever.
KILLED_WAIT_S = 2.0


def run_local(script: str, cap: int, timeout: float, shell: str = "/bin/sh") -> TransportResult:
    return run_argv([shell, "-s"], script, cap, timeout)


def run_argv(
    argv: list[str], script: str, cap: int, timeout: float, take: Take | None = None, what: str = "local probe"
) -> TransportResult:
    """`argv` with `script` on its stdin, in a session of its own; its stdout and stderr together,
    read up to `cap` bytes (or until `take` refuses a chunk) within `timeout` seconds, then the
    session is killed. A command that cannot be started is a probe-error naming it, never a raise."""
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        return TransportResult("probe-error", f"{what}: cannot run {argv[0]}: {exc.strerror or exc}", b"", None, False)
    assert proc.stdin is not None and proc.stdout is not None
    # a --log path's own bytes, not UTF-8 ones; stdin stays open until the output is read: the probe's
    # watchdog waits on it, and its end is this process gone (script.sh). Written as the pipe takes it,
    # within the deadline: a script larger than the pipe's 64 KiB, written whole before the reads, held a
    # command that never reads its stdin (a hung `docker exec`) past the deadline until it ended by itself
    data = script.encode("utf-8", "surrogateescape")
    sent = 0
    wfd = proc.stdin.fileno()
    os.set_blocking(wfd, False)
    chunks: list[bytes] = []
    size = 0
    truncated = timed_out = False
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        sel.register(wfd, selectors.EVENT_WRITE)
        while True:
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                timed_out = True
                break
            ready = {key.fd for key, _mask in sel.select(left)}
            if wfd in ready:
                try:
                    sent += os.write(wfd, data[sent : sent + 65536])
                except BlockingIOError:
                    pass
                except OSError:  # it closed its stdin or exited: nothing more to write
                    sent = len(data)
                if sent >= len(data):
                    sel.unregister(wfd)
            if fd not in ready:
                continue
            chunk = os.read(fd, min(65536, cap - size))
            if not chunk:
                break
            if take is not None and not take(len(chunk)):
                truncated = True
                break
            chunks.append(chunk)
            size += len(chunk)
            if size >= cap:
                truncated = True
                break
    if timed_out or truncated:
        kill_session(proc.pid)
    with contextlib.suppress(OSError):
        proc.stdin.close()
    proc.stdout.close()
    try:
        # bounded too: a shell in D state (a dead mount) outlives SIGKILL, and an unbounded wait
        # here held `diagnose local --timeout 40` for 608 s, deaf to SIGTERM
        rc: int | None = proc.wait(
            timeout=KILLED_WAIT_S
            if timed_out or truncated
            else max(timeout - (time.monotonic() - t0), 0) + KILLED_WAIT_S
        )
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        rc = None
        timed_out = True
    elapsed = time.monotonic() - t0
    output = b"".join(chunks)
    status, sig = (rc, None) if rc is None or rc >= 0 else (None, _signal_name(-rc))
    if timed_out:
        stuck = (
            f"; its shell (pid {proc.pid}) did not exit when killed: it is in uninterruptible sleep (a dead mount?), "
            "left behind"
            if rc is None
            else ""
        )
        return TransportResult(
            "timeout", f"{what} did not finish within {timeout:g}s{stuck}", output, status, truncated,
            {"probe": elapsed}, sig,
        )  # fmt: skip
    return TransportResult("ok", None, output, status, truncated, {"connect": 0.0, "probe": elapsed}, sig)


async def run_argv_async(
    argv: list[str], script: Render, cap: int, timeout: float, take: Take | None = None, what: str = "local probe"
) -> TransportResult:
    """run_argv in a worker thread, the event loop free for other hosts meanwhile; `take` is
    asked on the loop's own thread (a sweep's byte budget is not shared across threads)."""
    loop = asyncio.get_running_loop()
    on_loop: Take | None = None
    if take is not None:
        asked = take

        def on_loop(n: int) -> bool:
            answer: concurrent.futures.Future[bool] = concurrent.futures.Future()
            loop.call_soon_threadsafe(lambda: answer.set_result(asked(n)))
            try:
                return answer.result(TAKE_WAIT_S)
            except concurrent.futures.TimeoutError:
                return False

    return await asyncio.to_thread(run_argv, argv, script(timeout), cap, timeout, on_loop, what)


class LocalTransport(KeepsNothing):
    """`local`: this machine, /bin/sh in a session of its own. The snapshot leaves out vastprobe
    and what ran it as well as the probe (OwnProcesses "caller")."""

    name = "local"

    def __init__(self, target: str = "local", timeout: float = 60.0, shell: str = "/bin/sh") -> None:
        self.target = target
        self.timeout = timeout
        self.shell = shell

    async def run(self, script: Render, cap: int, timeout: float, take: Take | None = None) -> TransportResult:
        return await run_argv_async([self.shell, "-s"], script, cap, timeout)  # one host: its own cap only


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name.removeprefix("SIG")
    except ValueError:
        return str(n)


def kill_session(sid: int) -> None:
    """SIGKILL every process of the probe's session (the shell leads it): its process group, and
    the commands `timeout` moved into groups of their own, which a killpg would leave running.
    /proc/PID/stat is read as bytes: a process name need not be UTF-8, nor free of ") "."""
    for _ in range(2):  # a process forked while the first pass ran is caught by the second
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
                fields = data[data.rindex(b")") + 2 :].split()
            except (OSError, ValueError):
                continue
            if len(fields) > 3 and fields[3] == str(sid).encode():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(name), signal.SIGKILL)


def check_target(target: str) -> None:
    """`local` is one word: nothing to check (the registry matched it whole)."""


def open_transport(target: str, settings: TransportSettings) -> LocalTransport:
    return LocalTransport(target, settings.timeout)
