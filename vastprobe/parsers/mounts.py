"""FUSE mounts, from the probe's pass over /proc/self/mountinfo: `major:minor mount-point fstype source`,
then ` w=N` where fusectl said how many requests wait for the mount's server (captures before it
have none). The kernel escapes spaces and newlines in mount points as octal (`\\040`, `\\012`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from vastprobe.model import FuseMount, Unavailable
from vastprobe.probe import sources as src
from vastprobe.untrusted.numbers import read_int

if TYPE_CHECKING:
    from vastprobe.parsers.reading import Sections

_LINE = re.compile(r"^([0-9]{1,10}:[0-9]{1,10}) (\S+) (fuse\S*) (\S*?)(?: w=([0-9]{1,10}))?$", re.ASCII)
_OCTAL = re.compile(r"\\([0-7]{3})")
_OCTAL_CHAR = {f"{n:03o}": chr(n) for n in range(0o1000)}


def unescape_mount(text: str) -> str:
    return _OCTAL.sub(lambda m: _OCTAL_CHAR[m.group(1)], text)


def parse_fuse_mounts(text: str) -> list[FuseMount]:
    out = []
    for line in text.split("\n"):
        m = _LINE.match(line[:4096])
        if m:
            waiting = read_int(m.group(5)) if m.group(5) is not None else None
            out.append(
                FuseMount(m.group(1), unescape_mount(m.group(2)), m.group(3), unescape_mount(m.group(4)), waiting)
            )
    return out


def build_fuse_mounts(sections: Sections, fmt: int) -> tuple[FuseMount, ...] | Unavailable:
    sec = sections.get(src.MOUNTS)
    if sec is None:
        return Unavailable(sections.absent(src.MOUNTS, fmt))
    return tuple(sections.read(src.MOUNTS, sec.text))
