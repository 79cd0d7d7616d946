"""The wait-for graph on real software: curl and Python clients against a server that never answers,
the flock command, named pipes, a FUSE mount whose server never answers, Python's subprocess
deadlock, multiprocessing.Pool losing a worker to the OOM killer, logrotate; and the healthy
setups that must stay quiet (a supervisor feeding bash, a setsid daemon, tail -f, a busy HTTP
server, a rotated log still written). Each runs as `vastprobe diagnose local --pid ...` would."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cgroup_lab import OOM_KILLS, MemoryCgroup
from tests.helpers import (
    all_stopped,
    children_of,
    crossed_flocks,
    descendants,
    mount_fuse,
    proc_state,
    proc_wchan,
    vastprobe_json,
    vastprobe_json_acting_between_samples,
    wait_for,
)

SILENT_SERVER = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)   # accept, and never read or answer
"""


def errors(host: dict) -> list[dict]:
    return [f for f in host["findings"] if f["severity"] in ("error", "critical")]


def finding(host: dict, rule: str) -> dict:
    found = [f for f in host["findings"] if f["rule"] == rule]
    assert found, (rule, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]])
    return found[0]


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def find_desc(root: int, name: str, wchan: str = "") -> int | None:
    return next((d for d in descendants(root) if comm(d) == name and proc_wchan(d).startswith(wchan)), None)


def accepted_unread(server: int, port: int) -> bool:
    """The server holds an accepted connection on PORT with bytes it has not read: until it has
    accepted, a loaded machine shows the request queued on a socket no process owns yet."""
    try:
        inodes = {os.readlink(f"/proc/{server}/fd/{fd}") for fd in os.listdir(f"/proc/{server}/fd")}
    except OSError:
        return False
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        local, state, unread, inode = int(f[1].split(":")[1], 16), f[3], int(f[4].split(":")[1], 16), f[9]
        if local == port and state == "01" and unread > 0 and f"socket:[{inode}]" in inodes:
            return True
    return False


@pytest.fixture
def silent_server(reap):
    srv = subprocess.Popen([sys.executable, "-c", SILENT_SERVER], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline())
    return srv, port


# ---------------------------------------------------------------- sockets


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_against_a_server_that_accepted_and_never_answers(silent_server, reap) -> None:
    srv, port = silent_server
    job = subprocess.Popen(["bash", "-c", f"curl -s http://127.0.0.1:{port}/params > /dev/null; echo done"],
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: find_desc(job.pid, "curl") is not None, what="curl started")
    curl = find_desc(job.pid, "curl")
    wait_for(lambda: proc_wchan(curl).startswith(("poll", "do_sys_poll", "do_epoll")), what="curl waiting")
    wait_for(lambda: accepted_unread(srv.pid, port), what="the request accepted and left unread")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    f = finding(host, "socket-peer-wait")
    assert srv.pid in f["pids"] and curl in f["pids"] and f["pids"][0] == job.pid
    details = " ".join(e["detail"] for e in f["evidence"])
    assert f"127.0.0.1:{port}" in details and "B unread by its holder" in details
    unread = next(e for e in f["evidence"] if e["source"] == "unread")
    assert int(unread["detail"].split()[0]) > 0  # curl's request, never read by the server
    assert str(srv.pid) in f["hint"] and str(job.pid) not in f["hint"]
    # the server idled over the window with the request unread in its receive queue: proven stuck
    assert f["severity"] == "error" and rc == 1 and host["verdict"] == "stalled"
    proof = next(e["detail"] for e in f["evidence"] if e["source"] == "proof")
    assert f"({srv.pid}" in proof, proof
    assert "did not read the" in proof and "receive queue" in proof, proof
    # one instant of the same wait: no window to call it idle, nothing else to call it a stall
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0")
    f = finding(host, "socket-peer-wait")
    assert f["severity"] == "info" and f["summary"].endswith("(seen in one sample)")
    assert host["verdict"] == "healthy" and rc == 0


READ_THEN_HANG = """
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.recv(65536)           # reads the request...
time.sleep(100000)      # ...and never answers
"""


@pytest.mark.parametrize("inherited", [False, True], ids=["clean", "inherited-pipe"])
@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_a_server_that_read_the_request_and_hangs_is_a_note_for_a_named_job(reap, inherited: bool) -> None:
    """Nothing in flight either way looks like an idle keep-alive connection too: no stall without
    other evidence, but a named job still waiting after two samples gets a note naming the server.
    `inherited-pipe`: curl also holds, at fd 251, the write end of a pipe its launcher left open (a
    harness, a CI runner), read by a process out of scope. curl polls 2 fds, its connection and its
    own socketpair; the pipe was taken for one of them and the note was lost."""
    srv = subprocess.Popen([sys.executable, "-c", READ_THEN_HANG], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline())
    fds: tuple[int, ...] = ()
    prefix = ""
    if inherited:
        r, w = os.pipe()
        reader = subprocess.Popen([sys.executable, "-c", "import select, sys; select.select([sys.stdin], [], [])"],
                                  stdin=r, start_new_session=True)  # fmt: skip
        reap.append(reader)
        os.close(r)
        fds, prefix = (w,), f"exec 251>&{w} {w}>&-; "
    job = subprocess.Popen(["bash", "-c", f"{prefix}curl -s http://127.0.0.1:{port}/params > /dev/null; echo done"],
                           start_new_session=True, pass_fds=fds)  # fmt: skip
    for fd in fds:
        os.close(fd)
    reap.append(job)
    wait_for(lambda: proc_wchan(srv.pid) == "hrtimer_nanosleep", what="the server read the request")
    wait_for(lambda: (c := find_desc(job.pid, "curl")) is not None and proc_wchan(c).startswith(("poll", "do_sys_poll")),
             what="curl waiting")  # fmt: skip
    # curl wakes from its poll once a second; on a loaded machine such a wake is now and then charged a
    # CPU tick inside the window, and a waiter that moved is no quiet connection: diagnose again then
    for _ in range(3):
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
        if any(f["rule"] == "socket-peer-wait" for f in host["findings"]):
            break
    f = finding(host, "socket-peer-wait")
    assert f["severity"] == "info" and srv.pid in f["pids"] and "nothing in flight" in f["summary"]
    assert f"{srv.pid} (python" in f["summary"] and host["verdict"] == "healthy" and rc == 0


