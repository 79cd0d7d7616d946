"""An event loop waits on the fds it watches, not on every fd it holds: for epoll, the interest list
in /proc/PID/fdinfo (`tfd:` lines) says which. A server that watches one pipe while it also holds a
pipe from a process that is stopped (an inherited end it never reads) is not waiting on that
stopped process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, proc_wchan, vastprobe_json, wait_for

LOOP = textwrap.dedent("""
    import os, selectors, sys, time
    watched_r, watched_w = os.pipe()
    held_r, held_w = os.pipe()
    if os.fork() == 0:                     # the watched pipe's writer: idle, alive
        os.close(watched_r); os.close(held_r); os.close(held_w)
        time.sleep(3600); os._exit(0)
    if os.fork() == 0:                     # the held pipe's writer, orphaned (outside --pid's scope)
        if os.fork() == 0:
            os.close(watched_r); os.close(watched_w); os.close(held_r)
            with open(sys.argv[1] + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(sys.argv[1] + ".tmp", sys.argv[1])
            time.sleep(3600)
        os._exit(0)
    os.wait()
    os.close(watched_w); os.close(held_w)
    sel = selectors.EpollSelector()
    sel.register(watched_r, selectors.EVENT_READ)   # only this one: held_r is never read
    while True:
        sel.select()
""")


def test_an_epoll_loop_waits_on_what_it_watches_not_on_every_fd_it_holds(reap, tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    pidfile = tmp_path / "orphan.pid"
    # nothing else to poll: stdio from /dev/null
    loop = subprocess.Popen([sys.executable, str(script), str(pidfile)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    reap.append(loop)
    wait_for(pidfile.exists, what="the orphan started")
    orphan = int(pidfile.read_text())
    os.kill(orphan, signal.SIGSTOP)
    try:
        wait_for(lambda: proc_state(orphan) == "T" and proc_wchan(loop.pid).endswith("epoll_wait"),
                 what="the loop waiting, the orphan stopped")  # fmt: skip
        held = Path(f"/proc/{loop.pid}/fdinfo")
        assert any("tfd:" in (held / fd).read_text() for fd in os.listdir(held))
        rc, host = vastprobe_json("--pid", str(loop.pid), "--sample", "1")
        blamed = [f for f in host["findings"] if orphan in f["pids"]]
        assert not blamed, [(f["rule"], f["severity"], f["summary"]) for f in blamed]
        assert host["verdict"] == "healthy" and rc == 0
        loop_json = next(p for p in host["snapshot"]["processes"] if p["pid"] == loop.pid)
        assert loop_json["epoll"] and all(w["events"] & 1 for w in loop_json["epoll"])  # EPOLLIN
    finally:
        os.kill(orphan, signal.SIGKILL)


#: A supervisor collects two jobs' output through one pipe (select on its read end). Job 1's curl
#: connects to a listener whose accept queue is full (backlog 0, one connection queued and never
#: accepted): the kernel drops its SYNs, SYN_SENT, polled with curl's own socketpair. Job 2's curl
#: waits on a stopped server. vastprobe, named on job 1, prints its JSON.
SHARED_PIPE = r"""
cleanup() { kill -CONT $S 2>/dev/null; kill $SUP $S $F $Q 2>/dev/null; pkill -P $SUP 2>/dev/null; }
trap cleanup EXIT
"$PY" -c '
import http.server, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self): time.sleep(10**6)
s = http.server.HTTPServer(("127.0.0.1", 0), H); print(s.server_address[1], flush=True); s.serve_forever()' > "$D/port" &
S=$!
"$PY" -c '
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(0); print(s.getsockname()[1], flush=True); time.sleep(600)' > "$D/full" &
F=$!
while [ ! -s "$D/port" ] || [ ! -s "$D/full" ]; do sleep 0.05; done
"$PY" -c '
import socket, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); time.sleep(600)' "$(cat "$D/full")" &
Q=$!
i=0; until [ -n "$(ss -Htn state established dport = :$(cat "$D/full"))" ] || [ $i -ge 200 ]; do sleep 0.05; i=$((i+1)); done
"$PY" -c '
import os, select, subprocess, sys
r, w = os.pipe()
jobs = [subprocess.Popen(["sh", "-c", c], stdout=w, stderr=w, stdin=subprocess.DEVNULL) for c in sys.argv[1:]]
os.close(w)
open(os.environ["D"] + "/pids", "w").write(" ".join(str(j.pid) for j in jobs))
while select.select([r], [], []) and os.read(r, 65536):
    pass' "exec curl -s http://127.0.0.1:$(cat "$D/full")/" "exec curl -s http://127.0.0.1:$(cat "$D/port")/" &
