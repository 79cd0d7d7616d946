"""What PyTorch's flight recorder dumps say across ranks: for each process group, the last
collective every rank entered, and the ranks missing from the next one (those hold the others),
with its op and sizes. The dumps are read without running pickle code (parsers/flight_recorder)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vastprobe.model import FlightDump


@dataclass(frozen=True)
class Stuck:
    pg: str
    last_all: int  # the last collective every rank with a dump entered
    next_seq: int
    op: str  # of the next collective, as the ranks that entered it recorded it
    sizes: str
    entered: tuple[int, ...]  # ranks that entered the next collective
    missing: tuple[int, ...]  # ranks that did not: they hold the others


def compare(dumps: Sequence[FlightDump]) -> list[Stuck]:
    usable = [d for d in dumps if d.refused is None and d.rank is not None and d.collectives]
    by_rank = {d.rank: d for d in usable if d.rank is not None}
    if len(by_rank) < 2:
        return []
    pgs = sorted({c.pg for d in by_rank.values() for c in d.collectives})
    out = []
    for pg in pgs:
        last = {r: d.last_entered(pg) for r, d in by_rank.items()}
        known = {r: n for r, n in last.items() if n is not None}
        if len(known) < 2:
            continue
        low = min(known.values())
        entered = tuple(sorted(r for r, n in known.items() if n > low))
        missing = tuple(sorted(r for r, n in known.items() if n == low))
        if not entered:
            continue  # every rank entered the same last collective: nobody is behind
        nxt = next(
            (c for r in entered for c in by_rank[r].collectives if c.pg == pg and c.seq == low + 1),
            None,
        )
        out.append(Stuck(pg, low, low + 1, nxt.op if nxt else "?", nxt.sizes if nxt else "?", entered, missing))
    return out
