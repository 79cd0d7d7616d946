"""`local`: the same probe script, run by /bin/sh on this machine, in a session of its own so its
own processes are easy to leave out and a deadline can end all of them."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time

from vastprobe.transport.base import TransportResult


def run_local(script: str, cap: int, timeout: float, shell: str = "/bin/sh") -> TransportResult:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [shell, "-s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(script.encode("utf-8", "surrogateescape"))  # a --log path's own bytes, not UTF-8 ones
        proc.stdin.close()
    except BrokenPipeError:
        pass
    chunks: list[bytes] = []
    size = 0
    truncated = timed_out = False
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                timed_out = True
                break
            if not sel.select(left):
                continue
            chunk = os.read(fd, min(65536, cap - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size >= cap:
                truncated = True
                break
    if timed_out or truncated:
        kill_session(proc.pid)
    proc.stdout.close()
    rc = proc.wait()
    elapsed = time.monotonic() - t0
    output = b"".join(chunks)
    status, sig = (rc, None) if rc >= 0 else (None, _signal_name(-rc))
    if timed_out:
        return TransportResult(
            "timeout", f"local probe did not finish within {timeout:g}s", output, status, truncated,
            {"probe": elapsed}, sig,
        )  # fmt: skip
    return TransportResult("ok", None, output, status, truncated, {"connect": 0.0, "probe": elapsed}, sig)


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
