"""git clone over ssh through a relay (ssh's ProxyCommand) that we can slow down or stop, as a
congested or dead link would: a real multi-threaded client. git's fetch reads index-pack's output
in its main thread while a second thread (the sideband demultiplexer) feeds index-pack from ssh,
so the processes' main threads wait on each other in a loop that is no deadlock."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import descendants, proc_wchan, vastprobe_json, wait_for
from tests.sshd import Sshd, free_port, start_sshd

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("ssh") is None, reason="needs git and ssh")

# stdin/stdout <-> 127.0.0.1:PORT; server to client in CHUNK-byte bursts every GAP seconds
RELAY = """
import os, socket, sys, threading, time
port, chunk, gap = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
def up():
    while (b := os.read(0, 65536)):
        s.sendall(b)
threading.Thread(target=up, daemon=True).start()
while (b := s.recv(chunk)):
    os.write(1, b)
    time.sleep(gap)
"""


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> Iterator[Sshd]:
    s = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A bare repository of 16 MiB that does not compress."""
    d = tmp_path_factory.mktemp("repo")
    work = d / "work"
    work.mkdir()
    (work / "weights.bin").write_bytes(os.urandom(16 << 20))
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for cmd in (["init", "-q"], ["add", "weights.bin"], ["commit", "-qm", "weights"]):
        subprocess.run(["git", "-C", str(work), *cmd], check=True, env=env)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(d / "model.git")], check=True)
    return d / "model.git"


def clone_through_relay(reap: list, sshd: Sshd, repo: Path, dest: Path, chunk: int, gap: float) -> int:
    """The job's shell running git clone; returns its pid once index-pack receives the pack."""
    relay = dest.parent / "relay.py"
    relay.write_text(RELAY)
    ssh = (f"ssh -i {sshd.user_key} -o UserKnownHostsFile={sshd.known_hosts} -o BatchMode=yes "
           f"-o ProxyCommand='{sys.executable} {relay} {sshd.port} {chunk} {gap}'")  # fmt: skip
    env = {**os.environ, "GIT_SSH_COMMAND": ssh}
    url = f"ssh://root@127.0.0.1:{sshd.port}{repo}"
    job = subprocess.Popen(["bash", "-c", f"git clone -q {url} {dest}; echo done"], env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    reap.append(job)
    wait_for(lambda: any(comm(d) == "git" and b"index-pack" in cmdline(d) for d in descendants(job.pid)),
             timeout=30, what="index-pack receiving the pack")  # fmt: skip
    return job.pid


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def the_relay(job: int) -> int:
    """The relay itself (python relay.py), not the shell that ssh ran it with."""
    for d in descendants(job):
        argv = cmdline(d).split(b"\0")
        if len(argv) > 1 and argv[1].endswith(b"/relay.py"):
            return d
    raise AssertionError("no relay")


@pytest.mark.slow
def test_a_slow_clone_is_no_deadlock(reap, sshd: Sshd, repo: Path, tmp_path: Path) -> None:
    """16 KiB every 2 s: a window of one second often sees nothing move; the loop of waits between
    git and index-pack is served by git's other thread."""
    job = clone_through_relay(reap, sshd, repo, tmp_path / "clone", 16384, 2.0)
    for _ in range(3):
        rc, host = vastprobe_json("--pid", str(job), "--sample", "1")
        assert not [f for f in host["findings"] if f["rule"] == "deadlock"], host["findings"]
        assert host["verdict"] != "stalled" and rc == 0, [(f["severity"], f["summary"]) for f in host["findings"]]


def test_a_clone_whose_server_stopped_names_the_server(reap, sshd: Sshd, repo: Path, tmp_path: Path) -> None:
    """The server's side stopped mid-pack: once the relay has drained what was in flight, the clone
    waits forever. The loop between git and index-pack is not the cause; the stopped sshd is."""
    job = clone_through_relay(reap, sshd, repo, tmp_path / "clone", 65536, 0.05)
    relay = the_relay(job)
    server = descendants(sshd.proc.pid)
    for pid in server:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: proc_wchan(relay) in ("wait_woken", "sk_wait_data", "tcp_recvmsg_locked"), timeout=60,
                 what="the relay drained what was in flight")  # fmt: skip
        rc, host = vastprobe_json("--pid", str(job), "--sample", "1")
        assert not [f for f in host["findings"] if f["rule"] == "deadlock"], host["findings"]
        peer = [f for f in host["findings"] if f["rule"] == "socket-peer-wait"]
        assert peer and "(sshd)" in peer[0]["summary"] and "T do_signal_stop" in peer[0]["summary"], host["findings"]
        assert host["verdict"] == "stalled" and rc == 1
    finally:
        for pid in server:
            os.kill(pid, signal.SIGCONT)


#: git pack-objects' output, passed on slowly (uploadpack.packObjectsHook): a long pack stream
SLOW_PACK = """#!/bin/sh
"$@" | python3 -c 'import os, sys, time
while (b := os.read(0, 65536)):
    os.write(1, b); time.sleep(0.05)'
"""


@pytest.mark.skipif(shutil.which("git-daemon") is None and not Path("/usr/lib/git-core/git-daemon").exists(),
                    reason="needs git daemon")  # fmt: skip
def test_a_clone_over_git_protocol_whose_upload_pack_stopped_is_a_stall(reap, repo: Path, tmp_path: Path) -> None:
    """Found by a helper: `git clone git://…` with the server's upload-pack stopped mid-pack read HEALTHY
    for --pid of the clone. Its main thread reads index-pack's output, index-pack reads the clone's
    pipe, and the clone's demux thread reads the connection whose other end is stopped: that thread's
    read holds the loop."""
    hook = tmp_path / "slow-pack.sh"
    hook.write_text(SLOW_PACK)
    hook.chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f"[uploadpack]\n\tpackObjectsHook = {hook}\n")
    port = free_port()
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", f"--base-path={repo.parent}", "--export-all",
                               "--listen=127.0.0.1", f"--port={port}", str(repo.parent)],
                              env={**os.environ, "GIT_CONFIG_GLOBAL": str(config)}, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    reap.append(daemon)
    wait_for(lambda: f":{port:04X} " in Path("/proc/net/tcp").read_text(), what="git daemon listening")
    job = subprocess.Popen(["git", "clone", "-q", f"git://127.0.0.1:{port}/{repo.name}", str(tmp_path / "clone")],
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    reap.append(job)
    wait_for(lambda: any(b"index-pack" in cmdline(d) for d in descendants(job.pid)), timeout=30, what="index-pack")
    upload = next(d for d in descendants(daemon.pid) if b"upload-pack" in cmdline(d))
    os.kill(upload, signal.SIGSTOP)
    try:
        wait_for(lambda: len({proc_wchan(int(t.name)) for t in Path(f"/proc/{job.pid}/task").iterdir()}
                             & {"wait_woken", "anon_pipe_read"}) == 2, timeout=30,
                 what="the clone reading index-pack, its demux thread the server")  # fmt: skip
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
        assert not [f for f in host["findings"] if f["rule"] == "deadlock"], host["findings"]
        peer = [f for f in host["findings"] if f["rule"] == "socket-peer-wait"]
        assert peer and f"{upload} (git" in peer[0]["summary"] and "T do_signal_stop" in peer[0]["summary"], peer
        assert host["verdict"] == "stalled" and rc == 1
    finally:
        os.kill(upload, signal.SIGCONT)
        os.killpg(daemon.pid, signal.SIGKILL)
