"""A real OpenSSH sshd on 127.0.0.1 for tests: its own host key, user key, config and port."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


#: Ports for the servers a test starts come from a block of this worker's own, below the kernel's
#: ephemeral range: bind(0) hands two xdist workers the same port now and then (and every outgoing
#: connection takes its source port from that range), and a server that lost its port to another
#: worker's left that worker's listener answering for it (a CI run: "no server.py under" its host).
_PORT_BLOCK = 1500
_next_port: list[int] = []


def _worker_ports() -> range | None:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    blocks = (low - 10000) // _PORT_BLOCK
    if blocks < 1:
        return None
    first = 10000 + (index % blocks) * _PORT_BLOCK
    return range(first, first + _PORT_BLOCK)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """n distinct ports free now, for servers about to bind them: from this worker's own block (see
    _PORT_BLOCK), else from the kernel. Another suite on this machine may still take one before the
    server binds it (start_sshd retries); where nothing must listen, use dead_ports."""
    block = _worker_ports()
    if block is None:
        return _kernel_ports(n)
    if not _next_port:
        _next_port.append(block.start + os.getpid() % _PORT_BLOCK)
    out: list[int] = []
    for _ in range(_PORT_BLOCK):
        port = block.start + (_next_port[0] - block.start) % _PORT_BLOCK
        _next_port[0] = port + 1
        if port not in out and _bindable(port):
            out.append(port)
            if len(out) == n:
                return out
    return _kernel_ports(n)


def _kernel_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """A port nothing listens on now, for a server about to bind it (free_ports)."""
    return free_ports(1)[0]


#: Sockets bound, never listening, for the whole test process: connections to their ports are
#: refused on every loopback address, and no other process (another worker's sshd) can take them.
_HELD: list[socket.socket] = []


def dead_port() -> int:
    """A port where nothing listens and nothing will for as long as the tests run: bound here on
    the wildcard address (dual-stack where there is IPv6), never listening, so a connection to
    127.0.0.x or ::1 at this port is refused. A port merely free now may be another worker's sshd
    a second later."""
    return dead_ports(1)[0]


def dead_ports(n: int) -> list[int]:
    """n distinct dead ports (dead_port)."""
    out = []
    for _ in range(n):
        try:
            s = socket.socket(socket.AF_INET6)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(("::", 0))
        except OSError:  # no IPv6 here
            s = socket.socket()
            s.bind(("0.0.0.0", 0))
        _HELD.append(s)
        out.append(s.getsockname()[1])
    return out


def keygen(path: Path, kind: str = "ed25519") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)
    return path


@dataclass
class Sshd:
    port: int
    host_key: Path
    user_key: Path
    known_hosts: Path  # trusts this sshd's host key
    proc: subprocess.Popen
    address: str = "127.0.0.1"
    log: Path | None = None
    forced: tuple[Path, str] | None = None  # where the ForceCommand writes its PID, and the command

    @property
    def target(self) -> str:
        return f"root@{self.address}:{self.port}"

    def stop(self) -> None:
        """The listener, every session under it, and each ForceCommand it ran: one (`sleep 600`)
        whose session ended first would otherwise outlive the test, adopted by init, in every later
        test's view of the machine. A recorded PID is killed only while it still runs that command."""
        import shlex

        from tests.helpers import descendants

        for pid in reversed(descendants(self.proc.pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        if self.forced is not None and self.forced[0].exists():
            argv = [a.encode() for a in shlex.split(self.forced[1])]
            for word in self.forced[0].read_text().split():
                try:
                    if Path(f"/proc/{word}/cmdline").read_bytes().split(b"\0")[: len(argv)] == argv:
                        os.kill(int(word), 9)
                except (OSError, ValueError):
                    pass
        self.proc.kill()
        self.proc.wait()


def start_sshd(d: Path, force_command: str | None = None, user_key: Path | None = None, extra: str = "",
               address: str = "127.0.0.1", log_level: str = "ERROR", addresses: list[str] | None = None,
               wrap: list[str] | None = None) -> Sshd:  # fmt: skip
    """`wrap`: a command line that runs sshd's as its last arguments (e.g. `unshare ... sh -c '... exec "$@"' sh`)."""
    if not Path(SSHD).exists() or os.geteuid() != 0:
        pytest.skip("needs root and OpenSSH sshd (apt-get install openssh-server)")
    d.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    host_key = keygen(d / "host_ed25519")
    user_key = user_key or keygen(d / "user_ed25519")
    auth = d / "authorized_keys"
    auth.write_text(Path(str(user_key) + ".pub").read_text())
    auth.chmod(0o600)
    listen = addresses or [address]
    log = d / "sshd.log"
    for _attempt in range(8):
        port = free_port()
        conf = d / "sshd_config"
        lines = [
            *(f"ListenAddress {a}" for a in listen),
            f"Port {port}",
            f"HostKey {host_key}",
            f"AuthorizedKeysFile {auth}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            f"PidFile {d / 'sshd.pid'}",
            f"LogLevel {log_level}",
            "AllowTcpForwarding yes",
            "MaxStartups 100:30:200",
            # The login shell (root's bash) reads ~/.bashrc for a command sshd runs, unless it is
            # not the top shell (SHLVL): this machine's files are not the test's. pyenv's rc, for
            # one, runs `pyenv rehash` under a lock file; a session killed meanwhile (stop())
            # leaves the lock, and every later session waited 60 s for it (CI, stop 28).
            "SetEnv SHLVL=1",
        ]
        if force_command:  # its PID recorded, for stop()
            lines.append(f"ForceCommand echo $$ >> {d / 'forced.pids'}; exec {force_command}")
        conf.write_text("\n".join(lines) + "\n" + extra)
        log.unlink(missing_ok=True)
        proc = subprocess.Popen(
            [*(wrap or ()), SSHD, "-D", "-E", str(log), "-f", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if _serving(proc, listen[0], port, log):
            break
    else:
        raise RuntimeError(f"sshd found no free port in 8 tries: {log.read_text() if log.exists() else ''}")
    known = d / "known_hosts"
    pub = Path(str(host_key) + ".pub").read_text().split()
    known.write_text("".join(f"[{a}]:{port} {pub[0]} {pub[1]}\n" for a in listen))
    forced = (d / "forced.pids", force_command) if force_command else None
    return Sshd(port, host_key, user_key, known, proc, listen[0], log, forced)


def _serving(proc: subprocess.Popen, address: str, port: int, log: Path) -> bool:
    """Whether this sshd (or the one its wrapper started) listens on `port` and greets; False when
    another process took the port first (it exited with "Address already in use": try another). A
    greeting alone is not enough: it may come from another worker's sshd on that port."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = log.read_text() if log.exists() else ""
            if "Address already in use" in text:
                return False
            raise RuntimeError(f"sshd exited: {text}")
        if _listens(proc.pid, port):
            with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return True
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError("sshd did not start")


def _listens(pid: int, port: int) -> bool:
    """Whether `pid` or a process below it holds a TCP socket listening on `port`."""
    import psutil

    try:
        top = psutil.Process(pid)
        family = [top, *top.children(recursive=True)]
    except psutil.Error:
        return False
    for p in family:
        try:
            conns = p.net_connections(kind="tcp") if hasattr(p, "net_connections") else p.connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            return True
    return False
