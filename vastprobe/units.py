"""Quantities in words a reader takes in at a glance."""

from __future__ import annotations


def byte_size(n: int) -> str:
    """1152 B, 2.0 MiB: exact below a KiB, one decimal above (binary units, as free and ls -h)."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def processes(n: int) -> str:
    """1 process, 4 processes."""
    return f"{n} process" if n == 1 else f"{n} processes"
