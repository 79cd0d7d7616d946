"""How a connection failed, as a status and one sentence a person understands (which host, what
happened, what to try), never a traceback. asyncssh's `connect_timeout` raises the *builtin*
TimeoutError and OS errors are not asyncssh.Error [asyncssh #558], so both are classified here
too. Attempt collects, while one connection is made, what the sentence needs: the keys offered
and skipped (keys.py), the agent's trouble, and the host-key verdict (hostkeys.py).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vastprobe.transport.ssh.asyncssh_lib import asyncssh
from vastprobe.transport.ssh.config import Resolved
from vastprobe.transport.ssh.settings import SshOptions

if TYPE_CHECKING:
    from vastprobe.model import Status


@dataclass
class Attempt:
    """What one connection offered and saw, for the sentence when it fails."""

    offered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    agent_note: str | None = None
    changed: str | None = None  # the host-key-changed sentence
    unknown: str | None = None  # the host-key-unknown sentence


# A session opened but not one byte came back: sshd runs the command through the user's login
# shell, which reads its startup files first (bash: ~/.bashrc, even for a command), so a stuck
# rc (a stale lock, a network mount, a prompt waiting for input) looks exactly like this.
NOTHING_ARRIVED = (
    "not one byte of the probe's output arrived: the login shell on the target may not have started it "
    "(its startup files, e.g. ~/.bashrc, may be waiting on something)"
)


class ProbeFailure(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def describe(
    exc: BaseException, where: str, r: Resolved, opts: SshOptions, phase: str, att: Attempt, arrived: int = 0
) -> ProbeFailure:
    """Map an exception to a status and a sentence: which host, what happened, what to try.
    `arrived`: bytes of the probe's output received before it."""
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        if att.changed:
            return ProbeFailure("host-key-rejected", f"{where}: {att.changed}")
        unknown = att.unknown or f"host key not trusted ({exc.reason})"
        return ProbeFailure(
            "host-key-rejected",
            f"{where}: {unknown}; check the key and add it to known_hosts, or use --host-key-check accept-new "
            f"to record keys of hosts never seen before",
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        tried = "; ".join(
            x
            for x in (
                f"offered {', '.join(att.offered)}" if att.offered else "no key to offer",
                f"skipped {', '.join(att.skipped)}" if att.skipped else "",
                att.agent_note or "",
            )
            if x
        )
        return ProbeFailure(
            "auth-failed",
            f"{where}: permission denied for user {r.user} ({tried}); check -i/--identity, the agent, and authorized_keys",
        )
    if isinstance(exc, asyncssh.KeyImportError):
        return ProbeFailure("auth-failed", f"{where}: cannot use the key: {exc}")
    if isinstance(exc, TimeoutError):  # builtin: connect_timeout and our own deadline
        if phase == "connect":
            return ProbeFailure(
                "unreachable", f"{where}: no SSH session within --connect-timeout {r.connect_timeout:g}s"
            )
        late = f"{where}: the probe did not finish within --timeout {opts.timeout:g}s"
        return ProbeFailure("timeout", late if arrived else f"{late}; {NOTHING_ARRIVED}")
    if isinstance(exc, socket.gaierror):
        note = f" ({r.alias_note})" if r.alias_note else ""
        # `diagnose LOCAL` went to SSH without a word on `local` (found by a helper)
        here = "; for this machine, use `local`" if r.host.lower() == "local" else ""
        return ProbeFailure("unreachable", f"{where}: cannot resolve host name {r.host!r}: {exc.strerror}{note}{here}")
    if isinstance(exc, ConnectionRefusedError):
        here = " For this machine without SSH, use `local`." if r.host in ("localhost", "127.0.0.1", "::1") else ""
        return ProbeFailure(
            "unreachable", f"{where}: connection refused on port {r.port}; is sshd running there?{here}"
        )
    if isinstance(exc, OSError):
        status_os: Status = "unreachable" if phase == "connect" else "probe-error"
        return ProbeFailure(status_os, f"{where}: {exc.strerror or exc}")
    if isinstance(exc, asyncssh.DisconnectError):
        status: Status = "unreachable" if phase == "connect" else "probe-error"
        why = exc.reason or type(exc).__name__
        if phase == "connect":  # an HTTP or database port given for SSH's: "Connection lost" said no more
            return ProbeFailure(status, f"{where}: the server closed the connection before the SSH handshake "
                                        f"finished ({why}); is port {r.port} an SSH server?")  # fmt: skip
        return ProbeFailure(status, f"{where}: the server closed the connection ({why})")
    if isinstance(exc, asyncssh.ChannelOpenError):
        return ProbeFailure("probe-error", f"{where}: the server refused a session channel: {exc.reason}")
    return ProbeFailure("probe-error", f"{where}: {type(exc).__name__}: {exc}")
