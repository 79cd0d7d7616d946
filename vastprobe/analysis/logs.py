"""Health of the logs the workload is expected to keep writing (`--log`, or found: the files a named
job holds open write-only)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from vastprobe.model import FileStat, HostSnapshot, LastWords, LogFile, NotRead, Process, Unavailable

LogState = Literal[
    "ok", "absent", "empty", "stale", "deleted-open", "rotated", "not-a-file", "unknown", "refused", "unanswered"
]

FATAL = re.compile(
    r"(Killed|out of memory|OutOfMemory|CUDA error|CUDA_ERROR|panic|Traceback \(most recent call last\)|"
    r"Segmentation fault|core dumped|FATAL|Fatal error|Aborted|illegal memory access)",
    re.IGNORECASE,
)


# what a line says when a job retries something that does not come: an attempt that failed and
# will be made again, or a connection refused. Words that also name settings and counters
# ("timeout=1800s", "retries: 0", "not ready", "waiting for work") are not enough on their own.
RETRY = re.compile(
    r"(retrying|will retry|retry in|retry #|retry attempt|trying again|try again in|backing off|"
    r"connection refused|couldn'?t connect|could not connect|failed to connect|unable to connect|"
    r"not yet listening|no route to host|errno:? ?111|ECONNREFUSED|"
    # a restarter's words: a bash `until job; do sleep; done`, supervisord's unexpected exit, systemd's
    r"restarting|restart in|will restart|respawn|scheduled restart|not expected\))",
    re.IGNORECASE,
)
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}|[0-9]+")
# a time or a date changes on every line of any loop; a decimal (a loss, a rate) wanders
_CLOCKS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{1,2}:[0-9]{2}(:[0-9]{2})?(\.[0-9]+)?|[0-9]+\.[0-9]+")
_COUNTS = re.compile(r"[0-9]+")
# an attempt counter counts retries, not progress: wget's "(try:23)", "attempt 4"; so does a restarted
# job's new process ID (supervisord's "spawned: 'job' with pid 4107")
_ATTEMPTS = re.compile(r"\b(try|tries|attempt|attempts|retry|retries|pid)\b\W{0,3}[0-9]+", re.IGNORECASE)
MIN_REPEATS = 5
MAX_PERIOD = 6


@dataclass(frozen=True)
class RetryLoop:
    """The log's tail is one message (or a block of up to MAX_PERIOD lines) over and over, numbers
    aside, and it says an attempt failed and will be made again: the job is alive and going nowhere."""

    line: str  # the block's last line that says it retries, as written
    repeats: int  # how many times the block repeats at the end of the tail
    period: int  # lines in the block


def _advances(lines: list[str]) -> bool:
    """A counter that goes up on every repeat of a line (step 23, 24, 25): the job moves on
    between its retries. Times, dates, decimals and attempt counters aside."""
    counts = [[int(x) for x in _COUNTS.findall(_ATTEMPTS.sub(" ", _CLOCKS.sub(" ", line)))[:16]] for line in lines]
    if len({len(c) for c in counts}) != 1:
        return False
    return any(all(a[k] < b[k] for a, b in itertools.pairwise(counts)) for k in range(len(counts[0])))


def retry_loop(tail: str) -> RetryLoop | None:
    """A progress log repeats its shape too ("step 5/1000 loss 0.53"): only a repeated block that
    says an attempt failed and will be made again counts, and not when a line of it without such
    words counts up on every repeat (a retry on every step of a job that still moves on). A line
    rewritten with carriage returns (a progress meter) reads as a terminal shows it: its last part."""
    raw = [line.rstrip("\r").rsplit("\r", 1)[-1][:300] for line in tail.split("\n")]
    lines = [line for line in raw if line.strip()][-200:]
    shapes = [_NUMBERS.sub("#", line.strip()) for line in lines]
    best: RetryLoop | None = None
    for period in range(1, MAX_PERIOD + 1):
        block = shapes[-period:]
        if len(block) < period:
            break
        n = 1
        while (n + 1) * period <= len(shapes) and shapes[
            len(shapes) - (n + 1) * period : len(shapes) - n * period
        ] == block:
            n += 1
        if n < MIN_REPEATS or not any(RETRY.search(line) for line in lines[-period:]):
            continue
        reps = lines[len(lines) - n * period :]
        quiet = [j for j in range(period) if not RETRY.search(reps[j])]
        if any(_advances(reps[j::period]) for j in quiet):
            continue
        if best is None or n * period > best.repeats * best.period:
            said = next(line for line in reversed(lines[-period:]) if RETRY.search(line))
            best = RetryLoop(said.strip(), n, period)
    return best


@dataclass(frozen=True)
class LogHealth:
    log: LogFile
    state: LogState
    age: float | None  # seconds since last write, on the target's clock
    grew: bool  # size changed between the probe's samples
    fatal_lines: tuple[str, ...]
    writers: tuple[int, ...]  # pids holding it open for writing (deleted or not)
    rotated_writers: tuple[tuple[int, int, str], ...] = ()  # (pid, fd, path): still writing a rotated copy
    retry: RetryLoop | None = None  # the tail ends in a retry loop

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
    not_read = next((x for x in (*reversed(log.stats), log.tail) if isinstance(x, NotRead)), None)
    if not_read is not None:  # the probe would not read it, or its mount did not answer
        return LogHealth(log, not_read.why, None, False, (), writers)
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
    return LogHealth(log, state, age, grew, fatal, writers, rotated, retry_loop(tail) if tail else None)


#: Lines of the log that matters shown under the headline, and characters of each.
LAST_WORDS_LINES = 3
LAST_WORDS_CHARS = 200


def last_words(healths: Iterable[LogHealth]) -> LastWords | None:
    """The last lines of the log that matters: a log that says the job stopped (stale, deleted
    while open) first, else the one written last; only a log whose tail was read and holds text."""
    told = [h for h in healths if isinstance(h.log.tail, str) and h.log.tail.strip()]
    if not told:
        return None
    best = min(told, key=lambda h: (h.state not in ("stale", "deleted-open"), h.age if h.age is not None else 1e18))
    assert isinstance(best.log.tail, str)
    lines = [line.rstrip("\r").rsplit("\r", 1)[-1].strip() for line in best.log.tail.splitlines()]
    lines = [line[:LAST_WORDS_CHARS] for line in lines if line][-LAST_WORDS_LINES:]
    return LastWords(best.log.path, tuple(lines)) if lines else None


def found_logs(snapshot: HostSnapshot, scope: frozenset[int]) -> tuple[LogFile, ...]:
    """The logs of the processes in scope, found: each file they hold open write-only that the probe
    stat'ed (their stdout and stderr, or named like a log), once per file, with every holder in
    scope; none where --log named the job's log."""
    if snapshot.logs:
        # --log said where the job logs: its other files (an empty stdout beside the log it writes) are not
        # judged; they were, and an idle job logging to the file given read DEGRADED (found by a helper)
        return ()
    files: dict[int, tuple[str, FileStat]] = {}
    tails: dict[int, str] = {}
    holders: dict[int, list[tuple[int, int, bool]]] = {}
    by_pid = {p.pid: p for p in snapshot.processes if p.pid in scope}
    for held in snapshot.held_files:
        p = by_pid.get(held.pid)
        if p is None or isinstance(p.fds, Unavailable):
            continue
        entry = next((e for e in p.fds if e.fd == held.fd and e.mode == "w"), None)
        if entry is None or not held.stat.regular:
            continue
        files.setdefault(held.stat.inode, (entry.path, held.stat))
        if held.tail is not None:
            tails.setdefault(held.stat.inode, held.tail)
        holders.setdefault(held.stat.inode, []).append((held.pid, held.fd, entry.deleted))
    # every process in scope with the file open for writing holds it, not only the one the probe stat'ed
    # it through (once per file): a launcher's `exec >> job.log` leaves its log on the child it runs,
    # which computes while the launcher waits; judged by the launcher alone, the quiet log read a stall
    inode_of = {(path, holders[ino][0][2]): ino for ino, (path, _st) in files.items()}  # a deleted one apart
    known = {(pid, fd) for hs in holders.values() for pid, fd, _d in hs}
    for q in by_pid.values() if inode_of else ():
        for e in q.fds if not isinstance(q.fds, Unavailable) else ():
            if e.mode == "w" and (ino := inode_of.get((e.path, e.deleted))) is not None and (q.pid, e.fd) not in known:
                holders[ino].append((q.pid, e.fd, e.deleted))
    # ranked by what the job writes: an empty file whose writers all write another found log with
    # something in it is not the job's log (a trainer logging to train.log on fd 3 and nothing to
    # stdout: its empty stdout.log was blamed, "check its stdout redirection")
    writing = {pid for ino, (_p, st) in files.items() if st.size for pid, _fd, _d in holders[ino]}
    # and not where each holder launched one that does: the `timeout` or shell that started `python job.py >
    # out.txt`, waiting with out.txt open while the job logs to its own file (its empty out.txt was blamed,
    # with a hint to kill the job; found by a helper)
    elsewhere = writing | _launchers(writing, by_pid)
    unread = Unavailable("found, not given: its tail is read only for the 4 logs on the host written last")
    return tuple(
        LogFile(path=path, stats=(stat,), tail=tails.get(ino, unread), holders=tuple(holders[ino]), found=True)
        for ino, (path, stat) in files.items()
        if stat.size or not (writing and all(pid in elsewhere for pid, _fd, _d in holders[ino]))
    )


def _launchers(writing: set[int], by_pid: dict[int, Process]) -> set[int]:
    """The ancestors of the processes in `writing`, as far as `by_pid` reaches."""
    out: set[int] = set()
    for pid in writing:
        q, seen = by_pid.get(pid), {pid}
        while q is not None and q.ppid not in seen:  # a PID loop in hostile data ends the walk
            seen.add(q.ppid)
            out.add(q.ppid)
            q = by_pid.get(q.ppid)
    return out
