"""socket-peer-wait over Unix sockets, real Python servers: one that accepts and never reads, and
one that answers. /proc/net/unix has no queues; ss does (Recv-Q): the request the server never read
is the proof, as over TCP. It read HEALTHY: the server's accept() sleeps in a datagram wait, which
passed for a read of its listening socket, and the chain ended there with nobody to blame."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import proc_wchan, vastprobe_json, wait_for

SERVER = """
import socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen()
print(flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
    if sys.argv[2] == "busy":  # reads the request, then works on it (a slow answer, not a stall)
        c.recv(100)
        while True:
            sum(range(100000))
"""

CLIENT = """
import socket, sys
c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])
c.sendall(b"GET\\n"); c.recv(100)
"""

pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to name a Unix socket's peer")


def start(reap, path: Path, mode: str) -> tuple[subprocess.Popen, subprocess.Popen]:
    srv = subprocess.Popen([sys.executable, "-c", SERVER, str(path), mode], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    srv.stdout.readline()
    cli = subprocess.Popen([sys.executable, "-c", CLIENT, str(path)], start_new_session=True)
    reap.append(cli)
    wait_for(lambda: proc_wchan(cli.pid).startswith("unix_stream"), what="the client waiting")
    wait_for(lambda: proc_wchan(srv.pid) != "unix_stream_read_generic", what="the server past the request")
    return srv, cli


def test_a_client_whose_unix_server_never_read_its_request_is_stalled(reap, tmp_path: Path) -> None:
    srv, cli = start(reap, tmp_path / "api.sock", "silent")
    rc, host = vastprobe_json("--pid", str(cli.pid), "--sample", "0.5")
    found = [f for f in host["findings"] if f["rule"] == "socket-peer-wait"]
    assert found, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    f = found[0]
    assert srv.pid in f["pids"] and "4 B it has not read" in f["summary"], f["summary"]
    assert any(e["source"] == "proof" and "did not read the 4 B" in e["detail"] for e in f["evidence"]), f["evidence"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1


def test_a_client_of_a_unix_server_working_on_its_request_is_healthy(reap, tmp_path: Path) -> None:
    """The control: the server read the request and computes its answer; it moves, so the wait on
    it is no stall."""
    _srv, cli = start(reap, tmp_path / "api.sock", "busy")
    rc, host = vastprobe_json("--pid", str(cli.pid), "--sample", "0.5")
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


#: argv: its socket's path. An HTTP server on a Unix socket; prints a line once listening
UNIX_HTTP = """
import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def address_string(self):
        return "unix"
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "3"); self.end_headers(); self.wfile.write(b"ok\\n")
srv = socketserver.UnixStreamServer(sys.argv[1], H)
print(flush=True)
srv.serve_forever()
"""


@pytest.mark.skipif(shutil.which("socat") is None or shutil.which("curl") is None, reason="needs socat and curl")
def test_a_client_through_socat_to_a_stopped_unix_server_beside_another_is_stalled(reap, tmp_path: Path) -> None:
    """curl -> socat `UNIX-CONNECT:/path` -> a stopped Unix server, while another stopped Unix listener
    has a client queued too: the queued connection is tied to the listener its holder's command line
    names, and socat's `UNIX-CONNECT:` form was not read as a path: HEALTHY, exit 0 (found by a helper)."""
    servers = {}
    for name in ("a", "b"):
        srv = subprocess.Popen([sys.executable, "-c", UNIX_HTTP, str(tmp_path / f"{name}.sock")], stdout=subprocess.PIPE,
                               text=True, start_new_session=True)  # fmt: skip
        reap.append(srv)
        assert srv.stdout is not None and srv.stdout.readline() == "\n"
        srv.send_signal(signal.SIGSTOP)
        servers[name] = srv
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    relay = subprocess.Popen(["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork", f"UNIX-CONNECT:{tmp_path}/a.sock"],
                             stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    reap.append(relay)
    other = subprocess.Popen([sys.executable, "-c", CLIENT, str(tmp_path / "b.sock")], start_new_session=True)
    reap.append(other)
    wait_for(lambda: bool(subprocess.run(["ss", "-Htln", f"sport = :{port}"], capture_output=True, text=True).stdout),
             what="socat listening")  # fmt: skip
    client = subprocess.Popen(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}/"], start_new_session=True)
    reap.append(client)

    def queued() -> int:
        out = subprocess.run(["ss", "-Hxl"], capture_output=True, text=True).stdout
        return sum(1 for line in out.splitlines() if str(tmp_path) in line and line.split()[2] != "0")

    wait_for(lambda: queued() == 2 and proc_wchan(client.pid).startswith("poll"), timeout=20,
             what="a connection queued at each stopped listener")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(client.pid), "--sample", "1")
    said = [(f["rule"], f["severity"], f["summary"], f["pids"]) for f in host["findings"]]
    assert any(f[1] == "error" and servers["a"].pid in f[3] for f in said), said
    assert not any(servers["b"].pid in f[3] for f in said), said
    assert host["verdict"] == "stalled" and rc == 1, said
    for srv in servers.values():
        srv.send_signal(signal.SIGCONT)
