"""A wait through a relay (a TCP proxy, `ssh -L`): what holds it is where the relay passes the bytes on.

Each "host" is a real OpenSSH sshd in a PID namespace of its own (tests/report/test_joins.py's Fleet); the
relay is a threaded Python TCP proxy (main thread in accept(), one pump thread a direction, as simple
proxies are) or OpenSSH's own `ssh -N -L`; the server answers each line and is stopped (SIGSTOP)
before the client's request reaches it. Found by a helper: a process holding a listening socket was
taken for a server waiting for work, so the wait ended at the relay, and its host read HEALTHY."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers import proc_state, wait_for
from tests.report.test_joins import Fleet
from tests.sshd import Sshd, free_ports

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")

SERVER = """import socket, sys, threading
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1]))); ls.listen(16)
def serve(c):
    for line in c.makefile("rb"):
        c.sendall(b"ok " + line)
while True:
    threading.Thread(target=serve, args=(ls.accept()[0],), daemon=True).start()
"""
RELAY = """import socket, sys, threading
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1]))); ls.listen(16)
def pump(a, b):
    while (d := a.recv(65536)):
        b.sendall(d)
while True:
    c, _ = ls.accept()
    u = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    threading.Thread(target=pump, args=(c, u), daemon=True).start()
    threading.Thread(target=pump, args=(u, c), daemon=True).start()
"""
#: connects, then sends its request once the file `go` exists, and waits for the answer for ever
CLIENT = """import os, socket, sys, time
while True:
    try:
        c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); break
    except OSError:
        time.sleep(0.1)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
c.sendall(b"request\\n"); c.recv(100); time.sleep(100000)
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    for name, text in (("server.py", SERVER), ("relay.py", RELAY), ("client.py", CLIENT)):
        (tmp_path / name).write_text(text)
    try:
        yield f
    finally:
        for h in f.hosts:
            for c in psutil.Process(h.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    c.send_signal(signal.SIGCONT)
            h.stop()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid(h: Sshd, script: str) -> int:
    for c in psutil.Process(h.proc.pid).children(recursive=True):
        try:
            if any(a.endswith(script) for a in c.cmdline()):
                return c.pid
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no {script} under {h.target}")


def _stopped_server(fleet: Fleet, port: int, on: Sshd | None = None) -> tuple[Sshd, int]:
    host = on or fleet.host(f"{sys.executable} {fleet.dir / 'server.py'} {port}")
    wait_for(lambda: _listening(port), what="the server listening")
    pid = _pid(host, "server.py")
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: proc_state(pid) == "T", what="the server stopped")
    return host, pid


def _client_waits(fleet: Fleet, h: Sshd) -> None:
    """The client sends its request and blocks reading the answer."""
    (fleet.dir / "go").touch()
    pid = _pid(h, "client.py")
    wait_for(lambda: "wait" in Path(f"/proc/{pid}/wchan").read_text() and proc_state(pid) == "S",
             what="the client waiting for its answer")  # fmt: skip


def test_a_relay_whose_upstream_on_its_own_host_is_stopped_is_held_by_it(fleet: Fleet) -> None:
    """A's client -> B's proxy -> B's stopped server (not the proxy's child). A read HEALTHY beside a
    stalled B, and B diagnosed for the proxy alone read HEALTHY, exit 0: the proxy's pump thread
    reading the server was never followed."""
    sport, pport = free_ports(2)
    py = sys.executable
    b = fleet.host(f"{py} {fleet.dir / 'server.py'} {sport} & {py} {fleet.dir / 'relay.py'} {pport} {sport}")
    _stopped_server(fleet, sport, on=b)
    wait_for(lambda: _listening(pport), what="the relay listening")
    a = fleet.host(f"{py} {fleet.dir / 'client.py'} {pport} {fleet.dir / 'go'}")
    _client_waits(fleet, a)
    rc, got = fleet.sweep(a.target, b.target)
    assert rc == 1 and all(h["verdict"] == "stalled" for h in got.values()), {t: h["headline"] for t, h in got.items()}
    relay_host = b
    alone = fleet.run("diagnose", relay_host.target, extra=("--match", "relay.py"))
    host = json.loads(alone.stdout)["hosts"][0]
    assert alone.returncode == 1 and host["verdict"] == "stalled", host["headline"]


