"""Jobs whose movement shows only as wakes: a slow download or upload into memory, two processes
taking turns through a semaphore. Their send and recv count no vfs byte in /proc/PID/io, and a step
costs no CPU tick, so with their log quiet for ten minutes they read STALLED, exit 1, "does not
answer" or "alive but makes no progress" (found by a helper, 18 runs of 18). The probe's second
sample now reads the main thread's voluntary context switches too; a job, or what it waits on, that
was scheduled over the window is not proven still. The controls: the same transfer with the server
stopped, and with it locked for ever, still STALLED."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import proc_state, proc_wchan, vastprobe_json, wait_for

#: Sends 16 KiB every 0.2 s for ever (`send`), or 1 KiB every 5 s (`trickle`: asleep through the
#: window), or reads 16 KiB every 0.1 s (`take`), or 4 KiB every 2 s (`sip`); `lock`: sends once, then
#: waits on its own lock for ever
PACED_SERVER = r"""
import socket, sys, threading, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
how = sys.argv[1]
if how in ("take", "sip"):
    n, pause = (16384, 0.1) if how == "take" else (4096, 2.0)
    while True:
        if not c.recv(n):
            break
        time.sleep(pause)
else:
    c.recv(100)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
    if how == "lock":
        c.sendall(bytes(16384)); lock = threading.Lock(); lock.acquire(); lock.acquire()
    size, pause = (1024, 5.0) if how == "trickle" else (16384, 0.2)
    while True:
        c.sendall(bytes(size)); time.sleep(pause)
"""

#: Downloads into memory (urllib, as a parameter fetch does), or uploads 200 MB from memory; its log
#: says it started, then nothing
CLIENT = r"""
import sys, urllib.request
log = open(sys.argv[3], "a"); log.write("started\n"); log.flush()
url = f"http://127.0.0.1:{sys.argv[1]}/"
if sys.argv[2] == "download":
    urllib.request.urlopen(url).read()
else:
    import socket
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    c.sendall(bytes(200 << 20))
"""

#: Two processes taking turns through multiprocessing semaphores, five steps a second, the parent
#: holding the log
TURNS = r"""
import multiprocessing as mp, sys, time
def other(a, b):
    while True:
        a.acquire(); time.sleep(0.1); b.release()
if __name__ == "__main__":
    log = open(sys.argv[1], "a"); log.write("started\n"); log.flush()
    a, b = mp.Semaphore(0), mp.Semaphore(0)
    mp.Process(target=other, args=(a, b), daemon=True).start()
    print("up", flush=True)
    while True:
        a.release(); b.acquire(); time.sleep(0.1)
