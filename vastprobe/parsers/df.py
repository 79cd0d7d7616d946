"""`df -P` and `df -P -i` output, one block each, split by the probe's `@@inodes` marker."""

from __future__ import annotations

from vastprobe.model import DiskUsage
from vastprobe.parsers.procfs_lines import to_int
from vastprobe.untrusted.numbers import is_digits


def _rows(text: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in text.split("\n"):
        f = line.split()
        if len(f) >= 6 and is_digits(f[1]):
            mount = " ".join(f[5:])
            rows.setdefault(mount, f)
    return rows


def parse_df(text: str) -> list[DiskUsage]:
    space, _, inodes = text.partition("@@inodes")
    s, i = _rows(space), _rows(inodes)
    out = []
    for mount in dict.fromkeys([*s, *i]):
        a, b = s.get(mount), i.get(mount)
        out.append(
            DiskUsage(
                filesystem=(a or b or ["?"])[0],
                mount=mount,
                size_kb=to_int(a[1]) if a else None,
                used_kb=to_int(a[2]) if a else None,
                available_kb=to_int(a[3]) if a else None,
                inodes=to_int(b[1]) if b else None,
                inodes_used=to_int(b[2]) if b else None,
                inodes_free=to_int(b[3]) if b else None,
            )
        )
    return out
