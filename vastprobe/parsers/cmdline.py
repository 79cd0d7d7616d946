"""/proc/PID/cmdline as argv records: the probe turns NULs into newlines and a newline inside an
argument into \\x1e, so argument boundaries survive."""

from __future__ import annotations

from vastprobe.parsers.procfs_lines import group_by_pid


def parse_cmdline_section(text: str) -> dict[int, tuple[str, ...]]:
    grouped = group_by_pid(text, "cmdline")
    return {
        pid: tuple(a.replace("\x1e", "\n") for a in args) if any("\x1e" in a for a in args) else tuple(args)
        for pid, args in grouped.lines.items()
    }
