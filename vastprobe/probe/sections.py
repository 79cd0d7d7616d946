"""Splits the probe's framed output into sections; a cut or missing section is a fact, and so is a
section that is not the probe's own: one that appears twice, one the probe never writes (or was
not asked to write), one out of the order the probe writes them in, one after the end marker.
None of those is believed: every copy is dropped, and each is recorded as tampering.

Why every copy, not the first: a process of the probe's own user on the target can read the
boundary (from the probe's memory) and write into the probe's stdout (its /proc/PID/fd/1) before
the probe does; "the first copy" is then the forger's."""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vastprobe.probe.script import ProbeParams

_RC = re.compile(r"\n@@rc=(-?[0-9]{1,5})\n?$")
_FORMAT = re.compile(r"^format=([0-9]{1,3})$", re.MULTILINE | re.ASCII)
#: Probe formats whose section order is ORDER (probe/sources.py); format 1 captures wrote cgmap
#: and cgmem after fd, and are read without the order check.
ORDERED_FORMAT = 2


@dataclass(frozen=True)
class RawSection:
    name: str
    text: str
    rc: int | None  # None: the section was cut before its status line (size cap or deadline)

    @property
    def truncated(self) -> bool:
        return self.rc is None


@dataclass(frozen=True)
class ProbeOutput:
    sections: dict[str, RawSection]
    complete: bool  # the probe reached its end marker (once, with nothing after it)
    deadline_hit: bool
    framed: bool  # at least one section carried our boundary
    anomalies: tuple[str, ...] = ()  # sections dropped as not the probe's own: repeated, undeclared, out of order
    abandoned: tuple[str, ...] = ()  # sections whose child the probe abandoned (a path that did not answer)

    def get(self, name: str) -> RawSection | None:
        return self.sections.get(name)


def decode(data: bytes) -> str:
    """Remote bytes are not guaranteed UTF-8: undecodable bytes become U+FFFD, so every string
    downstream is valid text (JSON, terminal). The exact bytes stay in `collect`'s capture."""
    return data.decode("utf-8", errors="replace")


def _arrivals(parts: list[str]) -> tuple[list[RawSection], list[int], bool, list[str]]:
    """Every section in the order it arrived, where each end marker came (as the number of
    sections before it), whether the deadline marker came, and the sections open when the probe
    abandoned a child that touched a path ("" when none was)."""
    arrived: list[RawSection] = []
    abandoned: list[str] = []
    ends: list[int] = []
    deadline = False
    open_name: str | None = None
    open_body = ""
    for part in parts:
        head, _, body = part.partition("\n")
        head = head.strip()
        if head == "end":
            ends.append(len(arrived) + (open_name is not None))
            continue
        if head == "deadline":
            deadline = True
            continue
        if head.startswith("abandoned "):  # the probe stopped waiting for a child touching a path
            if open_name is not None:
                arrived.append(_section(open_name, open_body, cut=True))
                abandoned.append(open_name)
            else:
                abandoned.append("")
            open_name = None
            continue
        if head == "cut":  # the section's own awk stopped it at its size cap
            if open_name is not None:
                arrived.append(_section(open_name, open_body, cut=True))
            open_name = None
            continue
        if head.startswith("/"):
            if open_name is not None and head[1:] == open_name:
                arrived.append(_section(open_name, open_body))
            open_name = None
            continue
        if open_name is not None:  # a start without an end: the previous one was cut
            arrived.append(_section(open_name, open_body, cut=True))
        open_name, open_body = head, body
    if open_name is not None:
        arrived.append(_section(open_name, open_body, cut=True))
    return arrived, ends, deadline, abandoned


def _not_asked(name: str, params: ProbeParams) -> str | None:
    from vastprobe.untrusted.numbers import read_digits

    head, _, index = name.rpartition(".")
    n = read_digits(index, 6) if head in ("log", "art") else None
    if head == "log" and (n is None or n >= len(params.logs)):
        return f"the probe was given {len(params.logs)} --log path(s)"
    if head == "art" and (n is None or n >= len(params.artifacts)):
        return f"the probe was given {len(params.artifacts)} --artifacts glob(s)"
    if name.startswith("s1.") and params.sample == 0:
        return "the probe took one sample"
    return None