SUP=$!
while [ ! -s "$D/pids" ]; do sleep 0.05; done
read J1 J2 < "$D/pids"
i=0
until grep -q poll_schedule /proc/$J2/wchan 2>/dev/null && grep -q poll_schedule /proc/$J1/wchan 2>/dev/null \
      && [ -n "$(ss -Htn state syn-sent dport = :$(cat "$D/full"))" ] || [ $i -ge 200 ]; do sleep 0.05; i=$((i+1)); done
kill -STOP $S
echo "$J1 $J2 $S $(ss -Htn state syn-sent dport = :$(cat "$D/full") | wc -l)" > "$D/who"
"$PY" -m vastprobe diagnose local --format json --pid "$J1" --sample "$SAMPLE" || true
"""


@pytest.mark.parametrize("sample", ["0.3", "0"])
def test_a_connect_in_progress_is_polled_not_a_shared_stdout_pipe(tmp_path: Path, sample: str) -> None:
    """curl connecting (SYN_SENT) to a host that never answers, its stdout a pipe a supervisor shares
    with another job: its poll's 2 fds (the connecting socket, its own socketpair) let the stdout pipe in,
    and the walk went through the supervisor into the other job's curl and its stopped server: STALLED,
    exit 1, "curl (J1), through J2 (curl), waits on TCP … whose peer (python3) (T) does not answer"
    (found by a helper, SYNs dropped by a firewall; here by a full accept queue). A connection not yet
    made counts in the poll's number: no such chain."""
    if shutil.which("curl") is None or shutil.which("ss") is None:
        pytest.skip("needs curl and ss")
    env = {**os.environ, "PY": sys.executable, "D": str(tmp_path), "SAMPLE": sample}
    r = subprocess.run(["bash", "-c", SHARED_PIPE], capture_output=True, text=True, env=env, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert r.stdout, r.stderr
    host = json.loads(r.stdout)["hosts"][0]
    j1, j2, server, syn_sent = (tmp_path / "who").read_text().split()
    assert syn_sent == "1", "curl never sat in SYN_SENT: the case not met"
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f"{j2} (" in f[2] or f"{server} (" in f[2]], said  # nothing of the other job
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert host["verdict"] != "stalled" and j1.isdigit(), said


