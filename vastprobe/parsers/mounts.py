"""FUSE mounts, from the probe's pass over /proc/self/mountinfo: `major:minor mount-point fstype source`.
The kernel escapes spaces and newlines in mount points as octal (`\\040`, `\\012`)."""

from __future__ import annotations

import re

from vastprobe.model import FuseMount

_LINE = re.compile(r"^([0-9]{1,10}:[0-9]{1,10}) (\S+) (fuse\S*) (\S*)$", re.ASCII)
_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape_mount(text: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_fuse_mounts(text: str) -> list[FuseMount]:
    out = []
    for line in text.split("\n"):
        m = _LINE.match(line[:4096])
        if m:
            out.append(FuseMount(m.group(1), unescape_mount(m.group(2)), m.group(3), unescape_mount(m.group(4))))
    return out