def test_a_wait_through_a_relay_on_another_host_names_the_end_two_hosts_on(fleet: Fleet) -> None:
    """A's client -> B's proxy -> C's stopped server: A and B read HEALTHY, and C was never named. The
    relay's host reports the connections it opened; the run follows the wait through it to C."""
    sport, pport = free_ports(2)
    c, server = _stopped_server(fleet, sport)
    b = fleet.host(f"{sys.executable} {fleet.dir / 'relay.py'} {pport} {sport}")
    wait_for(lambda: _listening(pport), what="the relay listening")
    a = fleet.host(f"{sys.executable} {fleet.dir / 'client.py'} {pport} {fleet.dir / 'go'}")
    _client_waits(fleet, a)
    rc, got = fleet.sweep(a.target, b.target, c.target)
    assert rc == 1 and all(h["verdict"] == "stalled" for h in got.values()), {t: h["headline"] for t, h in got.items()}
    (told,) = [f for f in got[a.target]["findings"] if f["rule"] == "socket-peer-wait"]
    assert f"on {b.target}, relaying to python" in told["summary"] and told["summary"].endswith(
        f"on {c.target}: stopped (T)"
    ), told["summary"]
    assert told["severity"] == "error" and told["remote"] == c.target
    (relay,) = [f for f in got[b.target]["findings"] if f["rule"] == "socket-peer-wait"]
    assert relay["summary"].endswith(f"on {c.target}: stopped (T)") and relay["remote"] == c.target, relay
    assert server > 0


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
@pytest.mark.parametrize("stopped", [True, False], ids=["stopped", "answering"])
def test_a_client_through_an_ssh_tunnel_is_held_by_the_server_at_its_far_end(fleet: Fleet, stopped: bool) -> None:
    """A's client -> A's `ssh -N -L` -> B's sshd -> B's server. Stopped, A blamed its own ssh ("does not
    answer", DEGRADED): ssh holds the tunnel's listening socket and was taken for a server. It relays:
    the wait goes on to B, where sshd waits on the stopped server. Answering, both read healthy."""
    sport, lport = free_ports(2)
    b = fleet.host(f"{sys.executable} {fleet.dir / 'server.py'} {sport}")
    wait_for(lambda: _listening(sport), what="the server listening")
    kh = fleet.dir / "known_hosts_b"
    kh.write_text(b.known_hosts.read_text())
    (fleet.dir / "a.sh").write_text(
        f"ssh -N -L {lport}:127.0.0.1:{sport} -p {b.port} -i {fleet.key} -o UserKnownHostsFile={kh} "
        f"-o BatchMode=yes -o StrictHostKeyChecking=yes root@127.0.0.1 &\n"
        f"exec {sys.executable} {fleet.dir / 'client.py'} {lport} {fleet.dir / 'go'}\n"
    )
    a = fleet.host(f"sh {fleet.dir / 'a.sh'}")
    wait_for(lambda: _listening(lport), timeout=20, what="the tunnel listening")
    if stopped:
        _stopped_server(fleet, sport, on=b)
    _client_waits(fleet, a) if stopped else (fleet.dir / "go").touch()
    if not stopped:
        client = _pid(a, "client.py")
        wait_for(lambda: "nanosleep" in Path(f"/proc/{client}/wchan").read_text(), what="the client answered")
    rc, got = fleet.sweep(a.target, b.target)
    if stopped:
        assert rc == 1 and got[a.target]["verdict"] == "stalled", got[a.target]["headline"]
        assert "ssh (" in got[a.target]["headline"] and f"on {b.target}" in got[a.target]["headline"]
        assert "(T do_signal_stop)" in got[a.target]["headline"], got[a.target]["headline"]
    else:
        assert rc == 0 and got[a.target]["verdict"] == "healthy", got[a.target]["headline"]
        assert got[b.target]["verdict"] == "healthy", got[b.target]["headline"]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
