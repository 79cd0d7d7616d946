"""VP110 disk-full: /tmp or a log's filesystem out of space or inodes; writes fail, and jobs that
do not check them hang or die quietly."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("disk-full", "VP110", "error", "a filesystem the job writes to is (nearly) out of space or inodes")
ERROR_PCT, WARN_PCT = 98.0, 90.0
ERROR_FREE_KB = 256 * 1024


def check(ctx: Context) -> Iterator[Finding]:
    for d in ctx.snapshot.disks:
        problems = []
        sev = None
        if d.size_kb and d.used_kb is not None and d.available_kb is not None:
            pct = 100.0 * d.used_kb / max(1, d.used_kb + d.available_kb)
            # under 256 MiB free is full only once the filesystem is filling (90%): a 64 MiB /dev/shm or a
            # small tmpfs holding one log read "is full" at 0.0% used (found by a helper)
            if pct >= ERROR_PCT or (d.available_kb < ERROR_FREE_KB and pct >= WARN_PCT):
                sev = "error"
            elif pct >= WARN_PCT:
                sev = "warning"
            if sev:
                problems.append(Evidence("df -P", f"{d.mount}: {pct:.1f}% used, {d.available_kb // 1024} MiB free"))
        if d.inodes and d.inodes_free is not None:
            ipct = 100.0 * (d.inodes - d.inodes_free) / d.inodes
            if ipct >= ERROR_PCT:
                sev = "error"
            elif ipct >= WARN_PCT and sev is None:
                sev = "warning"
            if ipct >= WARN_PCT:
                problems.append(Evidence("df -Pi", f"{d.mount}: {ipct:.1f}% of inodes used, {d.inodes_free} free"))
        if sev:
            yield META.finding(
                f"{d.mount} is {'full' if sev == 'error' else 'filling up'}",
                [],
                problems,
                "free space (old checkpoints, caches, /tmp) or point the job at a larger volume",
                sev,  # type: ignore[arg-type]
            )


RULE = Rule(META, check)
