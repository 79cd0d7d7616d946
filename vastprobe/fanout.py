"""Fleet sweeps: bounded concurrency, one deadline per host, results streamed as hosts finish.

Wall time is bounded by about ceil(N / concurrency) x --timeout, since every host, however
broken, ends at its own deadline. Memory is bounded too, whatever the hosts send: the output held
at once across all hosts has a budget (ByteBudget), and each host is analysed with a time budget
(pipeline.report_in_worker): on the event loop when its output is small (milliseconds), off it when
large, so one host never delays another's connection by more than that."""

from __future__ import annotations

import asyncio
import math
import resource
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from vastprobe.model import HostReport
from vastprobe.pipeline import DiagnoseOptions, probe_any, report_in_worker
from vastprobe.probe.script import MAX_TOTAL_OUTPUT
from vastprobe.targets import InventoryEntry, unique_entries, vast_words

if TYPE_CHECKING:
    from vastprobe.history.store import HostMemory

FDS_PER_HOST = 4  # socket, and a little slack for a jump host and pipes
FDS_RESERVED = 64
#: Bytes of probe output a sweep holds at once across all hosts: what is being read and what
#: waits for or is in analysis. A host that would go over it is cut there and marked truncated.
SWEEP_BYTES_IN_FLIGHT = 256 * 1024 * 1024
#: Probe output (raw bytes) whose parsed snapshots a sweep keeps for its final document and the
#: history, beyond ordinary hosts' (a complete output of at most ORDINARY_OUTPUT, always kept); a
#: snapshot takes 2-3 times its output in memory. Past it a host's report is kept without its
#: snapshot (its findings whole); the streamed report (`on_report`) always has it.
SWEEP_KEPT_OUTPUT = 64 * 1024 * 1024
#: A host with 500 processes sends ~0.9 MB (docs/benchmarks.md).
ORDINARY_OUTPUT = 1024 * 1024


