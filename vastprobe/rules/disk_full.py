"""VP110 disk-full: /tmp or a log's filesystem out of space or inodes; writes fail, and jobs that
do not check them hang or die quietly.

A full filesystem proves a stall only where the job writes: a 200 GiB volume at 98% with 3.8 GiB
free, or a full /tmp the job holds nothing open on, read STALLED for a job whose log kept growing
(found by a helper). It is an error when there is no room left (98% used and under 256 MiB free, or
98% of inodes used and under 4,096 free), the job writes there (a `--log` on it, or the job's log
found open on it), and no log of the job grew between the samples; a warning otherwise."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import DiskUsage, Evidence, Finding, lies_under
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("disk-full", "VP110", "error", "a filesystem the job writes to is (nearly) out of space or inodes")
ERROR_PCT, WARN_PCT = 98.0, 90.0
ERROR_FREE_KB = 256 * 1024
ERROR_FREE_INODES = 4096


def _mount_of(path: str, disks: tuple[DiskUsage, ...]) -> str | None:
    """The mount point of the listed filesystem a path asked about lies on: the longest above it."""
    return max((d.mount for d in disks if lies_under(path, d.mount)), key=len, default=None)


def _writers(ctx: Context, d: DiskUsage) -> list[str]:
    """Why the job writes to `d`: a --log on it, or the job's log found open on it (a file lies on the
    listed filesystem whose mount point is the longest above it: a job writing /workspace/train.log on a
    container's full overlay root, which /tmp shares). Not any file held for writing: a cron job's lock
    file on a full /tmp, while it worked elsewhere, read STALLED (found by a helper)."""
    disks = ctx.snapshot.disks
    out = [f"--log {log.path} is on it" for log in ctx.snapshot.logs if _mount_of(log.path, disks) == d.mount]
    out += [
        f"{log.path}, the job's log (found open), is on it"
        for log in ctx.found_logs
        if _mount_of(log.path, disks) == d.mount
    ]
    return out[:3]


def _grew(ctx: Context) -> str | None:
    """A log of the job that grew between the samples: its writes still land (on this filesystem, or
    it writes elsewhere than where it is full)."""
    return next((h.log.path for h in ctx.log_healths if h.grew), None)


def _problems(d: DiskUsage) -> tuple[list[Evidence], bool, bool]:
    """The evidence of a filesystem filling up, whether it is (that far) filling, and whether it is
    out of room."""
    problems, filling, full = [], False, False
    if d.size_kb and d.used_kb is not None and d.available_kb is not None:
        pct = 100.0 * d.used_kb / max(1, d.used_kb + d.available_kb)
        if pct >= WARN_PCT:
            filling = True
            full = pct >= ERROR_PCT and d.available_kb < ERROR_FREE_KB
            problems.append(Evidence("df -P", f"{d.mount}: {pct:.1f}% used, {d.available_kb // 1024} MiB free"))
    if d.inodes and d.inodes_free is not None:
        ipct = 100.0 * (d.inodes - d.inodes_free) / d.inodes
        if ipct >= WARN_PCT:
            filling = True
            full = full or (ipct >= ERROR_PCT and d.inodes_free < ERROR_FREE_INODES)
            problems.append(Evidence("df -Pi", f"{d.mount}: {ipct:.1f}% of inodes used, {d.inodes_free} free"))
    return problems, filling, full


def check(ctx: Context) -> Iterator[Finding]:
    seen = set()
    for d in ctx.snapshot.disks:
        if d.mount in seen:
            continue
        seen.add(d.mount)
        problems, filling, full = _problems(d)
        if not filling:
            continue
        sev = "warning"
        if full:
            writers = _writers(ctx, d)
            grew = _grew(ctx)
            if not writers:
                problems.append(Evidence("fd", "no log of the job is on it"))
            elif grew is not None:
                problems.append(Evidence("stat", f"{grew} grew between the samples: the job's writes still land"))
            else:
                sev = "error"
                problems.extend(Evidence("fd", w) for w in writers)
        yield META.finding(
            f"{d.mount} is {'full' if full else 'filling up'}",
            [],
            problems,
            "free space (old checkpoints, caches, /tmp) or point the job at a larger volume",
            sev,  # type: ignore[arg-type]
        )


RULE = Rule(META, check)
