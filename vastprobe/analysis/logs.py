"""Health of the logs the workload is expected to keep writing (`--log`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from vastprobe.model import FileStat, LogFile, Process, Unavailable

LogState = Literal["ok", "absent", "empty", "stale", "deleted-open", "rotated", "not-a-file", "unknown"]

FATAL = re.compile(
    r"(Killed|out of memory|OutOfMemory|CUDA error|CUDA_ERROR|panic|Traceback \(most recent call last\)|"
    r"Segmentation fault|core dumped|FATAL|Fatal error|Aborted|illegal memory access)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class LogHealth:
    log: LogFile
    state: LogState
    age: float | None  # seconds since last write, on the target's clock
    grew: bool  # size changed between the probe's samples
    fatal_lines: tuple[str, ...]
    writers: tuple[int, ...]  # pids holding it open for writing (deleted or not)
    rotated_writers: tuple[tuple[int, int, str], ...] = ()  # (pid, fd, path): still writing a rotated copy

    def alarming(self, stale_after: float) -> bool:
        """Says the job stopped writing: stale, deleted while open, or empty for longer than
        stale_after. An absent log may just be a wrong path, and a rotated one whose writer moved on
        to the rotated copy is alive: neither is that."""
        return self.state in ("stale", "deleted-open") or (self.state == "empty" and (self.age or 0) > stale_after)


def rotated_writers(log: LogFile, processes: Iterable[Process]) -> tuple[tuple[int, int, str], ...]:
    """Processes writing `<log>.1`, `<log>-20261203` and the like: logrotate renamed the file under
    them (its `create` mode) and they never reopened the new one."""
    out = []
    for p in processes:
        if isinstance(p.fds, Unavailable):
            continue
        for e in p.fds:
            if (
                e.mode in ("w", "rw")
                and e.path.startswith(log.path)
                and e.path[len(log.path) : len(log.path) + 1] in (".", "-", "_")
            ):
                out.append((p.pid, e.fd, e.path))
    return tuple(out)


def log_health(log: LogFile, now: float | None, stale_after: float, processes: Iterable[Process] = ()) -> LogHealth:
    stats = [s for s in log.stats if isinstance(s, FileStat)]
    grew = len(stats) >= 2 and stats[-1].size != stats[0].size
    tail = log.tail if isinstance(log.tail, str) else ""
    fatal = tuple(line.strip()[:300] for line in tail.splitlines()[-50:] if FATAL.search(line))[-5:]
    writers = tuple(dict.fromkeys(pid for pid, _fd, _deleted in log.holders))  # once each, not once per fd
    deleted_holders = [h for h in log.holders if h[2]]
    age = None
    if stats and now is not None:
        age = max(0.0, now - stats[-1].mtime)
    state: LogState
    if not stats:
        last = log.stats[-1] if log.stats else None
        reason = last.reason if isinstance(last, Unavailable) else ""
        if deleted_holders:
            state = "deleted-open"
        elif "No such file" in reason or "can't" in reason or not reason:
            state = "absent"
        else:
            state = "unknown"
    elif not stats[-1].regular:  # a FIFO, /dev/zero, a directory: no log is read there, none goes stale
        state = "not-a-file"
    elif grew:
        state = "ok"
    elif stats[-1].size == 0:
        state = "empty"
    elif age is not None and age > stale_after:
        state = "stale"
    else:
        state = "ok"
    rotated = rotated_writers(log, processes) if state in ("absent", "empty", "stale") else ()
    if rotated and not log.holders:
        state = "rotated"
    return LogHealth(log, state, age, grew, fatal, writers, rotated)
