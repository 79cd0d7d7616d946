"""Connections inside a network namespace of their own (a container's), read from the host: the other
end of a loopback connection is in the same namespace, whatever another namespace holds with the same
four addresses and ports. vastprobe runs in the host's namespace, as an operator runs it beside
containers."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, proc_wchan, vastprobe_json, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None,
    reason="needs root, unshare and ip for a network namespace",
)

#: argv: port (0: any), a file to create once listening. Prints its port; echoes what it is sent.
SERVER = """
import pathlib, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(5)
print(s.getsockname()[1], flush=True)
pathlib.Path(sys.argv[2]).touch()
while True:
    c, _ = s.accept()
    while (d := c.recv(100)):
        c.sendall(d)
"""

#: argv: the server's port, its own port (0: any). Prints its port; asks and reads an answer, again.
CLIENT = """
import socket, sys, time
c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
c.bind(("127.0.0.1", int(sys.argv[2]))); c.connect(("127.0.0.1", int(sys.argv[1])))
print(c.getsockname()[1], flush=True)
while True:
    c.sendall(b"ping"); c.recv(100); time.sleep(0.2)
"""

#: In a namespace of its own: the server, stopped once it listens, and a client of it on the ports given
#: (the client's connection waits in the stopped server's accept queue). Writes "server client" to who.
NAMESPACED_PAIR = r"""
ip link set lo up
"$PY" -c "$SERVER" "$PORT" "$D/listening" > /dev/null &
S=$!
i=0; until [ -e "$D/listening" ] || [ $i -ge 400 ]; do sleep 0.05; i=$((i+1)); done
kill -STOP $S
"$PY" -c "$CLIENT" "$PORT" "$CPORT" > /dev/null &
C=$!
echo "$S $C" > "$D/who"
trap 'kill -CONT $S; kill $S $C' EXIT TERM
wait
"""


def namespaced_pair(reap: list, tmp_path: Path, port: str, cport: str) -> tuple[int, int]:
    """NAMESPACED_PAIR in a network namespace of its own: (the stopped server, its client), the client
    waiting."""
    env = {**os.environ, "PY": sys.executable, "SERVER": SERVER, "CLIENT": CLIENT, "PORT": port, "CPORT": cport,
           "D": str(tmp_path)}  # fmt: skip
    job = subprocess.Popen(["unshare", "-n", "bash", "-c", NAMESPACED_PAIR], env=env, start_new_session=True)
    reap.append(job)
    who = tmp_path / "who"
    wait_for(lambda: who.exists() and len(who.read_text().split()) == 2, timeout=30, what="the namespaced pair")
    server, client = (int(x) for x in who.read_text().split())
    wait_for(lambda: proc_state(server) == "T" and proc_wchan(client) not in ("", "0"), timeout=30,
             what=lambda: f"the client waiting on the stopped server: {proc_state(server)} {proc_wchan(client)!r}")  # fmt: skip
    return server, client


def test_a_namespaced_client_of_a_stopped_server_is_not_paired_with_a_host_connection(reap, tmp_path: Path) -> None:
    """A healthy pair in the host's namespace holds the very four addresses and ports of a client in a
    namespace whose server is stopped (replicas of one container do, by chance). The host's server was
    taken for the namespaced client's peer: HEALTHY, exit 0, and at one sample a note naming the host's
    processes (found by a helper). A loopback connection never leaves its namespace."""
    host_srv = subprocess.Popen([sys.executable, "-c", SERVER, "0", str(tmp_path / "host-listening")],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    reap.append(host_srv)
    assert host_srv.stdout is not None
    port = host_srv.stdout.readline().strip()
    host_cli = subprocess.Popen([sys.executable, "-c", CLIENT, port, "0"], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)  # fmt: skip
    reap.append(host_cli)
    assert host_cli.stdout is not None
    cport = host_cli.stdout.readline().strip()
    server, client = namespaced_pair(reap, tmp_path, port, cport)
    rc, host = vastprobe_json("--pid", str(client), "--sample", "1")
    said = [(f["rule"], f["severity"], f["summary"], f["pids"]) for f in host["findings"]]
    assert not [f for f in said if {host_srv.pid, host_cli.pid} & set(f[3])], said
    waits = [f for f in said if f[0] == "socket-peer-wait" and f[3][:1] == [client]]
    assert waits and waits[0][1] == "error" and server in waits[0][3], said
    assert host["verdict"] == "stalled" and rc == 1, said


def test_a_namespaced_client_is_read_beside_many_other_namespaces(reap, tmp_path: Path) -> None:
    """The probe reads the socket tables of at most 16 other network namespaces, and took them in hash
    order: 40 containers' listeners (here as many, each a socat in a namespace of its own) left the client's
    unread, and the client of a stopped server read HEALTHY, exit 0 (found by a helper). The job's
    namespaces come first, then those of processes that wait."""
    if shutil.which("socat") is None:
        pytest.skip("needs socat (CI installs it)")
    for _ in range(40):
        other = subprocess.Popen(["unshare", "-n", "socat", "TCP-LISTEN:5000,bind=127.0.0.1", "-"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)  # fmt: skip
        reap.append(other)
    server, client = namespaced_pair(reap, tmp_path, "47111", "0")
    rc, host = vastprobe_json("--pid", str(client), "--sample", "1")
    said = [(f["rule"], f["severity"], f["summary"], f["pids"]) for f in host["findings"]]
    waits = [f for f in said if f[0] == "socket-peer-wait" and f[3][:1] == [client]]
    assert waits and waits[0][1] == "error" and server in waits[0][3], said
    assert host["verdict"] == "stalled" and rc == 1, said


#: argv: a file to write its PID to. In its own namespace, a server that takes one request and sleeps
ONE_REQUEST_SERVER = """
import os, socket, subprocess, sys, time
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 9000)); s.listen()
open(sys.argv[1], "w").write(str(os.getpid()))
c, _ = s.accept(); c.recv(100); time.sleep(1000)
"""


def test_a_job_in_more_namespaces_than_the_bound_is_read_where_it_waits(reap, tmp_path: Path) -> None:
    """A job of 40 clients, each in another server's namespace (`nsenter --net`), one server stopped
    before answering: the job's own namespaces were 40, past the 16 the probe read, and in hash order
    the stopped one's was left: HEALTHY, exit 0 (found by a helper). The job's namespaces are read up
    to 64."""
    if shutil.which("nsenter") is None:
        pytest.skip("needs nsenter (util-linux)")
    n, k = 40, 23
    for i in range(n):
        srv = subprocess.Popen(["unshare", "-n", sys.executable, "-c", ONE_REQUEST_SERVER, str(tmp_path / f"srv.{i}")],
                               start_new_session=True)  # fmt: skip
        reap.append(srv)
    wait_for(lambda: all((tmp_path / f"srv.{i}").exists() and (tmp_path / f"srv.{i}").read_text() for i in range(n)),
             timeout=60, what="the servers listening")  # fmt: skip
    servers = [int((tmp_path / f"srv.{i}").read_text()) for i in range(n)]
    ask = 'import socket\nc = socket.create_connection(("127.0.0.1", 9000)); c.sendall(b"q"); c.recv(100)'
    os.kill(servers[k], signal.SIGSTOP)
    wait_for(lambda: proc_state(servers[k]) == "T", what="one server stopped")
    script = " ".join(f"nsenter --net=/proc/{pid}/ns/net {sys.executable} -c '{ask}' &" for pid in servers) + " wait"
    job = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    reap.append(job)
    wait_for(lambda: len(children_of(job.pid)) == n and all(proc_wchan(c) not in ("", "0") for c in children_of(job.pid)),
             timeout=60, what="every client waiting")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0")
    said = [(f["rule"], f["severity"], f["summary"], f["pids"]) for f in host["findings"]]
    assert any(f[0] == "socket-peer-wait" and f[1] == "error" and servers[k] in f[3] for f in said), said
    assert host["verdict"] == "stalled" and rc == 1, said
    os.kill(servers[k], signal.SIGCONT)
