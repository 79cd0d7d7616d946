"""A real OpenSSH sshd on 127.0.0.1 for tests: its own host key, user key, config and port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """n distinct free ports: each held bound until all are chosen (n free_port() calls can
    return one port twice, and a sweep probes a target listed twice once)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


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

    @property
    def target(self) -> str:
        return f"root@{self.address}:{self.port}"

    def stop(self) -> None:
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
    port = free_port()
    conf = d / "sshd_config"
    listen = addresses or [address]
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
    ]
    if force_command:
        lines.append(f"ForceCommand {force_command}")
    conf.write_text("\n".join(lines) + "\n" + extra)
    log = d / "sshd.log"
    proc = subprocess.Popen(
        [*(wrap or ()), SSHD, "-D", "-E", str(log), "-f", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((listen[0], port), timeout=0.5) as s:
                if s.recv(4).startswith(b"SSH-"):
                    break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {log.read_text() if log.exists() else ''}") from None
            time.sleep(0.05)
    else:
        proc.kill()
        raise RuntimeError("sshd did not start")
    known = d / "known_hosts"
    pub = Path(str(host_key) + ".pub").read_text().split()
    known.write_text("".join(f"[{a}]:{port} {pub[0]} {pub[1]}\n" for a in listen))
    return Sshd(port, host_key, user_key, known, proc, listen[0], log)
