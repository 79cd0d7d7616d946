"""/proc/PID/wchan: a bare kernel symbol, or `0` when running or not permitted."""

from __future__ import annotations

from vastprobe.parsers.procfs_lines import group_by_pid


def parse_wchan_section(text: str) -> tuple[dict[int, str], dict[int, str]]:
    grouped = group_by_pid(text, "wchan")
    out = {pid: lines[0].strip() for pid, lines in grouped.lines.items() if lines}
    return out, grouped.errors


def wchan_family(symbol: str) -> str:
    """Strip compiler suffixes (`.constprop.0`, `.isra.0`) so names compare across kernels."""
    return symbol.split(".", 1)[0]
