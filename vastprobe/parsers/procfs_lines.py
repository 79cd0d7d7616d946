"""Groups `grep -H` output over /proc/PID/<file> by PID; the shared first step of most parsers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from vastprobe.untrusted.numbers import read_digits, read_int

_ERROR = re.compile(r"^(?:grep|ls|cat|awk): [^/]{0,40}/proc/([0-9]{1,10})/([^:]{1,64}): (.{0,300})", re.ASCII)


@dataclass(frozen=True)
class PerPid:
    lines: dict[int, list[str]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)  # pid -> why its file could not be read
    other: list[str] = field(default_factory=list)  # lines that were neither
    owner: dict[int, int] = field(default_factory=dict)  # task files: thread id -> its process


def group_by_pid(text: str, filename: str) -> PerPid:
    """Lines `/proc/<pid>/<filename>:<content>` of one file; see split_by_file."""
    return split_by_file(text).get(filename) or PerPid()


@lru_cache(maxsize=8)
def split_by_file(text: str) -> dict[str, PerPid]:
    """One pass over a section that greps several /proc files, grouped by file name, then PID.
    A line without a /proc prefix continues the previous record (a comm holding a newline splits
    a stat record). Cached: several parsers read the same section."""
    out: dict[str, PerPid] = {}
    last: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith("/proc/"):
            # "/proc/<pid>/<file>:<content>", split by hand: this loop runs for every line of the
            # biggest section, on every host of a sweep
            head, sep, content = line.partition(":")
            parts = head.split("/")
            pid = read_digits(parts[2], 10) if sep and len(parts) in (4, 6) else None
            if pid is not None and len(parts) == 4:
                group = out.get(parts[3])
                if group is None:
                    group = out[parts[3]] = PerPid()
                last = group.lines.setdefault(pid, [])
                last.append(content)
                continue
            tid = read_digits(parts[4], 10) if pid is not None and parts[3] == "task" else None
            if tid is not None:
                name = "task/" + parts[5]
                group = out.get(name)
                if group is None:
                    group = out[name] = PerPid()
                group.owner[tid] = pid or 0
                last = group.lines.setdefault(tid, [])
                last.append(content)
                continue
        elif line.startswith(("grep: ", "ls: ", "cat: ", "awk: ")):
            e = _ERROR.match(line)
            if e:
                name = e.group(2).rstrip("'")
                group = out.get(name)
                if group is None:
                    group = out[name] = PerPid()
                group.errors[read_int(e.group(1)) or 0] = e.group(3)
                last = None
                continue
        if last is not None and line:
            last[-1] += "\n" + line
        elif line:
            out.setdefault("", PerPid()).other.append(line)
    return out


def to_int(text: str) -> int | None:
    return read_int(text, signed=True)