def tcp_queued(port: int) -> int:
    """Bytes queued either way on the loopback connections of `port` (/proc/net/tcp)."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == port or int(f[2].split(":")[1], 16) == port:
            tx, rx = f[4].split(":")
            total += int(tx, 16) + int(rx, 16)
    return total


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_a_download_from_a_stopped_http_server_is_a_stall(reap, tmp_path: Path) -> None:
    """python -m http.server stopped mid-file (Ctrl-Z in its terminal): once curl has drained what
    was in flight, nothing is, either way, as on an idle keep-alive connection; but a stopped server
    answers nobody. Before, this was an info note."""
    www = tmp_path / "www"
    www.mkdir()
    with open(www / "model.safetensors", "wb") as f:
        f.truncate(256 << 20)
    srv = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(www),
                            "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline().split(" port ")[1].split()[0])
    out = tmp_path / "model.bin"
    job = subprocess.Popen(["bash", "-c", f"curl -s --limit-rate 8M -o {out} http://127.0.0.1:{port}/model.safetensors;"
                            " echo done"], start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: out.exists() and out.stat().st_size > 1 << 20, what="the download under way")
    os.kill(srv.pid, signal.SIGSTOP)
    try:
        # every thread: http.server answers in a thread, which a loaded machine may run, still
        # writing, after the main thread has stopped
        wait_for(lambda: all_stopped(srv.pid) and tcp_queued(port) == 0, timeout=60,
                 what="curl drained what was in flight")  # fmt: skip
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
        f = finding(host, "socket-peer-wait")
        assert f["severity"] == "error" and srv.pid in f["pids"] and rc == 1, f
        assert f"kill -CONT {srv.pid}" in f["hint"] and "T do_signal_stop" in f["summary"]
    finally:
        os.kill(srv.pid, signal.SIGCONT)


# torch.distributed's rendezvous, with the standard library: rank 0 serves the store; each rank
# joins and waits at the barrier for WORLD arrivals
STORE_IN_A_THREAD = """
import socket, select, sys, threading, time
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def serve(ls):
    clients, arrived = [], 0
    while True:
        for s in select.select([ls] + clients, [], [])[0]:
            if s is ls:
                clients.append(ls.accept()[0])
            elif s.recv(64):
                arrived += 1
                if arrived == world:
                    for c in clients: c.sendall(b"go")
if rank == 0:  # port 0: any free one, printed for the other ranks (MASTER_PORT)
    ls = socket.socket(); ls.bind(("127.0.0.1", port)); ls.listen(16)
    port = ls.getsockname()[1]
    threading.Thread(target=serve, args=(ls,), daemon=True).start()
    print(port, flush=True)
while True:  # as torch's clients do: retry until the store listens
    try:
        c = socket.create_connection(("127.0.0.1", port)); break
    except ConnectionRefusedError:
        time.sleep(0.05)
c.sendall(b"join")
c.recv(64)
"""

STORE_IN_ACCEPT = """
import socket, sys
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(8)
print(ls.getsockname()[1], flush=True)
peers = []
while len(peers) < 2:   # waits for two more ranks; only one comes
    c, _ = ls.accept(); c.recv(64); peers.append(c)
for c in peers: c.sendall(b"go")
"""


@pytest.mark.parametrize("store", ["in-a-thread", "in-accept"])
def test_a_rendezvous_short_of_a_rank_names_the_store(reap, tmp_path: Path, store: str) -> None:
    """Two ranks of three at the barrier: the launcher waits on both, every rank waits on the store.
    Seen from the launcher (the whole job in scope) this was healthy: its chain to rank 0 ended at an
    idle child, and the store in rank 0's own thread was 'held by nobody visible'."""
    (tmp_path / "rank.py").write_text(STORE_IN_A_THREAD if store == "in-a-thread" else STORE_IN_ACCEPT)
    rank = f"{sys.executable} {tmp_path / 'rank.py'}"
    # the store binds a port of its own choosing and prints it; the others join once it is known
    port = tmp_path / "port"
    known = f"while [ ! -s {port} ]; do sleep 0.05; done"
    if store == "in-a-thread":
        launch = f"{rank} 0 3 0 > {port} & {known}; {rank} 1 3 $(cat {port}) & wait"
    else:
        launch = f"{rank} > {port} & {known}; {sys.executable} -c \"import socket; " \
                 f"c = socket.create_connection(('127.0.0.1', $(cat {port}))); c.sendall(b'join'); c.recv(64)\" & wait"  # fmt: skip
    job = subprocess.Popen(["bash", "-c", launch], start_new_session=True)
    reap.append(job)
    wait_for(lambda: sum(proc_wchan(d) in ("wait_woken", "sk_wait_data") for d in descendants(job.pid))
             == (2 if store == "in-a-thread" else 1), what="the ranks at the barrier")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    f = finding(host, "socket-peer-wait")
    assert f["severity"] == "warning" and rc == 0 and host["verdict"] == "degraded", f
    if store == "in-a-thread":
        assert "other end it holds itself (its thread" in f["summary"], f["summary"]
    else:
        assert "waits in accept() for another connection" in f["summary"], f["summary"]
    assert "rank" in f["hint"] and "world size" in f["hint"]


THREADED_SERVER = """
import socket, sys, threading, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
def handle(c):
    req = c.recv(4096)
    time.sleep(100000)      # a slow backend behind each connection's own thread
    c.sendall(b"OK " + req)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
"""


