"""/proc/PID/task/TID/children: space-separated child PIDs, per thread."""

from __future__ import annotations

import re

_LINE = re.compile(r"^/proc/(\d+)/task/\d+/children:(.*)$")


def parse_children_section(text: str) -> dict[int, tuple[int, ...]]:
    out: dict[int, list[int]] = {}
    for line in text.split("\n"):
        m = _LINE.match(line)
        if not m:
            continue
        kids = out.setdefault(int(m.group(1)), [])
        kids.extend(int(x) for x in m.group(2).split() if x.isdigit())
    return {pid: tuple(sorted(set(kids))) for pid, kids in out.items()}
