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
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.stdout.close()
    rc = proc.wait()
    elapsed = time.monotonic() - t0
    output = b"".join(chunks)
    if timed_out:
        return TransportResult(
            "timeout", f"local probe did not finish within {timeout:g}s", output, rc, truncated, {"probe": elapsed}
        )
    return TransportResult("ok", None, output, rc, truncated, {"connect": 0.0, "probe": elapsed})