#: a pipeline `writer | poller`: the poller's main thread polls stdin (nfds 1, no timeout), a worker thread
#: is blocked in connect() to a listener whose accept queue is full (SYN_SENT); the writer is stopped
POLLER_BESIDE_A_CONNECT = r"""
cleanup() { kill -CONT $W 2>/dev/null; kill $W $P $F $Q 2>/dev/null; }
trap cleanup EXIT
"$PY" -c '
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(0); print(s.getsockname()[1], flush=True); time.sleep(600)' > "$D/full" &
F=$!
while [ ! -s "$D/full" ]; do sleep 0.05; done
PORT=$(cat "$D/full")
"$PY" -c 'import socket, sys, time; c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); time.sleep(600)' $PORT > /dev/null &
Q=$!
i=0; until [ -n "$(ss -Htn state established dport = :$PORT)" ] || [ $i -ge 200 ]; do sleep 0.05; i=$((i+1)); done
"$PY" -c 'import os, time; open(os.environ["D"] + "/writer", "w").write(str(os.getpid())); time.sleep(600)' | "$PY" -c '
import select, socket, sys, threading
def connect():
    s = socket.socket(); s.connect(("127.0.0.1", int(sys.argv[1])))
threading.Thread(target=connect, daemon=True).start()
p = select.poll(); p.register(0, select.POLLIN)
while p.poll() and sys.stdin.buffer.read1(65536):
    pass' $PORT > /dev/null 2>&1 &
P=$!
while [ ! -s "$D/writer" ]; do sleep 0.05; done
W=$(cat "$D/writer")
i=0; until [ -n "$(ss -Htn state syn-sent dport = :$PORT)" ] && grep -q poll_schedule /proc/$P/wchan 2>/dev/null || [ $i -ge 200 ]; do sleep 0.05; i=$((i+1)); done
kill -STOP $W
echo "$P $W $(ss -Htn state syn-sent dport = :$PORT | wc -l)" > "$D/who"
"$PY" -m vastprobe diagnose local --format json --pid "$P" --sample 0.3 || true
"""


def test_a_poller_beside_a_thread_in_connect_still_waits_on_its_pipe(tmp_path: Path) -> None:
    """A connection another thread is making (blocking connect(), SYN_SENT) is not in the poll: counted
    there, it hid the main thread's stdin pipe from a stopped writer, and the job read DEGRADED, exit 0,
    "polls its only connection" (found by a helper, against the change above)."""
    if shutil.which("ss") is None:
        pytest.skip("needs ss")
    env = {**os.environ, "PY": sys.executable, "D": str(tmp_path)}
    r = subprocess.run(["bash", "-c", POLLER_BESIDE_A_CONNECT], capture_output=True, text=True, env=env, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert r.stdout, r.stderr
    host = json.loads(r.stdout)["hosts"][0]
    poller, writer, syn_sent = (tmp_path / "who").read_text().split()
    assert syn_sent == "1", "no thread sat in connect(): the case not met"
    said = [(f["rule"], f["severity"], f["summary"], f["pids"]) for f in host["findings"]]
    assert [f for f in said if f[1] == "error" and int(writer) in f[3]], said
    assert host["verdict"] == "stalled" and poller.isdigit(), said


#: a producer as fast as its pipe, and a consumer as fast as its: pv between them paces the flow
FAST_PRODUCER = (
    "import os, sys\nbuf = os.urandom(1 << 16)\nwhile True:\n    sys.stdout.buffer.write(buf); sys.stdout.flush()"
)
FAST_CONSUMER = "import sys\nwhile sys.stdin.buffer.read(4096):\n    pass"


@pytest.mark.skipif(shutil.which("pv") is None, reason="needs pv (CI installs it)")
@pytest.mark.parametrize("sample", ["1", "0"])
def test_a_rate_limited_pipeline_is_no_cycle(reap, sample: str) -> None:
    """`producer | pv -q -L 1k | consumer` moves at 1 KiB/s: pv waits in select() on its stdin alone
    with a timeout, pacing itself, while its stdin is full. It read as a blocking read of an empty pipe,
    and with the consumer reading pv's pipe, a cycle: a warning "deadlock" at one sample (found by a
    helper). A select with a timeout is a pause."""
    py = sys.executable
    job = subprocess.Popen(["bash", "-c", f"{py} -c '{FAST_PRODUCER}' | pv -q -L 1k | {py} -c '{FAST_CONSUMER}'"],
                           start_new_session=True)  # fmt: skip
    reap.append(job)

    def pv() -> int | None:
        return next((k for k in children_of(job.pid) if Path(f"/proc/{k}/comm").read_text().strip() == "pv"), None)

    wait_for(lambda: (p := pv()) is not None and Path(f"/proc/{p}/syscall").read_text().split()[0] in ("23", "270"),
             what="pv pacing in select()")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f[0] == "deadlock"], said
    assert host["verdict"] == "healthy" and rc == 0, said
