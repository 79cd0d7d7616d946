"""/proc/PID/io counters (`rchar: N`); unreadable for other users' processes."""

from __future__ import annotations

from vastprobe.model import ProcIO
from vastprobe.parsers.procfs_lines import group_by_pid, to_int

#: The counters kept (syscr, syscw and cancelled_write_bytes are read by no rule: not converted)
_KEPT = frozenset({"rchar", "wchar", "read_bytes", "write_bytes"})


def parse_io(lines: list[str]) -> ProcIO | None:
    kv = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and key in _KEPT:
            kv[key] = to_int(value)
    rchar, wchar = kv.get("rchar"), kv.get("wchar")
    if rchar is None or wchar is None:
        return None
    return ProcIO(rchar=rchar, wchar=wchar, read_bytes=kv.get("read_bytes"), write_bytes=kv.get("write_bytes"))


def parse_io_section(text: str) -> tuple[dict[int, ProcIO], dict[int, str]]:
    grouped = group_by_pid(text, "io")
    out: dict[int, ProcIO] = {}
    errors = dict(grouped.errors)
    for pid, lines in grouped.lines.items():
        io = parse_io(lines)
        if io is None:
            errors[pid] = "io: missing rchar/wchar"
        else:
            out[pid] = io
    return out, errors