def test_a_client_through_two_chained_ssh_tunnels_is_held_by_the_stopped_server_beyond_them(fleet: Fleet) -> None:
    """A's client -> A's `ssh -L` into B -> B's sshd session -> B's own `ssh -L` into C -> C's stopped
    server. A read HEALTHY while B and C read STALLED: the wait stopped at B's sshd session, whose
    connection goes on to a listener on its own host (found by a helper). It is followed there."""
    sport, bport, aport = free_ports(3)
    c, _server = _stopped_server(fleet, sport)
    kh = fleet.dir / "known_hosts_tunnels"
    kh.write_text(c.known_hosts.read_text())
    opts = f"-i {fleet.key} -o UserKnownHostsFile={kh} -o BatchMode=yes -o StrictHostKeyChecking=yes"
    b = fleet.host(f"ssh -N -L {bport}:127.0.0.1:{sport} -p {c.port} {opts} root@127.0.0.1")
    wait_for(lambda: _listening(bport), timeout=20, what="B's tunnel listening")
    kh.write_text(c.known_hosts.read_text() + b.known_hosts.read_text())
    (fleet.dir / "a.sh").write_text(
        f"ssh -N -L {aport}:127.0.0.1:{bport} -p {b.port} {opts} root@127.0.0.1 &\n"
        f"exec {sys.executable} {fleet.dir / 'client.py'} {aport} {fleet.dir / 'go'}\n"
    )
    a = fleet.host(f"sh {fleet.dir / 'a.sh'}")
    wait_for(lambda: _listening(aport), timeout=20, what="A's tunnel listening")
    _client_waits(fleet, a)
    rc, got = fleet.sweep(a.target, b.target, c.target)
    assert rc == 1 and all(h["verdict"] == "stalled" for h in got.values()), {t: h["headline"] for t, h in got.items()}
    assert f"on {c.target}" in got[a.target]["headline"], got[a.target]["headline"]


@pytest.mark.skipif(shutil.which("ssh") is None or shutil.which("tar") is None, reason="needs the OpenSSH client")
@pytest.mark.parametrize("scope", [(), ("--match", "tar|ssh")], ids=["whole", "match"])
def test_a_copy_through_a_jump_host_is_held_by_the_stopped_receiver_beyond_it(fleet: Fleet, scope: tuple) -> None:
    """`tar | ssh -J B C 'cat > out'` on A, C's cat stopped. B's sshd session relays the jump's channel
    to C's sshd, but holds no listener (its parent does): A and B read HEALTHY; scoped, A and B each
    said the other held it (found by a helper). A forking server's session relays as its parent's."""
    big = fleet.dir / "big"
    big.write_bytes(bytes(64 << 20))
    b = fleet.host("sleep 100000")
    c = fleet.host("sleep 100000")
    kh = fleet.dir / "kh"
    kh.write_text(b.known_hosts.read_text() + c.known_hosts.read_text())
    cfg = fleet.dir / "ssh_config"
    cfg.write_text(f"Host *\n  IdentityFile {fleet.key}\n  UserKnownHostsFile {kh}\n  BatchMode yes\n"
                   "  StrictHostKeyChecking yes\n")  # fmt: skip
    jump = f"ssh -F {cfg} -J root@127.0.0.1:{b.port} -p {c.port} root@127.0.0.1"
    a = fleet.host(f"sh -c 'tar cf - -C {fleet.dir} big | {jump} \"cat > {fleet.dir}/out.tar\"'")
    wait_for(lambda: fleet.find(c, "cat") is not None, timeout=30, what="the receiver on C")
    cat = fleet.find(c, "cat")
    assert cat is not None
    os.kill(cat, signal.SIGSTOP)
    wait_for(
        lambda: proc_state(cat) == "T" and fleet.blocked_in(a, "anon_pipe_write"), timeout=30, what="the copy held"
    )
    rc, got = fleet.sweep(a.target, b.target, c.target, extra=scope)
    f = next(f for f in got[a.target]["findings"] if f["rule"] == "socket-peer-wait")
    assert (
        f"on {b.target}, relaying to sshd (" in f["summary"] and f"on {c.target}: its host says: cat (" in f["summary"]
    )
    assert f["severity"] == "error" and got[a.target]["verdict"] == "stalled", f["summary"]
    relay = next(f for f in got[b.target]["findings"] if " relays " in f["summary"])
    assert relay["severity"] == "error" and relay["remote"] == c.target, relay["summary"]
    assert got[b.target]["verdict"] == "stalled" and got[c.target]["verdict"] == "stalled" and rc == 1
