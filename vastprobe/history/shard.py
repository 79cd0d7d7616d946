"""`--shard K/N`: N controllers split one inventory by a stable hash of each target (sha256, the
same on every machine and Python run, unlike `hash()`), so each host is swept by exactly one."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
_SHARD = re.compile(r"([0-9]{1,4})/([0-9]{1,4})")


class ShardError(ValueError):
    pass


def parse_shard(text: str) -> tuple[int, int]:
    m = _SHARD.fullmatch(text.strip())
    if m is None:
        raise ShardError(f"--shard {text!r}: want K/N, e.g. 1/3")
    k, n = int(m.group(1)), int(m.group(2))
    if not 1 <= k <= n:
        raise ShardError(f"--shard {text!r}: K must be between 1 and N")
    return k, n


def shard_of(target: str, n: int) -> int:
    """1-based shard of a target."""
    digest = hashlib.sha256(target.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


def in_shard(items: Sequence[T], targets: Sequence[str], k: int, n: int) -> list[T]:
    return [item for item, t in zip(items, targets, strict=True) if shard_of(t, n) == k]