def split_sections(data: bytes | str, boundary: str, params: ProbeParams | None = None) -> ProbeOutput:
    """`params`, when given, are the ones the probe ran with: a log or artifact section beyond
    them, or a second sample's section when it took one, is not the probe's."""
    from vastprobe.probe.sources import declared, rank

    text = decode(data) if isinstance(data, bytes) else data
    parts = ("\n" + text).split(f"\n@@{boundary}@@ ")
    arrived, ends, deadline, abandoned = _arrivals(parts[1:])
    anomalies: list[str] = []
    counts = Counter(s.name for s in arrived)
    kept: list[tuple[int, RawSection]] = []  # (position in arrival order, section)
    for pos, sec in enumerate(arrived):
        label = repr(sec.name[:40])
        if counts[sec.name] > 1:
            if sec is next(s for s in arrived if s.name == sec.name):
                anomalies.append(f"section {label} appears {counts[sec.name]} times: every copy dropped")
        elif not declared(sec.name):
            anomalies.append(f"unexpected section {label}")
        elif params is not None and (why := _not_asked(sec.name, params)) is not None:
            anomalies.append(f"unexpected section {label} ({why})")
        else:
            kept.append((pos, sec))
    if ends:  # nothing comes after the end, in any probe version
        anomalies += [f"section {sec.name[:40]!r} arrived after the end marker" for pos, sec in kept if pos >= ends[0]]
        kept = [(pos, sec) for pos, sec in kept if pos < ends[0]]
    meta = next((s for _, s in kept if s.name == "meta"), None)
    fmt = _FORMAT.search(meta.text) if meta is not None else None
    if meta is None or (fmt is not None and int(fmt.group(1)) >= ORDERED_FORMAT):  # no format line: format 1
        kept = _in_order(kept, anomalies, rank)
    if len(ends) > 1:
        anomalies.append(f"the end marker appears {len(ends)} times")
    complete = len(ends) == 1 and len(arrived) <= ends[0]  # nothing arrived after it
    return ProbeOutput(
        sections={s.name: s for _, s in kept},
        complete=complete,
        deadline_hit=deadline,
        framed=len(parts) > 1,
        anomalies=tuple(anomalies),
        abandoned=tuple(abandoned[:64]),
    )


def _in_order(
    before_end: list[tuple[int, RawSection]],
    anomalies: list[str],
    rank: Callable[[str], tuple[int, int] | None],
) -> list[tuple[int, RawSection]]:
    """The sections that arrived in the probe's order: the longest run of them, in arrival order,
    whose places in ORDER never go back (one section written out of turn drops that one, not the
    ones it jumped over). The others are dropped."""
    ranks = [rank(sec.name) or (0, 0) for _, sec in before_end]
    tails: list[tuple[int, int]] = []  # the smallest last rank of an in-order run of each length
    tail_at: list[int] = []  # ... and where that run ends
    back: list[int] = []  # each section's predecessor in its best run
    for i, r in enumerate(ranks):
        k = bisect.bisect_right(tails, r)
        back.append(tail_at[k - 1] if k else -1)
        if k == len(tails):
            tails.append(r)
            tail_at.append(i)
        else:
            tails[k], tail_at[k] = r, i
    keep = set()
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        keep.add(i)
        i = back[i]
    for i, (_pos, sec) in enumerate(before_end):
        if i not in keep:
            anomalies.append(f"section {sec.name[:40]!r} arrived out of the probe's order")
    return [item for i, item in enumerate(before_end) if i in keep]


def _section(name: str, body: str, cut: bool = False) -> RawSection:
    m = None if cut else _RC.search(body)
    if m is None:
        return RawSection(name=name, text=body, rc=None)
    return RawSection(name=name, text=body[: m.start()], rc=int(m.group(1)))
