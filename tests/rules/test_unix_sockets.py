"""socket-peer-wait over Unix sockets, real Python servers: one that accepts and never reads, and
one that answers. /proc/net/unix has no queues; ss does (Recv-Q): the request the server never read
is the proof, as over TCP. It read HEALTHY: the server's accept() sleeps in a datagram wait, which
passed for a read of its listening socket, and the chain ended there with nobody to blame."""

from __future__ import annotations

import shutil
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
