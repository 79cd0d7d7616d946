"""Log stat lines (`@@log N` then `<size> <mtime> <inode> [<type>]` or stat's complaint) and artifact
listings (`@@count N` then `<size> <mtime> <type>|<name>`; `@@unlisted N`: names holding a newline,
which the probe counts instead of printing); and `build_artifacts`, the snapshot's listing of each
`--artifacts` glob."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from vastprobe.model import Artifact, ArtifactListing, FileStat, NotRead, Unavailable
from vastprobe.probe import sources as src
from vastprobe.untrusted.numbers import read_int

if TYPE_CHECKING:
    from vastprobe.parsers.reading import Sections
    from vastprobe.probe.script import ProbeParams
    from vastprobe.probe.sections import RawSection

_STAT = re.compile(r"^([0-9]{1,20}) (-?[0-9]{1,20}) ([0-9]{1,20})(?: ([a-z][a-z ]{0,40}))?$", re.ASCII)
# size, mtime, the owner's uid (since probe format 3: older captures have none), type | name
_ART = re.compile(r"^([0-9]{1,20}) (-?[0-9]{1,20}) (?:([0-9]{1,10}) )?([^|0-9][^|]{0,63})\|(.*)$", re.ASCII)


def not_read(line: str) -> NotRead | None:
    """The probe's word for a path it did not touch (format 4): `@@refused WHY` or
    `@@fuse-waiting N MOUNT`."""
    if line.startswith("@@refused "):
        return NotRead(f"not read: {line[10:300]}", "refused")
    if line.startswith("@@fuse-waiting "):
        n, _, mount = line[15:].partition(" ")
        return NotRead(
            f"on an unresponsive FUSE mount ({mount[:200]}: {read_int(n) or 0} request(s) waiting for its server): "
            "not touched",
            "unanswered",
        )
    return None


def parse_logstats(text: str) -> dict[int, FileStat | Unavailable]:
    out: dict[int, FileStat | Unavailable] = {}
    current: int | None = None
    for line in text.split("\n"):
        if line.startswith("@@log "):
            current = read_int(line[6:], 6)
            continue
        if current is None or not line.strip() or current in out:
            continue
        refused = not_read(line)
        if refused is not None:
            out[current] = refused
            continue
        m = _STAT.match(line.strip())
        if m:
            size, mtime, inode = read_int(m.group(1)), read_int(m.group(2), signed=True), read_int(m.group(3))
            out[current] = FileStat(size=size or 0, mtime=mtime or 0, inode=inode or 0, kind=m.group(4))
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
            count = read_int(line[8:]) or 0
            continue
        if line.startswith("@@unlisted "):
            errors.append(f"{read_int(line[11:]) or 0} name(s) holding a newline not listed")
            continue
        refused = not_read(line)
        if refused is not None:
            if refused.reason not in errors:  # each match on one dead mount says the same
                errors.append(refused.reason)
            continue
        m = _ART.match(line)
        if m:
            size, mtime = read_int(m.group(1)) or 0, read_int(m.group(2), signed=True) or 0
            uid = read_int(m.group(3)) if m.group(3) else None
            entries.append(Artifact(path=m.group(5), size=size, mtime=mtime, kind=m.group(4), uid=uid))
        elif line.strip() in ("Killed", "Terminated"):
            # the shell's word for a command its bound ended, once per command: the reason, said once
            stopped = "the listing did not finish within its bound (a huge or slow directory): not all listed"
            if stopped not in errors:
                errors.append(stopped)
        elif line.strip():
            errors.append(line.strip())
    return count, entries, "; ".join(errors) or None


def build_artifacts(sections: Sections, params: ProbeParams) -> tuple[ArtifactListing, ...]:
    """One listing per `--artifacts` glob, in their order (art.N)."""
    listings = []
    for i, pattern in enumerate(params.artifacts):
        sec: RawSection | None = sections.get(src.ARTIFACTS, i)
        if sec is None:
            listings.append(
                ArtifactListing(pattern=pattern, matched=0, entries=(), error=sections.missing(src.ARTIFACTS, i))
            )
            continue
        count, entries, err = sections.read(src.ARTIFACTS, sec.text, n=i)
        listings.append(ArtifactListing(pattern=pattern, matched=count, entries=tuple(entries), error=err))
    return tuple(listings)
