"""A fact the probe could not gather: `Unavailable(reason)` rather than a bare None, so a rule can
tell "no OOM kill" from "the kernel log was not readable"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Unavailable:
    """A fact the probe could not get, and why."""

    reason: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class NotRead(Unavailable):
    """A path the probe would not touch, or gave up on: `why` is `refused` (a link to another
    user's file, a kernel or device file) or `unanswered` (a FUSE mount with requests waiting for
    its server, or no answer within the probe's file timeout: a dead mount)."""

    why: Literal["refused", "unanswered"] = "refused"


def available(value: T | Unavailable) -> T | None:
    return None if isinstance(value, Unavailable) else value
