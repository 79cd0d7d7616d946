"""stat of the files processes hold open write-only whose names say log (and of their stdout and
stderr), through the open file itself (/proc/PID/fd/N):

    /proc/812/fd/1 1808067 1796362140 2146487 regular file

then the tails of the 4 written last, each line prefixed so no log line passes for the probe's own:

    @@tail /proc/812/fd/1
    |epoch 3 step 1200 loss 1.93
    |waiting for /shared/EVAL_READY from node 1

The job's logs where none was given (`--log`): analysis/logs.py treats them as given ones. A tail is
remote text: its first line is dropped when the read began mid-line, and URL passwords and
`password=`-like values are masked (it is shown without being asked for).
"""

from __future__ import annotations

import re
from dataclasses import replace

from vastprobe.model import FileStat, HeldFile
from vastprobe.untrusted.numbers import read_int
from vastprobe.untrusted.secrets import redact_lines

_LINE = re.compile(
    r"^/proc/([0-9]{1,10})/fd/([0-9]{1,10}) ([0-9]{1,20}) (-?[0-9]{1,20}) ([0-9]{1,20}) (.{1,40})$", re.ASCII
)


_TAIL = re.compile(r"^@@tail /proc/([0-9]{1,10})/fd/([0-9]{1,10})$", re.ASCII)
MAX_TAILS = 4
MAX_TAIL_CHARS = 4096


def parse_held_section(text: str) -> tuple[HeldFile, ...]:
    """Each held file with its stat, once per (pid, fd), and the tails that came with them."""
    out: dict[tuple[int, int], HeldFile] = {}
    tails: dict[tuple[int, int], list[str]] = {}
    tail: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith("|"):
            if tail is not None and sum(map(len, tail)) < MAX_TAIL_CHARS:
                tail.append(line[1:])
            continue
        t = _TAIL.match(line[:64])
        if t is not None:
            key = (read_int(t.group(1), 10) or 0, read_int(t.group(2), 10) or 0)
            tail = tails.setdefault(key, []) if len(tails) < MAX_TAILS or key in tails else None
            continue
        tail = None
        m = _LINE.match(line[:256])
        if m is None:
            continue
        pid, fd, size, mtime, inode = (read_int(m.group(i), 20, signed=i == 4) for i in range(1, 6))
        if None in (pid, fd, size, mtime, inode):
            continue
        key = (pid or 0, fd or 0)
        out[key] = HeldFile(*key, FileStat(size or 0, mtime or 0, inode or 0, m.group(6).strip()))
    for key, lines in tails.items():
        held = out.get(key)
        if held is not None and lines:
            out[key] = replace(held, tail=_tail_text(lines, held.stat.size))
    return tuple(out.values())


def _tail_text(lines: list[str], size: int) -> str:
    """Whole lines only (a read of the last bytes of a longer file begins mid-line), masked as a
    `--log` tail is (a PEM key's body too: masked line by line, it showed whole; found by a helper)."""
    if size > sum(len(x.encode()) + 1 for x in lines) and len(lines) > 1:
        lines = lines[1:]
    return "\n".join(redact_lines(lines))[:MAX_TAIL_CHARS]
