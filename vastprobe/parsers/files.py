"""Log stat lines (`@@log N` then `<size> <mtime> <inode>` or stat's complaint) and artifact
listings (`@@count N` then `<size> <mtime> <type>|<name>`)."""

from __future__ import annotations

import re

from vastprobe.model import Artifact, FileStat, Unavailable

_STAT = re.compile(r"^(\d+) (\d+) (\d+)$")
_ART = re.compile(r"^(\d+) (\d+) ([^|]*)\|(.*)$")


def parse_logstats(text: str) -> dict[int, FileStat | Unavailable]:
    out: dict[int, FileStat | Unavailable] = {}
    current: int | None = None
    for line in text.split("\n"):
        if line.startswith("@@log "):
            current = int(line[6:]) if line[6:].isdigit() else None
            continue
        if current is None or not line.strip() or current in out:
            continue
        m = _STAT.match(line.strip())
        if m:
            out[current] = FileStat(size=int(m.group(1)), mtime=int(m.group(2)), inode=int(m.group(3)))
        else:
            reason = line.split(": ")[-1] if ": " in line else line
            out[current] = Unavailable(reason.strip())
    return out


def parse_artifacts(text: str) -> tuple[int, list[Artifact], str | None]:
    """(matched count, entries, error)."""
    if text.startswith("@@nomatch"):
        return 0, [], None
    count, entries, errors = 0, [], []
    for line in text.split("\n"):
        if line.startswith("@@count "):
            count = int(line[8:]) if line[8:].isdigit() else 0
            continue
        m = _ART.match(line)
        if m:
            entries.append(Artifact(path=m.group(4), size=int(m.group(1)), mtime=int(m.group(2)), kind=m.group(3)))
        elif line.strip():
            errors.append(line.strip())
    return count, entries, "; ".join(errors) or None
