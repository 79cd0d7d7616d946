"""/proc/locks: held locks, and (`->`) requests blocked behind the lock of the same number.

    1: FLOCK  ADVISORY  WRITE 16192 fe:00:2146594 0 EOF
    1: -> FLOCK  ADVISORY  WRITE 16196 fe:00:2146594 0 EOF
    3: OFDLCK ADVISORY  READ  -1 00:06:1234 0 EOF
The PID is the locker's in the reader's PID namespace (0 when not visible there, -1 for OFD locks);
the device is `major:minor` in hex, then the inode in decimal.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from vastprobe.model import FileLock, Unavailable
from vastprobe.probe import sources as src
from vastprobe.untrusted.numbers import read_int

if TYPE_CHECKING:
    from vastprobe.parsers.reading import Sections

_LINE = re.compile(
    r"^([0-9]{1,9}): (-> )?([A-Z]{1,12}) +([A-Z*]{1,12}) +([A-Z]{1,12}) +(-?[0-9]{1,10}) "
    r"([0-9a-f]{1,8}:[0-9a-f]{1,8}):([0-9]{1,20}) +([0-9]{1,20}) +([0-9]{1,20}|EOF)\s*$",
    re.ASCII,
)


def parse_locks(text: str) -> list[FileLock]:
    out = []
    for line in text.split("\n"):
        m = _LINE.match(line[:200])
        if m is None:
            continue
        pid = read_int(m.group(6), signed=True)
        out.append(
            FileLock(
                number=read_int(m.group(1)) or 0,
                waiting=bool(m.group(2)),
                kind=m.group(3),
                mode=m.group(4),
                access=m.group(5),
                pid=pid if pid is not None and pid > 0 else None,
                device=m.group(7),
                inode=read_int(m.group(8)) or 0,
                start=m.group(9),
                end=m.group(10),
            )
        )
    return out


def build_locks(sections: Sections, fmt: int) -> tuple[FileLock, ...] | Unavailable:
    sec = sections.get(src.LOCKS)
    if sec is None:
        return Unavailable(sections.absent(src.LOCKS, fmt))
    return tuple(sections.read(src.LOCKS, sec.text))
