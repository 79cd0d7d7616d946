"""A chain of waits over three hosts of one sweep: A's client asks B's app server, which asks C's
redis-server over its pooled connection; C's redis is stopped. Each "host" is a real sshd in a PID
namespace of its own (test_joins.Fleet). A is held through B by a proven stop, whatever order the
hosts' reports come in: with `--match`, A read DEGRADED in 2 of 4 sweeps, quoting B's finding from
before B's own join to C ("no process on this host holds the other end"), where B read STALLED (found
by a helper). The recorded scene (fixtures/joins/record.py) is analysed in every order."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import proc_state, wait_for
from tests.report.test_joins import Fleet, fleet, recorded  # noqa: F401  (the fixture)
from tests.sshd import Sshd, free_ports

MATCH = "ringclient|appsrv|redis"

#: An app server: one pooled connection to its upstream, opened at start; serves one client at a time,
#: each request line asked upstream and its answer passed back
APPSRV = """import socket, sys, time
port, up = int(sys.argv[1]), int(sys.argv[2])
u = socket.create_connection(("127.0.0.1", up))
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port)); ls.listen(16)
uf = u.makefile("rb")
while True:
    c, _ = ls.accept()
    for line in c.makefile("rb"):
        u.sendall(line)
        c.sendall(uf.readline())
"""
#: A client that sends PING lines once `go` exists, one a tenth of a second, reading each answer
RINGCLIENT = """import os, socket, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
f = c.makefile("rb")
while True:
    c.sendall(b"PING\\n")
    f.readline()
    time.sleep(0.1)
"""


def _up(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class Ring:
    a: Sshd
    b: Sshd
    c: Sshd


def ring(fleet: Fleet, d: Path) -> Ring:  # noqa: F811
    """The three hosts once C's redis is stopped and B's app server waits on it."""
    rport, aport = free_ports(2)
    (d / "appsrv.py").write_text(APPSRV)
    (d / "ringclient.py").write_text(RINGCLIENT)
    c = fleet.host(f"redis-server --port {rport} --bind 127.0.0.1 --save '' --appendonly no")
    wait_for(lambda: _up(rport), what="redis-server")
    b = fleet.host(f"{sys.executable} {d}/appsrv.py {aport} {rport}")
    wait_for(lambda: _up(aport), what="the app server")
    go = d / "go"
    a = fleet.host(f"{sys.executable} {d}/ringclient.py {aport} {go}")
    redis = fleet.find(c, "redis-server")
    assert redis is not None
    wait_for(lambda: fleet.find(a, "python3") is not None or fleet.find(a, "python") is not None, what="the client")
    os.kill(redis, signal.SIGSTOP)
    wait_for(lambda: proc_state(redis) == "T", what="redis-server stopped")
    go.touch()
    wait_for(lambda: fleet.blocked_in(b, "wait_woken") and fleet.blocked_in(a, "wait_woken"), what="A and B waiting")
    return Ring(a, b, c)


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("redis-server") is None,
                    reason="needs unshare and redis-server")  # fmt: skip
def test_a_chain_over_three_hosts_is_held_by_the_stop_at_its_end(fleet: Fleet, tmp_path: Path) -> None:  # noqa: F811
    r = ring(fleet, tmp_path)
    for extra in (("--match", MATCH), ()):
        rc, got = fleet.sweep(r.a.target, r.b.target, r.c.target, extra=extra)
        a = got[r.a.target]
        f = next(f for f in a["findings"] if f["rule"] == "socket-peer-wait")
        assert f["severity"] == "error" and a["verdict"] == "stalled", (extra, a["findings"])
        assert f"on {r.c.target}: stopped (T)" in f["summary"], f["summary"]
        assert got[r.b.target]["verdict"] == "stalled" and got[r.c.target]["verdict"] == "stalled" and rc == 1


def test_the_recorded_chain_reads_the_same_in_every_order(tmp_path: Path) -> None:
    files = dict(zip("ABC", recorded(tmp_path, "redis-ring"), strict=True))
    for order in itertools.permutations("ABC"):
        r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", *(files[h] for h in order), "--match", MATCH,
                            "--format", "json"], capture_output=True, text=True, timeout=120)  # fmt: skip
        hosts = dict(zip(order, json.loads(r.stdout)["hosts"], strict=True))
        a = hosts["A"]
        f = next(f for f in a["findings"] if f["rule"] == "socket-peer-wait")
        assert f["severity"] == "error" and a["verdict"] == "stalled", (order, f["summary"])
        assert f"on {hosts['C']['target']}: stopped (T)" in f["summary"], (order, f["summary"])
        assert [hosts[h]["verdict"] for h in "BC"] == ["stalled", "stalled"] and r.returncode == 1, order
