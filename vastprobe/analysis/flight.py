"""What PyTorch's flight recorder dumps say across ranks: for each process group, the last
collective every rank entered, and the ranks missing from the next one (those hold the others),
with its op and sizes. The dumps are read without running pickle code (parsers/flight_recorder).

Only a running job's own dumps count: those under the prefix its ranks name (or the default one when
they name none), written since its first rank started. Another job's dumps, and an earlier run's left
in /tmp, say nothing about this one (they named a "culprit" on a healthy job)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vastprobe.model import FlightDump, Process

DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"
PREFIX_VARIABLES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
#: a dump's mtime may trail the rank's start by the target's clock granularity (seconds)
CLOCK_SLACK = 2.0


@dataclass(frozen=True)
class Stuck:
    pg: str
    last_all: int  # the last collective every rank with a dump entered
    next_seq: int
    op: str  # of the next collective, as the ranks that entered it recorded it
    sizes: str
    entered: tuple[int, ...]  # ranks that entered the next collective
    missing: tuple[int, ...]  # ranks that did not: they hold the others


def job_dumps(dumps: Sequence[FlightDump], ranks: Iterable[Process], started: float | None) -> list[FlightDump]:
    """The dumps of the job whose rank processes are `ranks` (its first started at `started`, epoch
    seconds on the target's clock; None: not known, and then no dump of unknown age is dropped)."""
    prefixes = {next((v for n in PREFIX_VARIABLES if (v := r.env_value(n))), DEFAULT_PREFIX) for r in ranks}
    return [
        d
        for d in dumps
        if d.prefix in prefixes and (started is None or d.mtime is None or d.mtime >= started - CLOCK_SLACK)
    ]


def compare(dumps: Sequence[FlightDump]) -> list[Stuck]:
    """Per dump prefix (one job's ranks), what its dumps say."""
    prefixes = sorted({d.prefix for d in dumps})
    return [st for p in prefixes for st in _compare_one([d for d in dumps if d.prefix == p])]


def _compare_one(dumps: Sequence[FlightDump]) -> list[Stuck]:
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