def test_a_threaded_server_in_accept_is_no_rendezvous(reap) -> None:
    """Main thread in accept(), each connection served by a thread of its own that waits on a slow
    backend: not a rendezvous short of a participant (a precision review found it called one)."""
    srv = subprocess.Popen([sys.executable, "-c", THREADED_SERVER], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline())
    client = f"import socket; c = socket.create_connection(('127.0.0.1', {port})); c.sendall(b'job 1'); c.recv(64)"
    job = subprocess.Popen([sys.executable, "-c", client], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid) in ("wait_woken", "sk_wait_data") and len(os.listdir(f"/proc/{srv.pid}/task"))
             == 2 and proc_wchan(srv.pid) == "inet_csk_accept", what="the request in its handler thread")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    f = finding(host, "socket-peer-wait")
    assert "accept()" not in f["summary"] and "rank" not in f["hint"], f
    assert srv.pid in f["pids"] and rc == 0
    assert "Look at its threads" in f["hint"] and "hrtimer_nanosleep" in f["hint"]  # the handler, not "restart it"


def test_python_client_blocked_in_recv_with_a_stale_log_is_a_stall(silent_server, reap, tmp_path: Path) -> None:
    srv, port = silent_server
    log = tmp_path / "job.log"
    log.write_text("downloading params\n")
    os.utime(log, (1, 1))
    client = f"import socket; c = socket.create_connection(('127.0.0.1', {port})); c.sendall(b'hello'); c.recv(10)"
    job = subprocess.Popen(["bash", "-c", f'{sys.executable} -c "{client}"; echo done'], start_new_session=True)
    reap.append(job)
    wait_for(lambda: any(proc_wchan(d) in ("wait_woken", "sk_wait_data") for d in descendants(job.pid)),
             what="client in recv")  # fmt: skip
    wait_for(lambda: accepted_unread(srv.pid, port), what="the request accepted and left unread")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5", "--log", str(log), "--stale-after", "60")
    f = finding(host, "socket-peer-wait")
    assert f["severity"] == "error" and rc == 1
    assert srv.pid in f["pids"] and "does not answer" in f["summary"] and "5 B it has not read" in f["summary"]
    assert str(srv.pid) in f["hint"]
    # the chain is named once, by the rule of its root blocker: no "waits on python, which makes no progress"
    assert not [g for g in host["findings"] if g["rule"] == "do-wait-orphan"]


TRICKLING_SERVER = """
import socket, sys, threading, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
def serve(c):
    c.recv(65536)
    c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Type: application/octet-stream\\r\\n\\r\\n")
    while True:
        c.sendall(b"x" * 16384); time.sleep(0.5)   # a slow mirror: send() shows in no counter of its own
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
@pytest.mark.slow
def test_a_slow_download_is_not_a_server_that_does_not_answer(reap, tmp_path: Path) -> None:
    """The server's sending thread uses no CPU tick and send() counts in no /proc/PID/io field, so
    the server looks idle; but curl, waiting on it, writes what it receives: the wait moves. With a
    stale log the log is the stall, and the server is not blamed."""
    srv = subprocess.Popen([sys.executable, "-c", TRICKLING_SERVER], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline())
    log = tmp_path / "job.log"
    log.write_text("downloading params\n")
    os.utime(log, (1, 1))
    out = tmp_path / "model.bin"
    job = subprocess.Popen(["bash", "-c", f"curl -s http://127.0.0.1:{port}/model.bin -o {out}; echo done"],
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: out.exists() and out.stat().st_size > 32768, what="the download under way")
    for args in ((), ("--log", str(log), "--stale-after", "60")):
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1", *args)
        assert not [f for f in host["findings"] if f["rule"] in ("socket-peer-wait", "do-wait-orphan")], host[
            "findings"
        ]
        assert "does not answer" not in (host["headline"] or "")
    # the stale log is said, but the job moves (curl writes what it receives): a quiet log is no stall
    f = finding(host, "missing-logs")
    assert f["severity"] == "warning" and rc == 0 and host["verdict"] == "degraded", f


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_a_throttled_download_is_not_nothing_in_flight(reap, tmp_path: Path) -> None:
    """curl --limit-rate 100 reads a hundred bytes a second: a window can see it move nothing, while
    megabytes wait in the server's send queue. The server is not failing to answer, and nothing is
    'nothing in flight' (it was a note saying so)."""
    (tmp_path / "big.bin").write_bytes(os.urandom(8 << 20))
    srv = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "-d", str(tmp_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline().split(" port ")[1].split()[0])
    job = subprocess.Popen(["curl", "-s", "--limit-rate", "100", "-o", "/dev/null", f"http://127.0.0.1:{port}/big.bin"],
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).startswith("poll_schedule"), what="curl throttling")
    for sample in ("1", "0"):
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
        assert not [f for f in host["findings"] if f["rule"] == "socket-peer-wait"], host["findings"]
        assert rc == 0
    # a quiet log named beside it: bytes on their way still say the server answers (it read STALLED,
    # "python3 does not answer", with 126 KiB unread at curl; found by a helper)
    log = tmp_path / "job.log"
    log.write_text("download start\n")
    os.utime(log, (time.time() - 600, time.time() - 600))
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1", "--log", str(log))
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f[0] == "socket-peer-wait" or f[1] in ("error", "critical")], said
    assert host["verdict"] == "degraded" and rc == 0, said
    # nor is the server, whose handler thread waits to write to it while its main thread serves on
    wait_for(lambda: any(proc_wchan_of_task(srv.pid, t).startswith(("sk_stream_wait", "wait_woken"))
                         for t in tasks(srv.pid)), what="the handler thread blocked on the slow client")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(srv.pid), "--sample", "1")
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


def test_busy_http_server_with_a_client_loop_is_healthy(reap, tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("x" * 100_000)
    srv = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline().split("port ")[1].split()[0])
    loop = (
        f"import urllib.request\nwhile True:\n    urllib.request.urlopen('http://127.0.0.1:{port}/index.html').read()\n"
    )
    client = subprocess.Popen([sys.executable, "-c", loop], start_new_session=True)
    reap.append(client)
    wait_for(lambda: proc_state(client.pid) is not None, what="client running")
    rc, host = vastprobe_json("--pid", str(srv.pid), "--pid", str(client.pid), "--sample", "0.5")
    assert not errors(host), errors(host)
    assert not [f for f in host["findings"] if f["rule"] == "socket-peer-wait"]
    assert rc == 0


# ---------------------------------------------------------------- locks


PAUSE = (sys.executable, "-c", "import signal; signal.pause()")


def flock_waiter(
    reap, lock: Path, stop_holder: bool = False, run: tuple[str, ...] = ("sleep", "1000")
) -> tuple[subprocess.Popen, int, subprocess.Popen, int]:
    """A run holding `lock` (flock -> `run`, stopped if asked) and a cron job whose flock waits for
    it: (holder, its child, cron's bash, cron's waiting flock)."""
    holder = subprocess.Popen(["flock", str(lock), *run], start_new_session=True)
    reap.append(holder)
    wait_for(lambda: children_of(holder.pid) != [], what="holder running")
    [sleeper] = children_of(holder.pid)
    if stop_holder:
        os.kill(sleeper, signal.SIGSTOP)
        wait_for(lambda: proc_state(sleeper) == "T", what="holder's child stopped")
    cron = subprocess.Popen(["bash", "-c", f"flock {lock} echo ran; echo done"], start_new_session=True)
    reap.append(cron)
    wait_for(lambda: find_desc(cron.pid, "flock", "locks_lock") is not None, what="waiter blocked")
    waiter = find_desc(cron.pid, "flock", "locks_lock")
    assert waiter is not None
    return holder, sleeper, cron, waiter


def test_flock_waiter_names_the_holder_and_the_file(reap, tmp_path: Path) -> None:
    lock = tmp_path / "job.lock"
    holder, _child, cron, waiter = flock_waiter(reap, lock, run=PAUSE)  # stuck: waits for a signal nothing sends
    rc, host = vastprobe_json("--pid", str(cron.pid), "--sample", "0.5")
    f = finding(host, "file-lock-wait")
    assert f["pids"][:2] == [cron.pid, waiter] and holder.pid in f["pids"]
    assert str(lock) in f["summary"] and f"{holder.pid} (flock)" in f["summary"]
    assert f["hint"].startswith(f"{holder.pid} (flock) holds the lock on {lock}")
    assert "python" in f["hint"]  # the holder waits in turn on its child: the root blocker
    assert any(e["source"] == "/proc/locks" for e in f["evidence"])
    # the holder did nothing over the window while it held the lock: proven, a stall from the first look
    assert f["severity"] == "error" and rc == 1 and host["verdict"] == "stalled"
    assert any(e["source"] == "proof" and "holds the lock and did nothing" in e["detail"] for e in f["evidence"])


#: The previous cron run: it holds the job's flock and polls its step child once a second
POLLING_HOLDER = """
import fcntl, subprocess, sys, time
f = open(sys.argv[1], "w"); fcntl.flock(f, fcntl.LOCK_EX)
code = {"stopped": "import time\\nwhile True: time.sleep(0.1)", "computes": "while True: pass"}[sys.argv[2]]
p = subprocess.Popen([sys.executable, "-c", code])
print(p.pid, flush=True)
while p.poll() is None:
    sum(range(50000))  # a poll's own work: a few CPU ticks a second when it polls every 50 ms
    time.sleep(float(sys.argv[3]))