"""


def _quiet(log: Path) -> None:
    old = time.time() - 600
    os.utime(log, (old, old))


def _start(reap, tmp_path: Path, server_how: str, client_how: str) -> tuple[subprocess.Popen, subprocess.Popen, Path]:
    srv = subprocess.Popen([sys.executable, "-c", PACED_SERVER, server_how], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = srv.stdout.readline().strip()
    log = tmp_path / "job.log"
    client = subprocess.Popen([sys.executable, "-c", CLIENT, port, client_how, str(log)], start_new_session=True)
    reap.append(client)
    wait_for(lambda: log.exists() and proc_wchan(client.pid) in ("wait_woken", "sk_stream_wait_memory"),
             what="the client in its transfer")  # fmt: skip
    _quiet(log)
    return srv, client, log


def _said(host: dict) -> list[tuple[str, str, str]]:
    return [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]


@pytest.mark.parametrize("how", ["download", "upload"])
def test_a_slow_transfer_behind_a_quiet_log_is_not_stalled(reap, tmp_path: Path, how: str) -> None:
    _srv, client, log = _start(reap, tmp_path, "send" if how == "download" else "take", how)
    for named in (True, False):  # --log, and the log found open
        rc, host = vastprobe_json("--pid", str(client.pid), *(("--log", str(log)) if named else ()))
        said = _said(host)
        assert host["verdict"] == "degraded" and rc == 0, said
        assert [(r, sev) for r, sev, _s in said if r == "missing-logs"] == [("missing-logs", "warning")], said
        assert not [s for _r, sev, s in said if sev in ("error", "critical")], said


@pytest.mark.parametrize("how", ["download", "upload"])
def test_a_transfer_from_a_server_asleep_on_its_timer_behind_a_quiet_log_is_not_stalled(
    reap, tmp_path: Path, how: str
) -> None:
    """A server sending 1 KiB every 5 s, or reading an upload 4 KiB every 2 s: asleep on its timer through
    the whole window, it did nothing over it, and beside the log quiet for ten minutes its client read
    STALLED, exit 1, "does not answer" (found by a helper). A blocker asleep on a timer goes on by itself:
    a quiet log alone beside it is a warning."""
    _srv, client, log = _start(reap, tmp_path, "trickle" if how == "download" else "sip", how)
    for named in (True, False):  # --log, and the log found open
        rc, host = vastprobe_json("--pid", str(client.pid), *(("--log", str(log)) if named else ()))
        said = _said(host)
        assert host["verdict"] == "degraded" and rc == 0, said
        assert not [s for _r, sev, s in said if sev in ("error", "critical")], said


def test_a_job_taking_turns_through_a_semaphore_behind_a_quiet_log_is_not_stalled(reap, tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    job = subprocess.Popen([sys.executable, "-c", TURNS, str(log)], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None and job.stdout.readline().strip() == "up"
    _quiet(log)
    rc, host = vastprobe_json("--pid", str(job.pid))
    said = _said(host)
    assert host["verdict"] == "degraded" and rc == 0, said
    assert not [s for _r, sev, s in said if sev in ("error", "critical")], said


@pytest.mark.parametrize("server", ["stopped", "locked"])
def test_a_download_from_a_server_that_cannot_move_is_still_stalled(reap, tmp_path: Path, server: str) -> None:
    srv, client, log = _start(reap, tmp_path, "lock" if server == "locked" else "send", "download")
    if server == "stopped":
        os.kill(srv.pid, signal.SIGSTOP)
        wait_for(lambda: proc_state(srv.pid) == "T", what="the server stopped")
    else:
        wait_for(lambda: proc_wchan(srv.pid).startswith("futex"), what="the server on its own lock")
    wait_for(lambda: proc_wchan(client.pid) == "wait_woken", what="the client waiting")
    rc, host = vastprobe_json("--pid", str(client.pid), "--log", str(log))
    assert host["verdict"] == "stalled" and rc == 1, _said(host)


def test_a_wake_is_activity_not_movement() -> None:
    """The second sample reads the voluntary count alone: the switches are its difference (the missing
    involuntary count made it negative), and count where stillness is proven (`active`), not as work."""
    from types import SimpleNamespace

    from vastprobe.analysis.progress import progress
    from vastprobe.model import ProcSample, Unavailable

    io = Unavailable("io not read")
    a = ProcSample("S", 5, 1, io, voluntary_ctxt=40, nonvoluntary_ctxt=7)
    for later, switches in ((40, 0), (46, 6)):
        b = ProcSample("S", 5, 1, io, voluntary_ctxt=later, nonvoluntary_ctxt=None)
        pr = progress(SimpleNamespace(samples=(a, b), threads_detail=()), 2)  # type: ignore[arg-type]  # its samples alone
        assert pr.ctxt_switches == switches and not pr.moved and pr.active == bool(switches)


#: A server whose main thread ticks in a sleep loop while the thread handling the request waits for ever
#: on a lock already held: it wakes, and does no work
TICKING_SERVER = r"""
import socket, threading, time
lock = threading.Lock(); lock.acquire()
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
def handle(c):
    c.recv(100); lock.acquire(); c.sendall(b"x")
def serve():
    while True:
        c, _ = s.accept(); threading.Thread(target=handle, args=(c,), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
while True:
    time.sleep(0.3)
"""

#: Asks once and waits for the answer in a plain recv, its log open
ASK = r"""
import socket, sys
log = open(sys.argv[2], "a"); log.write("asked\n"); log.flush()
c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); c.sendall(b"req"); c.recv(1)
"""


def test_a_server_ticking_beside_a_handler_locked_for_ever_is_no_work(reap, tmp_path: Path) -> None:
    """The server's main thread wakes every 0.3 s, its handler thread never: its wakes are no work, and
    the client behind its quiet log is still STALLED, as it was before wakes were read (the session's
    regression hunt found it DEGRADED, 12 runs of 12)."""
    srv = subprocess.Popen([sys.executable, "-c", TICKING_SERVER], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = srv.stdout.readline().strip()
    log = tmp_path / "job.log"
    client = subprocess.Popen([sys.executable, "-c", ASK, port, str(log)], start_new_session=True)
    reap.append(client)
    wait_for(lambda: log.exists() and proc_wchan(client.pid) == "wait_woken", what="the client waiting")
    _quiet(log)
    rc, host = vastprobe_json("--pid", str(client.pid), "--log", str(log))
    assert host["verdict"] == "stalled" and rc == 1, _said(host)
