"""Groups `grep -H` output over /proc/PID/<file> by PID; the shared first step of most parsers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ERROR = re.compile(r"^(?:grep|ls|cat|awk): .*?/proc/(\d+)/([^:]*): (.*)$")
_ANY_PROC = re.compile(r"^/proc/\d+/")


@dataclass(frozen=True)
class PerPid:
    lines: dict[int, list[str]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)  # pid -> why its file could not be read
    other: list[str] = field(default_factory=list)  # lines that were neither


def group_by_pid(text: str, filename: str) -> PerPid:
    """Lines `/proc/<pid>/<filename>:<content>`; other files' lines are skipped; a line without any
    /proc prefix continues the previous record (a comm holding a newline splits a stat record)."""
    prefix = re.compile(r"^/proc/(\d+)/" + re.escape(filename) + ":")
    out = PerPid()
    last: int | None = None
    for line in text.split("\n"):
        m = prefix.match(line)
        if m:
            last = int(m.group(1))
            out.lines.setdefault(last, []).append(line[m.end() :])
            continue
        e = _ERROR.match(line)
        if e:
            if e.group(2).rstrip("'") == filename:
                out.errors[int(e.group(1))] = e.group(3)
            last = None
            continue
        if _ANY_PROC.match(line):  # another file's line, in a section that greps several
            last = None
            continue
        if last is not None and line:
            out.lines[last][-1] += "\n" + line
        elif line:
            out.other.append(line)
    return out


def to_int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None