"""


@pytest.mark.parametrize(("step", "every"), [("stopped", "1"), ("stopped", "0.05"), ("computes", "0.05")])
def test_a_lock_holder_polling_its_step_on_a_timer_is_judged_by_the_step(
    reap, tmp_path: Path, step: str, every: str
) -> None:
    """Found by a helper: the holder sleeps on a timer between polls of its step child, so it was taken
    to wake by itself, and the next run queued on its flock read DEGRADED while the step was stopped
    for good. Its step stopped: the stall it is; its step at work: a warning at most. Its wakes to poll
    are no progress: one in the window (polling every 1 s, CI once) dropped the finding."""
    lock = tmp_path / "job.lock"
    holder = subprocess.Popen([sys.executable, "-c", POLLING_HOLDER, str(lock), step, every], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    reap.append(holder)
    assert holder.stdout is not None
    child = int(holder.stdout.readline())
    if step == "stopped":
        os.kill(child, signal.SIGSTOP)
        wait_for(lambda: proc_state(child) == "T", what="the step stopped")
    job = subprocess.Popen(["flock", "-x", str(lock), "true"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid) == "locks_lock_inode_wait", what="the next run queued on the lock")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    f = next((f for f in host["findings"] if f["rule"] == "file-lock-wait"), None)
    if step == "stopped":
        assert f is not None, host["findings"]
        assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, f
        assert f"python ({child}) is stopped" in f["hint"] and f"kill -CONT {child}" in f["hint"], f["hint"]
    else:  # the holder and its step both move: no finding, or a warning
        assert (f is None or f["severity"] != "error") and host["verdict"] != "stalled" and rc == 0, f
    os.kill(child, signal.SIGCONT)
    os.kill(child, signal.SIGKILL)


def test_a_lock_holder_asleep_on_a_timer_is_no_proof(reap, tmp_path: Path) -> None:
    """The previous cron run holds the lock and works in steps (`echo; sleep 3`), or sleeps out a
    long step (`sleep 1000`): asleep on a timer, it moves again by itself. Over a 1 s window it did
    nothing and read STALLED, with a hint to end it (found by a helper). A warning now, DEGRADED."""
    lock = tmp_path / "job.lock"
    holder, _sleeper, cron, waiter = flock_waiter(reap, lock)
    rc, host = vastprobe_json("--pid", str(cron.pid), "--sample", "0.5")
    f = finding(host, "file-lock-wait")
    assert f["pids"][:2] == [cron.pid, waiter] and holder.pid in f["pids"]
    assert f["severity"] == "warning" and not any(e["source"] == "proof" for e in f["evidence"]), f
    assert rc == 0 and host["verdict"] == "degraded"


def test_a_co_holder_asleep_on_a_timer_does_not_free_a_stuck_one(reap, tmp_path: Path) -> None:
    """A shared flock held by a `sleep` (a timer) and by a process that waits for a signal nothing
    sends; a writer waits for the exclusive lock, which it cannot get while the second holds its
    share. One holder asleep on a timer cancelled the proof for both: DEGRADED, exit 0 (found by a
    helper). Each holder must wake by itself for the proof to fall."""
    lock = tmp_path / "shared.lock"
    for run in (("sleep", "1000"), PAUSE):
        h = subprocess.Popen(["flock", "-s", str(lock), *run], start_new_session=True)
        reap.append(h)
        wait_for(lambda h=h: children_of(h.pid) != [], what="a reader holding its share")  # type: ignore[misc]
    job = subprocess.Popen(["bash", "-c", f"flock -x {lock} echo got; echo done"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: find_desc(job.pid, "flock", "locks_lock") is not None, what="the writer blocked")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    f = finding(host, "file-lock-wait")
    assert f["severity"] == "error" and any(e["source"] == "proof" for e in f["evidence"]), f
    assert rc == 1 and host["verdict"] == "stalled"


def test_a_stopped_lock_holder_gets_a_kill_cont_hint(reap, tmp_path: Path) -> None:
    holder, sleeper, cron, _waiter = flock_waiter(reap, tmp_path / "job.lock", stop_holder=True)
    rc, host = vastprobe_json("--pid", str(cron.pid), "--sample", "0.5")
    f = finding(host, "file-lock-wait")
    assert f["severity"] == "error" and rc == 1
    assert f"kill -CONT {sleeper}" in f["hint"] and f"{holder.pid} (flock) holds the lock" in f["hint"]
    os.kill(sleeper, signal.SIGCONT)


def test_crossed_flocks_are_a_deadlock(reap, tmp_path: Path) -> None:
    one, two = crossed_flocks(reap, tmp_path)
    rc, host = vastprobe_json("--pid", str(one.pid), "--pid", str(two.pid), "--sample", "0.3")
    f = finding(host, "deadlock")
    assert f["severity"] == "critical" and rc == 1
    assert {one.pid, two.pid} <= set(f["pids"])
    assert "file-lock" in f["summary"]


# ---------------------------------------------------------------- pipes and FIFOs


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_under_popen_stdin_pipe_with_a_recipe_that_asks(reap, tmp_path: Path) -> None:
    """Popen(["make"], stdin=PIPE).wait(): make hands its stdin to the recipe, which asks a question
    nobody will answer, on a pipe only the waiting launcher can write. The hint names that pipe."""
    (tmp_path / "Makefile").write_text("all:\n\t@echo 'configure: accept license? [y/N]'; read answer; echo $$answer\n")
    code = f"import subprocess; subprocess.Popen(['make', '-C', {str(tmp_path)!r}], stdin=subprocess.PIPE).wait()"
    job = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.DEVNULL)
    reap.append(job)
    wait_for(lambda: any(proc_wchan(d).endswith("pipe_read") for d in descendants(job.pid)), what="the recipe asks")
    reader = next(d for d in descendants(job.pid) if proc_wchan(d).endswith("pipe_read"))
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    f = finding(host, "deadlock")
    assert f["severity"] == "critical" and rc == 1 and {job.pid, reader} <= set(f["pids"])
    assert f["hint"].startswith(f"{reader} (") and "reads its stdin" in f["hint"] and "stdin=DEVNULL" in f["hint"]
    assert f"only {job.pid} (python" in f["hint"]


@pytest.mark.skipif(shutil.which("gzip") is None, reason="needs gzip")
def test_a_compressor_fed_by_a_pacing_thread_is_no_deadlock(reap) -> None:
    """The main thread reads gzip's output while a thread that sleeps between chunks feeds it: the
    two main threads wait on each other, and the sleeping thread will write (critical in 2 of 3 runs
    before a sleeping thread counted)."""
    code = textwrap.dedent("""
        import os, subprocess, threading, time
        p = subprocess.Popen(["gzip", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        def feed():
            while True:
                p.stdin.write(os.urandom(4096)); p.stdin.flush(); time.sleep(100000)
        threading.Thread(target=feed, daemon=True).start()
        while p.stdout.read1(65536):
            pass
    """)
    job = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    reap.append(job)
    wait_for(lambda: children_of(job.pid) != [] and proc_wchan(children_of(job.pid)[0]).endswith("pipe_read")
             and proc_wchan(job.pid).endswith("pipe_read"), what="gzip and its reader both waiting")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    assert not [f for f in host["findings"] if f["rule"] == "deadlock"], host["findings"]
    assert rc != 1


def popen_deadlock(reap: list, prelude: str = "") -> tuple[subprocess.Popen, int]:
    """Python's documented deadlock: Popen(stdin=PIPE, stdout=PIPE) and a big write without reading,
    after `prelude`; (the program, its cat) once both block writing."""
    code = (
        prelude
        + "\n"
        + textwrap.dedent("""
        import subprocess
        p = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        p.stdin.write(b"x" * (16 << 20)); p.stdin.close(); print(p.stdout.read())
    """)
    )
    job = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).endswith("pipe_write") and any(
        proc_wchan(k).endswith("pipe_write") for k in children_of(job.pid)), what="both writers blocked")  # fmt: skip
    return job, children_of(job.pid)[0]


def test_subprocess_pipe_deadlock_in_a_program_with_a_heartbeat_thread_is_a_warning(reap) -> None:
    """The same deadlock in a program that also runs an idle thread (a heartbeat, tqdm's monitor):
    that thread could drain the pipe, so no proof, but two full pipes and nothing moving is a
    warning (it was healthy once any live thread broke a cycle)."""
    job, cat = popen_deadlock(
        reap, "import threading, time; threading.Thread(target=lambda: time.sleep(100000), daemon=True).start()"
    )
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    f = finding(host, "deadlock")
    assert f["severity"] == "warning" and set(f["pids"]) == {job.pid, cat} and rc == 0
    assert "full pipe" in f["summary"] and "unless another thread drains one" in f["summary"]


def test_subprocess_pipe_deadlock(reap) -> None:
    """Popen(stdin=PIPE, stdout=PIPE) and a big write without reading: Python's documented deadlock."""
    job, cat = popen_deadlock(reap)
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    f = finding(host, "deadlock")
    assert set(f["pids"]) == {job.pid, cat} and "pipe" in f["summary"] and rc == 1


def test_a_pipe_only_its_reader_can_write_is_critical_only_when_two_samples_agree(reap) -> None:
    """A process that kept the write end of the pipe it reads: a real deadlock, but one instant of it
    looks like a shell between pipe() and fork() (which made --sample 0 sweeps cry wolf)."""
    code = "import os\nr, w = os.pipe()\nos.read(r, 1)\n"
    job = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).endswith("pipe_read"), what="reading its own pipe")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0")
    f = finding(host, "deadlock")
    assert f["severity"] == "warning" and f["summary"].endswith("(seen in one sample)") and rc == 0
    assert f["pids"] == [job.pid] and "--sample 1" in f["hint"]
    assert host["verdict"] == "degraded"
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    f = finding(host, "deadlock")
    assert f["severity"] == "critical" and "only it can end" in f["summary"] and rc == 1
    assert "one sample" not in f["summary"] and host["verdict"] == "stalled"


def test_a_cycle_that_ends_before_the_second_sample_is_no_deadlock(reap) -> None:
    """Found on this VM: pyenv-rehash (bash) reading a pipe it still holds the write end of, seen by
    the first sample and gone by the second, was called a critical deadlock in a 20-host sweep."""
    code = "import os, signal\nsignal.signal(signal.SIGUSR1, lambda *_: os._exit(0))\nr, w = os.pipe()\nos.read(r, 1)\n"
    job = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).endswith("pipe_read"), what="reading its own pipe")

    def end_it() -> None:
        os.kill(job.pid, signal.SIGUSR1)
        job.wait()  # reaped: gone by the second sample, not a zombie in it

    rc, host = vastprobe_json_acting_between_samples(end_it, "--pid", str(job.pid))
    assert [len(p["samples"]) for p in host["snapshot"]["processes"] if p["pid"] == job.pid] == [1]
    assert not [f for f in host["findings"] if f["rule"] == "deadlock"], host["findings"]
    assert host["verdict"] != "stalled" and rc == 0


