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
