"""The key instants of a stall on the target's clock: when the job started, when the OOM killer
took its process or the GPU logged an Xid, when its log and files were last written, when the
probe looked. Shown only when they tell a story: a host with nothing wrong has none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from vastprobe.analysis.relevance import job_start, rank_artifacts
from vastprobe.model import SEVERITY_ORDER, FileStat, Incident, Instant, Process

if TYPE_CHECKING:
    from vastprobe.analysis.view import SnapshotView

MAX_EACH = 3


def job_processes(ctx: SnapshotView, incidents: Sequence[Incident]) -> list[Process]:
    """The processes the serious incidents are about (their findings and drawn chains)."""
    pids: list[int] = []
    for inc in incidents:
        if max(SEVERITY_ORDER[f.severity] for f in inc.findings) < SEVERITY_ORDER["warning"]:
            continue
        for f in inc.findings:
            pids += f.pids
        for _f, pic in inc.pictures:
            pids += pic.pids
    return [ctx.tree.by_pid[p] for p in dict.fromkeys(pids) if p in ctx.tree.by_pid]


def build_timeline(ctx: SnapshotView, incidents: Sequence[Incident]) -> tuple[Instant, ...]:
    job = job_processes(ctx, incidents)
    if not job:
        return ()
    snap = ctx.snapshot
    out: list[Instant] = []
    start = job_start(snap, job)
    if start is not None:
        out.append(Instant(start[0], f"{start[1].comm} ({start[1].pid}) started"))
    since = start[0] if start is not None else None
    kills = [m for m in ctx.oom_matches if m.relevant and m.event.wall_time is not None]
    for m in kills[-MAX_EACH:]:
        e = m.event
        limit = f" at its memory cgroup limit of {e.limit_kb // 1024} MiB" if e.limit_kb else ""
        out.append(Instant(e.wall_time, f"{e.comm or '?'} OOM-killed{limit}"))  # type: ignore[arg-type]
    xids = [
        e
        for e in snap.kernel_log.events
        if e.kind in ("xid", "sxid") and e.wall_time is not None and (since is None or e.wall_time >= since)
    ]
    for e in xids[-MAX_EACH:]:
        word = "SXid" if e.kind == "sxid" else "Xid"
        out.append(Instant(e.wall_time, f"{word} {e.xid}" + (f" on {e.pci}" if e.pci else "")))  # type: ignore[arg-type]
    seen: set[str] = set()
    for log in snap.logs:
        last = log.stats[-1] if log.stats else None
        if isinstance(last, FileStat):
            seen.add(log.path)
            out.append(Instant(float(last.mtime), f"{log.path} last written"))
    entries = [e for listing in snap.artifacts for e in listing.entries if e.path not in seen]
    for r in [r for r in rank_artifacts(snap, entries, job, since) if r.writing][:MAX_EACH]:
        out.append(Instant(float(r.artifact.mtime), f"{r.artifact.path} last written ({r.reason})"))
    if len(out) < 2:
        return ()
    if ctx.now is not None:
        out.append(Instant(ctx.now, "the probe"))
    out.sort(key=lambda i: int(i.wall))  # to the second, as shown; ties keep the story's order
    return tuple(out)