def test_fifo_held_by_an_orphan_writer(reap, tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    job = subprocess.Popen(["bash", "-c", f"(sleep 1000 > {fifo} &); cat {fifo}; echo done"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: find_desc(job.pid, "cat", "") is not None and proc_wchan(find_desc(job.pid, "cat")).endswith(
        "pipe_read"), what="cat reading the FIFO")  # fmt: skip
    cat = find_desc(job.pid, "cat")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    f = finding(host, "do-wait-orphan")
    assert f["severity"] == "error" and rc == 1 and f["pids"][:2] == [job.pid, cat]
    orphan = f["pids"][2]
    assert comm(orphan) == "sleep" and f"FIFO {fifo}" in f["summary"] and "orphan" in f["summary"]
    assert str(orphan) in f["hint"]


@pytest.mark.parametrize("side", ["reader", "writer"])
def test_fifo_nobody_opens(reap, tmp_path: Path, side: str) -> None:
    """A writer blocked opening a FIFO has no consumer: a warning, an error once its named log is
    stale. A reader waits for its next writer, as a server for its next client: a spool worker's
    `while true; do read cmd < queue.fifo; ...; done` made the whole host DEGRADED, and read STALLED,
    exit 1, with its log named (found by a helper); now a note, and a warning with the stale log."""
    fifo, log = tmp_path / "f", tmp_path / "worker.log"
    os.mkfifo(fifo)
    log.touch()
    script = (
        f'while true; do read cmd < {fifo}; echo "ran $cmd" >> {log}; done'
        if side == "reader"
        else f"echo job > {fifo}; echo done >> {log}"
    )
    job = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid) == "wait_for_partner", what="bash in open()")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    f = finding(host, "fifo-no-partner")
    assert str(fifo) in f["summary"] and f["pids"][0] == job.pid
    assert f"opening a FIFO for {'reading' if side == 'reader' else 'writing'}" in f["summary"], f["summary"]
    if side == "reader":
        assert f["severity"] == "info" and host["verdict"] == "healthy" and rc == 0, host["findings"]
    else:
        assert f["severity"] == "warning" and host["verdict"] == "degraded" and rc == 0, host["findings"]
    old = time.time() - 600
    os.utime(log, (old, old))
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3", "--log", str(log))
    said = [(g["rule"], g["severity"]) for g in host["findings"]]
    if side == "reader":  # a quiet log beside a worker waiting for work is no proof
        assert ("fifo-no-partner", "warning") in said and not [x for x in said if x[1] in ("error", "critical")], said
        assert host["verdict"] == "degraded" and rc == 0, said
    else:
        assert ("fifo-no-partner", "error") in said and host["verdict"] == "stalled" and rc == 1, said
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0")
    f = finding(host, "fifo-no-partner")
    assert f["severity"] == "info" and f["summary"].endswith("(seen in one sample)")
    assert host["verdict"] == "healthy" and rc == 0


