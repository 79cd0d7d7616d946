"""What every transport returns: the bytes read, and how the run ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
