"""stat of the files processes hold open write-only whose names say log (and of their stdout and
stderr), through the open file itself (/proc/PID/fd/N):

    /proc/812/fd/1 1808067 1796362140 2146487 regular file

The job's logs where none was given (`--log`): analysis/logs.py treats them as given ones.
"""

from __future__ import annotations

import re

from vastprobe.model import FileStat, HeldFile
from vastprobe.untrusted.numbers import read_int

_LINE = re.compile(
    r"^/proc/([0-9]{1,10})/fd/([0-9]{1,10}) ([0-9]{1,20}) (-?[0-9]{1,20}) ([0-9]{1,20}) (.{1,40})$", re.ASCII
)


def parse_held_section(text: str) -> tuple[HeldFile, ...]:
    """Each held file with its stat, once per (pid, fd)."""
    out: dict[tuple[int, int], HeldFile] = {}
    for line in text.split("\n"):
        m = _LINE.match(line[:256])
        if m is None:
            continue
        pid, fd, size, mtime, inode = (read_int(m.group(i), 20, signed=i == 4) for i in range(1, 6))
        if None in (pid, fd, size, mtime, inode):
            continue
        key = (pid or 0, fd or 0)
        out[key] = HeldFile(*key, FileStat(size or 0, mtime or 0, inode or 0, m.group(6).strip()))
    return tuple(out.values())