def test_container_init_adopts_the_orphan_holding_the_pipe(reap, tmp_path: Path) -> None:
    """Probed from the host with --pid: the orphan's parent is the PID namespace's init (a shell,
    PID 1 inside), not host PID 1."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    out = tmp_path / "out.log"
    inner = f"bash -c \"sh -c 'sleep 1000 & echo x' | tee {out}\"; wait"
    job = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", inner], start_new_session=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(job)
    wait_for(lambda: out.exists() and out.read_text() == "x\n", what="tee wrote")
    wait_for(lambda: find_desc(job.pid, "tee", "") is not None and proc_wchan(find_desc(job.pid, "tee")).endswith(
        "pipe_read"), what="tee blocked")  # fmt: skip
    tee = find_desc(job.pid, "tee")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    f = finding(host, "do-wait-orphan")
    assert f["severity"] == "error" and rc == 1 and tee in f["pids"]
    orphan = f["pids"][-1]
    assert comm(orphan) == "sleep"
    init = next(p for p in host["snapshot"]["processes"] if p["pid"] == orphan)["ppid"]
    assert next(p for p in host["snapshot"]["processes"] if p["pid"] == init)["nspid"][-1] == 1
    assert any(e["source"] == "orphan" and f"re-parented to {init}" in e["detail"] for e in f["evidence"])


def test_supervisor_feeding_bash_over_a_pipe_is_healthy(reap) -> None:
    """A daemonized supervisor (re-parented to PID 1) keeps a bash worker reading commands from a
    pipe: the writer is the reader's own parent, never an orphan trap."""
    sup = textwrap.dedent("""
        import os, subprocess, sys, time
        if os.fork(): sys.exit(0)
        os.setsid()
        if os.fork(): os._exit(0)
        w = subprocess.Popen(["bash"], stdin=subprocess.PIPE)
        print(os.getpid(), w.pid, flush=True)
        time.sleep(1000)
    """)
    p = subprocess.Popen([sys.executable, "-c", sup], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    sup_pid, bash = (int(x) for x in p.stdout.readline().split())
    p.wait()
    try:
        wait_for(lambda: proc_wchan(bash).endswith("pipe_read"), what="bash reading its commands")
        rc, host = vastprobe_json("--pid", str(sup_pid), "--sample", "0.3")
        assert not errors(host), errors(host)
        assert rc == 0
    finally:
        for pid in (bash, sup_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_setsid_daemon_and_tail_f_under_waiting_shells_are_healthy(reap, tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("start\n")
    server = tmp_path / "server.py"
    server.write_text(SILENT_SERVER)
    daemon = f"{sys.executable} {server} > /dev/null"
    job = subprocess.Popen(["bash", "-c", f"setsid sh -c '{daemon}' & tail -f {log} | grep --line-buffered x & wait"],
                           start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(job)
    wait_for(lambda: find_desc(job.pid, "grep", "") is not None and find_desc(job.pid, "tail") is not None, what="up")
    wait_for(lambda: any(proc_wchan(d) == "inet_csk_accept" for d in descendants(job.pid)), what="daemon in accept")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    assert not errors(host), errors(host)
    assert rc == 0


# ---------------------------------------------------------------- FUSE


@pytest.fixture
def silent_fuse(reap, tmp_path: Path):
    """A FUSE mount on the real kernel interface whose server answers INIT and nothing else."""
    mnt = tmp_path / "mnt"
    server = mount_fuse(reap, mnt)
    yield server, mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_reader_of_a_fuse_mount_whose_server_never_answers(silent_fuse, reap) -> None:
    server, mnt = silent_fuse
    job = subprocess.Popen(["bash", "-c", f"cat {mnt}/params.bin > /dev/null; echo done"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: find_desc(job.pid, "cat", "request_wait_answer") is not None, what="cat waiting on FUSE")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    f = finding(host, "fuse-no-answer")
    assert server.pid in f["pids"] and str(mnt) in f["summary"] and str(server.pid) in f["hint"]
    # its one thread is back waiting for the next request: it read this one and will not answer it
    proof = [e["detail"] for e in f["evidence"] if e["source"] == "proof"]
    assert proof and "fuse_dev_do_read" in proof[0], f["evidence"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1


def test_a_worker_thread_stuck_on_a_fuse_mount(silent_fuse, reap) -> None:
    """A data loader's thread waits on the mount while the main thread joins it (futex)."""
    server, mnt = silent_fuse
    loader = "import sys, threading\nt = threading.Thread(target=lambda: open(sys.argv[1][7:]).read())\nt.start(); t.join()\n"
    # the shard named as loaders take it, an option's value: another FUSE mount on this shared
    # machine (another test's) must not make the mount this waiter is on ambiguous
    app = subprocess.Popen([sys.executable, "-c", loader, f"--data={mnt / 'shard0'}"], start_new_session=True)
    reap.append(app)
    wait_for(lambda: any(proc_wchan_of_task(app.pid, t) == "request_wait_answer" for t in tasks(app.pid)),
             what="the loader thread waiting on FUSE")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(app.pid), "--sample", "0.3")
    f = finding(host, "fuse-no-answer")
    assert f["pids"][0] == app.pid and server.pid in f["pids"] and "thread" in f["summary"]
    assert str(mnt) in f["summary"] and f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1


def tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def proc_wchan_of_task(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/wchan").read_text()
    except OSError:
        return ""


# ---------------------------------------------------------------- OOM


@OOM_KILLS
def test_pool_worker_oom_killed_under_a_waiting_entrypoint(reap, memcg: MemoryCgroup, oom_noise) -> None:
    """multiprocessing.Pool never notices a worker the OOM killer took: map() waits forever. The
    job runs in its own memory cgroup; an unrelated process is OOM-killed in another meanwhile."""
    cg = MemoryCgroup(160 * 1024 * 1024)
    pool = textwrap.dedent("""
        import multiprocessing
        def work(n):
            return len(bytearray(n << 20))
        if __name__ == "__main__":
            with multiprocessing.Pool(2) as p:
                print(p.map(work, [1, 400]), flush=True)
    """)
    try:
        job = subprocess.Popen(["bash", "-c", f"echo $$ > {cg.procs_file}; {sys.executable} -c '{pool}'; echo done"],
                               start_new_session=True)  # fmt: skip
        reap.append(job)
        wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="a worker OOM-killed")
        parent = next(k for k in children_of(job.pid) if comm(k).startswith("python"))
        wait_for(lambda: len(children_of(parent)) >= 2, what="the pool replaced its worker")
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
        assert host["verdict"] == "stalled" and rc == 1
        oom = next(f for f in host["findings"] if f["rule"] == "oom-killed-child" and f["severity"] == "error")
        assert oom["pids"] == [parent], oom  # the Pool's python lost it, not the entrypoint
        assert cg.name in " ".join(e["detail"] for e in oom["evidence"])
        chain = finding(host, "do-wait-orphan")
        assert chain["pids"][:2] == [job.pid, parent] and chain["caused_by"] == "oom-killed-child"
        assert not any(oom_noise.name in e["detail"] for e in chain["evidence"])
        others = [f for f in host["findings"] if f["rule"] == "oom-killed-child" and f is not oom]
        assert all(f["severity"] == "info" and not f["pids"] for f in others), others
    finally:
        cg.remove()


# ---------------------------------------------------------------- logs


POOL_LOSING_A_WORKER = """
import multiprocessing as mp, time
def work(x):
    time.sleep(3600 if x == 0 else 0)
    return x
if __name__ == "__main__":
    with mp.Pool(2) as pool:
        print(pool.map(work, range(4)))   # task 0's worker is killed: map waits forever
"""


def test_a_pool_that_lost_a_worker_is_one_chain_not_one_per_idle_worker(reap, tmp_path: Path) -> None:
    """multiprocessing.Pool replaces a SIGKILLed worker but its task is lost: the pool waits in a
    lock forever. The idle workers reading the task pipe wait on the same stuck pool process: one
    finding, bash -> pool; the hint says where to look, not 'the cause above' when there is none."""
    script = tmp_path / "pool.py"
    script.write_text(POOL_LOSING_A_WORKER)
    log = tmp_path / "pool.log"
    log.write_text("start\n")
    job = subprocess.Popen(["bash", "-c", f"{sys.executable} {script} >> {log} 2>&1"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: find_desc(job.pid, "python3", "hrtimer_nanosleep") is not None
             or find_desc(job.pid, "python", "hrtimer_nanosleep") is not None, what="task 0 running")  # fmt: skip
    sleeper = find_desc(job.pid, "python3", "hrtimer_nanosleep") or find_desc(job.pid, "python", "hrtimer_nanosleep")
    assert sleeper is not None
    pool = int(Path(f"/proc/{sleeper}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(sleeper, signal.SIGKILL)
    wait_for(lambda: proc_state(sleeper) is None and len(children_of(pool)) == 2, what="the worker replaced")
    os.utime(log, (1, 1))
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5", "--log", str(log), "--stale-after", "60")
    chains = [f for f in host["findings"] if f["rule"] == "do-wait-orphan"]
    assert len(chains) == 1, [f["summary"] for f in chains]
    f = chains[0]
    assert f["pids"] == [job.pid, pool] and f["summary"].startswith(f"bash ({job.pid}) waits on ")
    assert "cause above" not in f["hint"] and f"py-spy dump --pid {pool}" in f["hint"] and rc == 1


@pytest.mark.skipif(shutil.which("logrotate") is None, reason="needs logrotate")
@pytest.mark.parametrize("writer", ["python", "shell-stdio"])
def test_log_rotated_by_logrotate_while_the_writer_keeps_the_old_file(reap, tmp_path: Path, writer: str) -> None:
    """The shell variant holds the log on stdout and stderr: each writer was named twice, "3315 (bash),
    3315 (bash) … still write(s)" (found by a helper). Once each."""
    log = tmp_path / "app.log"
    program = (
        f"import time\nf = open({str(log)!r}, 'a')\nwhile True:\n    f.write('step\\n'); f.flush(); time.sleep(0.05)\n"
    )
    argv = (
        [sys.executable, "-c", program]
        if writer == "python"
        else ["bash", "-c", f"exec >> {shlex.quote(str(log))} 2>&1; while :; do echo step; sleep 0.05; done"]
    )
    job = subprocess.Popen(argv, start_new_session=True)
    reap.append(job)
    wait_for(lambda: log.exists() and log.stat().st_size > 0, what="writer logging")
    conf = tmp_path / "logrotate.conf"
    conf.write_text(f"{log} {{\n  rotate 3\n  create\n  missingok\n}}\n")
    subprocess.run(["logrotate", "-f", "-s", str(tmp_path / "state"), str(conf)], check=True)
    wait_for(lambda: (tmp_path / "app.log.1").exists() and log.stat().st_size == 0, what="rotated")
    os.utime(log, (1, 1))  # the new file has not been written since logrotate created it
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5", "--log", str(log), "--stale-after", "60")
    f = finding(host, "missing-logs")
    assert f["severity"] == "warning" and "rotated" in f["summary"] and f"{log}.1" in f["summary"]
    assert job.pid in f["pids"] and "copytruncate" in f["hint"]
    assert f["summary"].count(f"{job.pid} (") == 1, f["summary"]
    assert not errors(host), errors(host)
    assert host["verdict"] == "degraded" and rc == 0


FULL_QUEUE_SERVER = """
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(0)
print(s.getsockname()[1], flush=True)
threading.Event().wait()  # listens, never accepts: its queue fills, and the next SYN is dropped
"""


def _tcp_states(port: int) -> list[str]:
    """The states of the client ends connecting to `port` (/proc/net/tcp: 01 ESTABLISHED, 02 SYN_SENT)."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return [f[3] for f in rows if int(f[2].split(":")[1], 16) == port]


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_past_a_full_accept_queue_is_held_by_the_listener(reap) -> None:
    """The first curl sits in the listener's accept queue; the second's SYN is dropped (SYN_SENT). Only
    an established connection was taken for curl's wait: the second read HEALTHY beside the first's
    STALLED across hosts (found by a helper). A connection not yet made is the wait too."""
    srv = subprocess.Popen([sys.executable, "-c", FULL_QUEUE_SERVER], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline())
    curls = []
    for want in ("01", "02"):
        c = subprocess.Popen(["curl", "-s", "--max-time", "600", f"http://127.0.0.1:{port}/"],
                             stdout=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        reap.append(c)
        curls.append(c)
        wait_for(lambda want=want: want in _tcp_states(port), what=f"a client end in state {want}")
    late = curls[1]
    wait_for(lambda: proc_wchan(late.pid).startswith(("poll", "do_sys_poll")), what="the second curl polling")
    rc, host = vastprobe_json("--pid", str(late.pid), "--sample", "0.5")
    f = finding(host, "socket-peer-wait")
    assert "not even made (SYN_SENT)" in f["summary"] and srv.pid in f["pids"], f["summary"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1
