"""`ls -ln /proc/*/fd` output: per process its fd links.

    /proc/123/fd:
    lr-x------ 1 0 0 64 Dec  2 16:25 0 -> /dev/null
    l-wx------ 1 0 0 64 Dec  2 16:25 1 -> pipe:[2787]

The link's own mode tells how the fd was opened: r-x read, -wx write, rwx both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vastprobe.model import FdEntry, FdMode

_HEADER = re.compile(r"^/proc/(\d+)/fd:$")
_ENTRY = re.compile(r"^l([r-])([w-])[x-]\S*\s.*? (\d+) -> (.*)$")
_DENIED_DIR = re.compile(r"^ls: (?:cannot open directory )?'?/proc/(\d+)/fd'?: (.*)$")


@dataclass
class FdTable:
    fds: dict[int, list[FdEntry]] = field(default_factory=dict)
    denied: dict[int, str] = field(default_factory=dict)
    truncated: set[int] = field(default_factory=set)
    unreadable_links: dict[int, int] = field(default_factory=dict)


def _mode(r: str, w: str) -> FdMode:
    if r == "r" and w == "w":
        return "rw"
    if r == "r":
        return "r"
    if w == "w":
        return "w"
    return "?"


def parse_fd_section(text: str) -> FdTable:
    table = FdTable()
    current: int | None = None
    for line in text.split("\n"):
        h = _HEADER.match(line)
        if h:
            current = int(h.group(1))
            table.fds.setdefault(current, [])
            continue
        d = _DENIED_DIR.match(line)
        if d:
            pid = int(d.group(1))
            table.denied[pid] = d.group(2)
            continue
        if line.startswith("ls: cannot read symbolic link"):
            m = re.search(r"/proc/(\d+)/fd/", line)
            if m:
                pid = int(m.group(1))
                table.unreadable_links[pid] = table.unreadable_links.get(pid, 0) + 1
            continue
        if current is None:
            continue
        if line == "@@more":
            table.truncated.add(current)
            continue
        e = _ENTRY.match(line)
        if e:
            table.fds[current].append(
                FdEntry(fd=int(e.group(3)), target=e.group(4), mode=_mode(e.group(1), e.group(2)))
            )
    for pid, n in table.unreadable_links.items():
        if not table.fds.get(pid):
            table.denied.setdefault(pid, f"{n} fd links not readable (permission denied)")
    return table
