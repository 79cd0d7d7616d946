"""Fleet sweeps: bounded concurrency, one deadline per host, results streamed as hosts finish.

Wall time is bounded by about ceil(N / concurrency) x --timeout, since every host, however
broken, ends at its own deadline."""

from __future__ import annotations

import asyncio
import math
import resource
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from vastprobe.model import HostReport
from vastprobe.pipeline import DiagnoseOptions, probe_any, report_from_capture
from vastprobe.targets import InventoryEntry, unique_entries

if TYPE_CHECKING:
    from vastprobe.history.store import HostMemory

FDS_PER_HOST = 4  # socket, and a little slack for a jump host and pipes
FDS_RESERVED = 64


@dataclass(frozen=True)
class SweepPlan:
    concurrency: int
    warning: str | None
    bound_seconds: float


def plan(n_targets: int, concurrency: int, timeout: float) -> SweepPlan:
    """Lower the concurrency when the open-file limit cannot carry it, rather than fail midway."""
    warning = None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = max(1, (soft - FDS_RESERVED) // FDS_PER_HOST) if soft != resource.RLIM_INFINITY else concurrency
    if concurrency > room:
        if hard == resource.RLIM_INFINITY or hard > soft:
            try:
                want = min(
                    hard if hard != resource.RLIM_INFINITY else 1 << 20, FDS_RESERVED + concurrency * FDS_PER_HOST
                )
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
                room = (want - FDS_RESERVED) // FDS_PER_HOST
            except (ValueError, OSError):
                pass
        if concurrency > room:
            warning = f"--concurrency {concurrency} lowered to {room}: the open-file limit is {soft} (ulimit -n)"
            concurrency = room
    concurrency = max(1, min(concurrency, max(1, n_targets)))
    return SweepPlan(concurrency, warning, math.ceil(max(1, n_targets) / concurrency) * timeout)


def skipped_report(entry: InventoryEntry) -> HostReport:
    return HostReport(entry.target, "skipped", entry.skip, "unknown", (), None, {}, labels=entry.labels)


async def sweep(
    entries: list[InventoryEntry],
    options: DiagnoseOptions,
    concurrency: int,
    on_report: Callable[[HostReport], None],
    on_start: Callable[[str], None] | None = None,
) -> list[HostReport]:
    """Probe every entry once; `on_report` is called as each host finishes (for streaming),
    `on_start` as each probe begins (for the progress line's hosts in flight).
    Cancelling the sweep (Ctrl-C) returns nothing more; the caller keeps what `on_report` already
    saw and counts the rest as unfinished."""
    entries, _ = unique_entries(entries)  # a target listed twice is probed once
    sem = asyncio.Semaphore(concurrency)
    reports: list[HostReport] = []

    async def one(entry: InventoryEntry) -> None:
        if entry.skip is not None:
            r = skipped_report(entry)
        else:
            async with sem:
                if on_start is not None:
                    on_start(entry.target)
                cap = await probe_any(entry.target, options)
            r = report_from_capture(cap, options)
            if entry.labels:
                r = replace(r, labels=entry.labels)
        reports.append(r)
        on_report(r)

    await asyncio.gather(*(one(e) for e in entries))
    return reports


def remember(
    reports: list[HostReport],
    history: Path | None,
    *,
    started_at: float,
    keep: float,
    kind: str = "sweep",
    shard: str | None = None,
    complete: bool = True,
) -> tuple[Mapping[str, HostMemory], str | None]:
    """Hand the finished reports to the history store: what each host was before this run, for the
    summary and the textfile. History never costs a result: a failure is one warning line."""
    if history is None:
        return {}, None
    import time

    from vastprobe.history.store import record_safely

    return record_safely(
        history, reports, started_at=started_at, finished_at=time.time(), kind=kind, shard=shard, complete=complete,
        keep=keep,
    )  # fmt: skip
