"""What every transport is (the Transport protocol) and returns (a TransportResult: the bytes read,
and how the run ended). Importable without asyncssh: `local` and the analysis never load it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from vastprobe.model import Status


@dataclass(frozen=True)
class TransportResult:
    status: Status
    error: str | None
    output: bytes
    exit_status: int | None
    truncated: bool  # the output cap was reached and reading stopped
    timings: dict[str, float] = field(default_factory=dict)
    exit_signal: str | None = None  # the signal that ended the remote shell ("KILL"), when one did


def ended(exit_status: int | None, exit_signal: str | None) -> str:
    """How the target's shell ended, in words."""
    if exit_signal:
        return f"the target's shell was killed by signal {exit_signal}"
    if exit_status is None:
        return "the target's shell closed the session with no exit status"
    return f"the target's shell exited with status {exit_status}"


#: The probe script for the seconds left: rendered once the target is reached, so the probe's
#: own deadline comes before this side gives up (pipeline.remote_deadline).
Render = Callable[[float], str]
#: A sweep's budget for output in flight: room for n more bytes of this host's output, or False:
#: stop reading (sweep.HostBytes.take). Called on the event loop's thread.
Take = Callable[[int], bool]

#: Which processes above the probe's shell the snapshot leaves out as the transport's own (its
#: session and descendants are always left out, parsers/own_processes.py):
#: - "caller": vastprobe and what ran it (the probe runs on this machine, as vastprobe's child);
#: - "sshd": the sshd session processes that serve the probe's channel;
#: - "none": nothing (a container's exec'd shell: its parent is outside the container).
OwnProcesses = Literal["caller", "sshd", "none"]


@dataclass(frozen=True)
class TransportSettings:
    """What the command line says to every transport: the --timeout, the SSH settings (an
    ssh.settings.SshOptions, None when no target needs SSH), and per-kind options by kind name
    (`{"kubectl": {"context": "prod"}}`): a new kind's options need no new field here."""

    timeout: float = 60.0
    ssh: Any = None
    per_kind: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@runtime_checkable
class Transport(Protocol):
    """One target's way of running the probe script: `local` and `ssh`, the container runtimes.
    A transport never raises for trouble on the target: how the run ended is the result's status
    and error (one line naming the target), like an unreachable host's."""

    #: The `transport` a capture and a snapshot carry ("local", "ssh", "docker"...): what
    #: parsers/own_processes.py and report/hops.py look its other properties up by (registry.kind_named).
    name: str
    #: The target as it was typed: the report's `target`, and the first words of each error line.
    target: str
    #: Seconds the whole run may take, connecting included (--timeout).
    timeout: float

    async def run(self, script: Render, cap: int, timeout: float, take: Take | None = None) -> TransportResult:
        """Run `script(seconds_left)` with `sh -s` on the target, reading at most `cap` bytes of
        its output (stdout and stderr together) within `timeout` seconds."""
        ...

    def session(self) -> contextlib.AbstractAsyncContextManager[Transport]:
        """Runs that follow one another (`vastprobe watch`): a transport whose runs share what can
        be kept (ssh: one connection, opened by the first run, closed when the session ends)."""
        ...


class KeepsNothing:
    """A transport whose runs share nothing (a new process each: local, the container CLIs): its
    session is itself."""

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[KeepsNothing]:
        yield self