class ByteBudget:
    """The sweep's budget for output in flight. Each host in flight may always hold its share,
    `total / (2 x concurrency)`; beyond that it borrows from a pool of the rest, which it gives back
    when its report is made. Shares of the at most `concurrency` hosts in flight plus the pool never
    exceed `total`, so neither many ordinary hosts nor a few endless ones can go past it."""

    def __init__(self, total: int, concurrency: int) -> None:
        self.total = total
        self.share = min(MAX_TOTAL_OUTPUT, total // (2 * max(1, concurrency)))
        self.pool = total - self.share * max(1, concurrency)
        self.pool_used = 0
        self.in_flight = 0
        self.peak = 0
        self.cut_hosts = 0

    def account(self) -> HostBytes:
        return HostBytes(self)


class HostBytes:
    """One host's part of the budget, from its first byte until its report is made."""

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        self.held = 0
        self.borrowed = 0
        self.cut = False

    def take(self, n: int) -> bool:
        """Room for `n` more bytes of this host's output; False: stop reading (for good)."""
        if self.cut:
            return False
        b = self.budget
        more = max(0, self.held + n - b.share) - self.borrowed  # what must come from the pool
        if more > 0:
            if b.pool_used + more > b.pool:
                self.cut = True
                b.cut_hosts += 1
                return False
            b.pool_used += more
            self.borrowed += more
        self.held += n
        b.in_flight += n
        b.peak = max(b.peak, b.in_flight)
        return True

    def release(self) -> None:
        self.budget.pool_used -= self.borrowed
        self.budget.in_flight -= self.held
        self.held = self.borrowed = 0


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


def without_snapshot(r: HostReport) -> HostReport:
    """The report kept for a sweep's end once its snapshot budget is spent: findings whole."""
    from vastprobe.model import Evidence, Finding

    why = (
        f"the snapshot is left out of this report: beyond ordinary hosts' (a whole output of at most "
        f"{ORDINARY_OUTPUT >> 20} MiB), the sweep keeps snapshots of at most {SWEEP_KEPT_OUTPUT >> 20} MiB of "
        "probe output (docs/architecture.md, Bounds); the findings are complete, "
        "and `--format ndjson` streamed it whole"
    )
    note = Finding("probe-incomplete", "VP900", "info", "the snapshot of this host was not kept", (),
                   (Evidence("vastprobe", why),), None)  # fmt: skip
    return replace(r, snapshot=None, findings=(*r.findings, note))


def skipped_report(entry: InventoryEntry) -> HostReport:
    return HostReport(entry.target, "skipped", entry.skip, "unknown", (), None, {}, labels=entry.labels)


async def sweep(
    entries: list[InventoryEntry],
    options: DiagnoseOptions,
    concurrency: int,
    on_report: Callable[[HostReport], None],
    on_start: Callable[[str], None] | None = None,
    *,
    budget: ByteBudget | None = None,
    kept: list[HostReport] | None = None,
    keep_snapshots: bool = True,
) -> list[HostReport]:
    """Probe every entry once; `on_report` is called as each host finishes (for streaming),
    `on_start` as each probe begins (for the progress line's hosts in flight).
    Cancelling the sweep (Ctrl-C) returns nothing more; the caller keeps what `on_report` already
    saw and counts the rest as unfinished. A host's slot (and its bytes) is held until its report
    is made, so at most `concurrency` hosts hold output at once. The reports kept for the end (in
    `kept`, when given, as they finish) hold the snapshots of ordinary hosts, and of others up to
    SWEEP_KEPT_OUTPUT bytes of output; with `keep_snapshots` False (nothing at the end reads them: a
    table, NDJSON already streamed, --brief), none: memory then stays flat however large the fleet."""
    entries, _ = unique_entries(entries)  # a target listed twice is probed once
    sem = asyncio.Semaphore(concurrency)
    bytes_budget = budget or ByteBudget(SWEEP_BYTES_IN_FLIGHT, concurrency)
    reports: list[HostReport] = [] if kept is None else kept
    kept_bytes = 0

    async def one(entry: InventoryEntry) -> None:
        nonlocal kept_bytes
        if entry.skip is not None:
            r = skipped_report(entry)
        else:
            async with sem:
                if on_start is not None:
                    on_start(entry.target)
                held = bytes_budget.account()
                try:
                    cap = await probe_any(entry.target, options, held.take)
                    r = await report_in_worker(cap, options)
                    size = len(cap.output)
                    ordinary = size <= ORDINARY_OUTPUT and not cap.truncated
                    del cap
                finally:
                    held.release()
            if entry.labels:
                r = replace(r, labels=entry.labels)
                if r.status not in ("ok", "skipped") and "vast_status" in entry.labels:
                    # "connection refused" says little; what vast.ai says of the instance says more
                    r = replace(r, error=(r.error or r.status) + vast_words(entry.labels))
            if not keep_snapshots:
                on_report(r)
                reports.append(replace(r, snapshot=None))
                return
            if r.snapshot is not None and not ordinary:
                if kept_bytes + size > SWEEP_KEPT_OUTPUT:
                    on_report(r)
                    reports.append(without_snapshot(r))
                    return
                kept_bytes += size
        reports.append(r)
        on_report(r)

    await asyncio.gather(*(one(e) for e in entries))
    return reports


def remember(
    reports: list[HostReport],
    history: Path | str | None,
    *,
    started_at: float,
    keep: float,
    kind: str = "sweep",
    shard: str | None = None,
    complete: bool = True,
    on_error: list | None = None,
    features: Mapping[str, str] | None = None,
    peers_since: float | None = None,
    peers_out: list | None = None,
) -> tuple[Mapping[str, HostMemory], str | None]:
    """Hand the finished reports to the history store (an SQLite file or a PostgreSQL URL): what
    each host was before this run, for the summary and the textfile. History never costs a result:
    a failure is one line (and, through `on_error`, the error itself)."""
    if history is None:
        return {}, None
    import time

    from vastprobe.history.store import record_safely

    return record_safely(
        history, reports, started_at=started_at, finished_at=time.time(), kind=kind, shard=shard, complete=complete,
        keep=keep, on_error=on_error, features=features, peers_since=peers_since, peers_out=peers_out,
    )  # fmt: skip
