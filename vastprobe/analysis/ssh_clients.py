"""Where an ssh client on the target is connected, read from its argv as OpenSSH reads it, so a
finding can say which host to diagnose next and give the exact command (the remote side of
`tar | ssh`, `rsync -e ssh`, `scp`).

Only the options that change the destination are kept: the user (`-l`, `user@`), the port (`-p`,
`host:port` is not ssh syntax but `ssh://user@host:port` is), the identity file (`-i`) and a jump
host (`-J`). Anything else is skipped with its argument when it takes one.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from vastprobe.targets import port_number

#: ssh(1) options that take an argument (OpenSSH 9)
_WITH_ARG = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
SSH_CLIENTS = frozenset({"ssh", "dbclient"})


@dataclass(frozen=True)
class SshDestination:
    host: str
    user: str | None = None
    port: int | None = None
    identity: str | None = None
    jump: str | None = None

    def target(self, fallback_port: int | None = None) -> str:
        """As vastprobe takes it: `[user@]host[:port]` (an IPv6 address bracketed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = self.port or fallback_port
        text = f"{self.user}@{host}" if self.user else host
        return f"{text}:{port}" if port and port != 22 else text

    def command(self, fallback_port: int | None = None) -> str:
        parts = ["vastprobe", "diagnose", self.target(fallback_port)]
        if self.identity:
            parts += ["-i", self.identity]
        if self.jump:
            parts += ["-J", self.jump]
        return shlex.join(parts)


def ssh_destination(argv: tuple[str, ...]) -> SshDestination | None:
    """The destination of an `ssh` command line, or None when there is none to read."""
    user = port = identity = jump = None
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        flags = a[1:]
        for j, ch in enumerate(flags):
            if ch in _WITH_ARG:
                value = flags[j + 1 :] or (argv[i + 1] if i + 1 < len(argv) else "")
                if not flags[j + 1 :]:
                    i += 1
                if ch == "l":
                    user = value
                elif ch == "p":
                    port = port_number(value)
                elif ch == "i":
                    identity = value
                elif ch == "J":
                    jump = value
                elif ch == "o":
                    key, _, val = value.replace("=", " ", 1).partition(" ")
                    if key.lower() == "port":
                        port = port_number(val.strip())
                    elif key.lower() == "user":
                        user = val.strip()
                break
        i += 1
    if i >= len(argv):
        return None
    dest = argv[i]
    if dest.startswith("ssh://"):
        dest = dest[6:]
        if "@" in dest:
            user, dest = dest.rsplit("@", 1)
        host, sep, p = dest.rpartition(":") if not dest.endswith("]") else (dest, "", "")
        if sep and port_number(p) is not None:
            dest, port = host, port_number(p)
        return SshDestination(dest.strip("[]"), user, port, identity, jump)
    if "@" in dest:
        user, dest = dest.rsplit("@", 1)
    if not dest:
        return None
    return SshDestination(dest, user, port, identity, jump)
