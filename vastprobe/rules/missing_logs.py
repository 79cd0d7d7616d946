"""VP104 missing-logs: an expected `--log` that is absent, empty, silent for `--stale-after`, or
deleted while a process still writes into it. "The logs simply stop" is how stalls look from
outside; fatal lines in the tail are evidence too."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.gpu import gpu_computing
from vastprobe.analysis.logs import LogHealth
from vastprobe.analysis.progress import Progress
from vastprobe.model import Evidence, FileStat, Finding, NotRead, Severity, Unavailable
from vastprobe.parsers.logs import UNREADABLE
from vastprobe.rules import chains
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("missing-logs", "VP104", "error", "an expected log is missing, silent or deleted while still open")


def _finding(ctx: Context, h: LogHealth) -> Finding | None:
    path = h.log.path
    ev: list[Evidence] = []
    if h.log.found:
        if h.state not in ("stale", "empty", "deleted-open"):
            return None  # found open: it exists, and a rotation or a fatal tail needs its --log
        if h.state != "deleted-open" and h.writers and all(ctx.quiet_server(w) for w in h.writers):
            return None  # a server waiting for its next request logs nothing meanwhile: a quiet daemon
        if h.state != "deleted-open" and h.writers and all(ctx.waits_on_watchers(w) for w in h.writers):
            return None  # a filter of what `tail -F` follows: nothing came to pass on (an empty alerts.log)
        # each writer once: one holding it on stdout and stderr was named twice (found by a helper)
        who = ", ".join(ctx.proc_label(pid) for pid in h.writers[:3]) + (" and others" if len(h.writers) > 3 else "")
        ev.append(Evidence("/proc/fd", f"held open for writing by {who} (found: no --log named it)"))
        path = f"{path} (the job's log, found open)"
    unreadable = isinstance(h.log.tail, Unavailable) and h.log.tail.reason == UNREADABLE
    if unreadable:
        # it read HEALTHY and said nothing of the tail it could not read (found by a new user's review)
        ev.append(Evidence("probe", f"{path}: its tail {UNREADABLE}"))
    if h.state == "ok":
        if unreadable:
            return META.finding(
                f"{path} is being written, but the probe could not read it: its last lines are not checked",
                h.writers, ev, "run vastprobe as a user who can read the log (root on the target, and for a network "
                "mount one that is not squashed), or give a log the job's user can read", "info",
            )  # fmt: skip
        return _fatal_tail(h, path, ev)
    if h.state in ("refused", "unanswered"):
        return _not_read(h, path, ev)
    words = _state_words(ctx, h, path, ev)
    if words is None:
        return None
    sev, summary, hint = _judged(ctx, h, *words, ev)
    if h.age is not None:
        window = (
            f"; {'grew' if h.grew else 'size unchanged'} over the {ctx.snapshot.sample_window:.1f}s between samples"
            if ctx.two_samples
            else ""
        )
        ev.append(Evidence("stat", f"last written {h.age:.0f}s before the probe{window}"))
    ev += [Evidence(f"tail of {path}", line) for line in h.fatal_lines]
    return META.finding(summary, h.writers or tuple(pid for pid, _fd, _p in h.rotated_writers), ev, hint, sev)


def _fatal_tail(h: LogHealth, path: str, ev: list[Evidence]) -> Finding | None:
    """A log being written: a finding only when its tail reads fatal."""
    if not h.fatal_lines:
        return None
    ev += [Evidence(f"tail of {path}", line) for line in h.fatal_lines]
    # "is being written" of a log last written 3 minutes before was false (found by a helper): its age says
    when = "grew over the window" if h.grew else (f"last written {h.age:.0f}s ago" if h.age is not None else "fresh")
    return META.finding(f"{path} ends in fatal-looking lines ({when})", h.writers, ev,
                        "read the log's tail; the job may be retrying or about to exit", "warning")  # fmt: skip


def _not_read(h: LogHealth, path: str, ev: list[Evidence]) -> Finding:
    """A log the probe refused to read (a link to someone else's file), or whose mount did not answer."""
    why = next(x for x in (*reversed(h.log.stats), h.log.tail) if isinstance(x, NotRead))
    ev.append(Evidence("probe", f"{path}: {why.reason}"))
    if h.state == "refused":
        summary = f"{path} was not read ({why.reason.removeprefix('not read: ')})"
        hint = (
            "a --log that is a link to another user's file, or to a kernel or device file, is never read (a link "
            "planted there would put that file's content in the report): name the job's own log file"
        )
    else:
        fuse = "FUSE" in why.reason
        summary = (
            f"{path} is on an unresponsive FUSE mount: not touched" if fuse
            else f"{path} did not answer: its file system may be dead (a hung mount)"
        )  # fmt: skip
        hint = (
            "a mount that does not answer hangs whoever touches it (the job too): see fuse-no-answer for its "
            "server; `umount -l` or `fusermount -u -z` it, or restart the server"
        )
    return META.finding(summary, h.writers, ev, hint, "warning")


def _state_words(ctx: Context, h: LogHealth, path: str, ev: list[Evidence]) -> tuple[Severity, str, str] | None:
    """The severity, summary and hint for what is wrong with the log (None: nothing is), its evidence
    added to `ev`."""
    sev: Severity
    if h.state == "absent":
        sev, summary = "warning", f"{path} does not exist"
        hint = "check the path; if the job should have created it by now, it never started or writes elsewhere"
    elif h.state == "not-a-file":
        kind = next((st.kind for st in reversed(h.log.stats) if isinstance(st, FileStat)), None) or "special file"
        sev, summary = "warning", f"{path} is not a regular file ({kind}): no log is read there"
        hint = "point --log at the file the job writes; a FIFO or a device has no tail or age to judge"
    elif h.state == "deleted-open":
        names = ", ".join(ctx.proc_label(pid) for pid in h.writers)
        sev, summary = "warning", f"{path} was deleted while {names} still hold(s) it open"
        hint = "the writer keeps writing into the deleted file: read it via /proc/<pid>/fd/<n>, and stop whatever deletes it"
        ev += [Evidence("/proc/fd", f"pid {pid} fd {fd} -> {path} (deleted)") for pid, fd, d in h.log.holders if d]
    elif h.state == "rotated":
        moved = {pid: ctx.progress[pid].io_bytes for pid, _fd, _path in h.rotated_writers if pid in ctx.progress}
        written = sorted({path for _pid, _fd, path in h.rotated_writers})
        # each writer once: stdout and stderr on the rotated file named it twice (found by a helper)
        names = ", ".join(
            ctx.proc_label(pid) for pid in list(dict.fromkeys(pid for pid, _fd, _p in h.rotated_writers))[:4]
        )
        sev = "warning"
        summary = f"{path} was rotated; {names} still write(s) {', '.join(written)}"
        hint = (
            f"the job logs to {written[0]}, not {path}: make logrotate use `copytruncate`, or have it signal the "
            "writer to reopen its log (`postrotate ... kill -HUP`); until then watch the rotated file"
        )
        ev += [
            Evidence("/proc/fd", f"pid {pid} fd {fd} -> {wpath} (open for writing)")
            for pid, fd, wpath in h.rotated_writers[:8]
        ]
        ev += [
            Evidence("progress", f"pid {pid} wrote {n} B over the window") for pid, n in moved.items() if n is not None
        ]
    elif h.state == "empty":
        sev = "error" if h.age is not None and h.age > ctx.options.stale_after else "info"
        summary = f"{path} is empty" + (f" after {h.age:.0f}s" if h.age is not None else "")
        hint = "the job started but never logged: check its stdout redirection and whether it is blocked before its first line"
    elif h.state == "stale":
        sev, summary = (
            "error",
            f"{path} has not been written for {h.age:.0f}s (over --stale-after {ctx.options.stale_after:.0f}s)",
        )
        hint = (
            "the job stopped logging and did not move over the window: see what it waits on (the findings "
            "about its processes, `py-spy dump`, /proc/PID/stack)"
        )
    else:
        return None
    return sev, summary, hint


#: (summary's end, hint) of a quiet log beside a job that computes, waits on what computes, or sleeps on a timer
_COMPUTES = (
    ": the log is quiet while it computes",
    "the job is busy on the CPU or its GPU, or doing I/O, but not logging: a long step with no output (an epoch that "
    "logs at its end), a loop or a retry; if it should have logged by now, see where it spins (py-spy dump, gdb -p, "
    "perf top)",
)
_WAITS_ON_WORK = (
    ": the job waits on what computes",
    "the job is blocked on a process that is busy (a lock's holder still at work, a reader that spins without "
    "reading): see what that process does (py-spy dump, gdb -p, perf top); once it lets go, the job goes on",
)
_WAITS_ON_WAKES = (
    ": what the job waits on is awake",
    "the job is blocked on a process that wakes and works (a server taking an upload slowly, a peer it takes "
    "turns with): see whether the transfer or exchange still moves (ss -ti for a connection's bytes), and what "
    "that process does (py-spy dump, /proc/PID/stack)",
)
_WAITS_ON_TIMERS = (
    ": what the job waits on sleeps on a timer",
    "the job is blocked on a process asleep on a timer, which goes on by itself (a server pacing what it sends or "
    "reads, a back-off): see whether the transfer still moves (ss -ti for a connection's bytes), and what that "
    "process does between its sleeps (py-spy dump, /proc/PID/stack)",
)
_SERVES = (
    ": the job waits for requests",
    "the job waits for its next request (a client on its listening socket, a writer to open its FIFO) and none is "
    "queued: its log is quiet because nobody asks; if clients should be calling, see why they do not reach it "
    "(ss -ltn for its listeners, the clients' own logs)",
)
_FOLLOWS = (
    ": the job waits for a file it follows to change",
    "the job passes on what it reads from a file it follows (`tail -F`, an inotify watch), and nothing was written "
    "there: if the followed file should be growing, see what writes it",
)
_SLEEPS = (
    ": the job sleeps on a timer",
    "the job is asleep on a timer and wakes by itself: a long sleep, a back-off or the pause of a polling "
    "loop; if it should have logged by now, see what it waits for between sleeps (its script, py-spy dump)",
)
_KEEPS_ALIVE = (
    ": the job only sleeps, in a keep-alive (`sleep infinity`) or on timers",
    "the job only sleeps: a keep-alive (`sleep infinity`, what an entrypoint ends with to stay up) idles by "
    "design; if work should be running under it, see where it went (its own log, the processes it started)",
)


def _eased(summary: str, ev: list[Evidence], texts: list[str], words: tuple[str, str]) -> tuple[Severity, str, str]:
    """A quiet log's error made a warning by what the job does instead (`texts`, added to `ev` as
    progress): its summary ends with, and its hint is, `words`."""
    ending, hint = words
    ev.extend(Evidence("progress", text) for text in texts)
    return "warning", summary + ending, hint


def _judged(
    ctx: Context, h: LogHealth, sev: Severity, summary: str, hint: str, ev: list[Evidence]
) -> tuple[Severity, str, str]:
    """A quiet log is evidence, not a verdict: an error only while the job is seen not to move, and
    a warning while it computes or does I/O (its evidence added to `ev`)."""
    job = h.writers or (tuple(sorted(ctx.scope)) if ctx.bounded else ())
    behind = _behind(ctx, job) if sev == "error" else ()
    busy = _busy(ctx, behind)
    # else what it waits on: a blocker that works holds nobody, but the job itself does not compute
    # (a writer blocked on a full pipe whose reader spins was said to compute; found by a helper)
    holders = _waited_on(ctx, behind) if sev == "error" and not busy else ()
    waited = _busy(ctx, holders)
    woke = _woke(ctx, holders) if not waited else []
    timed = _on_timers(ctx, holders) if not waited and not woke else []
    moved = sev == "error" and not busy and not _still(ctx, job)
    if sev == "error" and not busy and job and all(ctx.quiet_server(pid) or ctx.serves_in_a_thread(pid) for pid in job):
        # a named log of a server nobody asks: quiet by design, no holder proven not to move (an idle
        # Java server read STALLED, exit 1; found by a helper), whether or not its housekeeping moved
        # over the window (a JVM that ticked read "moved", not why; the project's CI)
        served = f"{chains.names(ctx, job, 3)} wait(s) for requests, none queued"
        if moved:
            ev.append(Evidence("progress", _why_not_judged(ctx, job)))
        sev, summary, hint = _eased(summary, ev, [served], _SERVES)
    elif moved:
        # a quiet log alone is no stall: only a job seen not to move over the window makes it one
        sev = "warning"
        ev.append(Evidence("progress", _why_not_judged(ctx, job)))
        if h.state == "stale" and ctx.two_samples and job:
            # the hint said "did not move over the window" beside this very line (found by a new user's review)
            hint = (
                "the job stopped logging but moved over the window, so it is not seen to be stuck: see what it "
                "does between log lines (the findings about its processes, `py-spy dump`, /proc/PID/stack)"
            )
    elif (
        sev == "error"
        and not busy
        and (sleepers := ctx.timer_sleepers(behind, flow=True) or ctx.waits_end_on_timers(behind))
    ):
        # asleep on a timer is no holder proven not to move: the job wakes by itself (a polling loop's
        # pause, a back-off, `time.sleep(3600)`, a consumer of a loop that sleeps between its lines) and
        # read STALLED (found by a helper)
        words = _KEEPS_ALIVE if any(ctx.keeps_alive(pid) for pid in sleepers) else _SLEEPS
        sev, summary, hint = _eased(summary, ev, [_sleeping(ctx, sleepers)], words)
    elif sev == "error" and not busy and job and all(ctx.waits_on_watchers(pid) for pid in job):
        # a named log of a filter behind `tail -F`: quiet until the file it follows changes
        watched = f"{chains.names(ctx, job, 3)} wait(s) for a file they follow to change"
        sev, summary, hint = _eased(summary, ev, [watched], _FOLLOWS)
    # a quiet log is evidence, not a verdict: a job that computes (an epoch that logs once in ten
    # minutes) is no stall, whether the log was named (--log) or found open; nor one that waits on what
    # computes (busy and waited are never both found)
    work, words = (
        (busy, _COMPUTES)
        if busy
        else (waited, _WAITS_ON_WORK)
        if waited
        else (woke, _WAITS_ON_WAKES)
        if woke
        else (timed, _WAITS_ON_TIMERS)
    )
    if work and sev == "error":
        sev, summary, hint = _eased(summary, ev, work, words)
    return sev, summary, hint


def _woke(ctx: Context, pids: tuple[int, ...]) -> list[str]:
    """What the job waits on that was scheduled over the window (its main thread's context switches):
    a server reading an upload 16 KiB at a time, the other end of a semaphore. A slow transfer moves
    no CPU tick and no vfs byte, and its quiet log read STALLED (found by a helper, 18 runs of 18)."""
    out = []
    for pid in pids:
        pr = ctx.progress.get(pid)
        if pr is not None and ctx.woke_at_work(pid):
            out.append(
                f"{ctx.proc_label(pid)}, which it waits on, was scheduled {pr.ctxt_switches} time(s) over the "
                f"{ctx.snapshot.sample_window:.1f}s between samples"
            )
    return out[:4]


def _on_timers(ctx: Context, pids: tuple[int, ...]) -> list[str]:
    """What the job waits on, every one asleep on a timer (or on children that are): each goes on by
    itself. A server sending 1 KiB every 5 s, asleep through the whole window, held its client's quiet
    log to an error, STALLED (found by a helper)."""
    if not ctx.wake_by_themselves(pids):
        return []
    return [f"{ctx.proc_label(pid)}, which it waits on, sleeps on a timer" for pid in pids[:4]]


#: How many processes behind a log's writers are looked at for work.
MAX_BEHIND = 64


def _behind(ctx: Context, writers: tuple[int, ...]) -> tuple[int, ...]:
    """The writers, what they run and what feeds the pipes they read: a launcher holding the log
    while its child computes (`exec >> job.log`, then the trainer), and `python train.py | tee job.log`,
    whose log's only writer is `tee`, idle on its pipe while python computes, read STALLED (found by a
    helper). The job computes there, not in the writer."""
    out: dict[int, None] = dict.fromkeys(writers)
    for pid in writers:
        p = ctx.tree.by_pid.get(pid)
        if p is None:
            continue
        for q in (*ctx.graph.feeders(p), *(d.pid for d in ctx.tree.descendants(pid))):
            if len(out) >= MAX_BEHIND:
                return tuple(out)
            out.setdefault(q, None)
    return tuple(out)


def _waited_on(ctx: Context, job: tuple[int, ...]) -> tuple[int, ...]:
    """What holds what the job's processes wait on, and what it runs: a cron run queued on the flock of
    the previous run, which still computes, read STALLED behind its stale log, the lock wait unsaid
    (found by a helper). `flock job.lock python step.py`: flock holds it, python computes."""
    out: dict[int, None] = {}
    # never the probe's own processes: its shell reads the log, and was credited as the work the job
    # waits on (found by a helper)
    mine = set(job) | set(ctx.snapshot.excluded_pids)
    for pid in job:
        for edge in ctx.graph.edges(pid):
            for h in edge.holders:
                for q in (h, *(d.pid for d in ctx.tree.descendants(h))):
                    if len(out) >= MAX_BEHIND:
                        return tuple(out)
                    if q not in mine:
                        out.setdefault(q, None)
    return tuple(out)


def _still(ctx: Context, pids: tuple[int, ...]) -> bool:
    """Whether the job behind the log was seen not to move: two samples of each of its processes,
    and no CPU, I/O, context switch or state change in any."""
    if not ctx.two_samples or not pids:
        return False
    return all((pr := ctx.progress.get(pid)) is not None and pr.sampled and not pr.active for pid in pids)


def _sleeping(ctx: Context, sleepers: tuple[int, ...]) -> str:
    names = ", ".join(ctx.proc_label(pid) for pid in sleepers[:3]) + (" and others" if len(sleepers) > 3 else "")
    p = ctx.tree.by_pid.get(sleepers[0])
    where = f" ({p.wchan})" if p is not None and isinstance(p.wchan, str) and p.wchan not in ("", "0") else ""
    if any(ctx.keeps_alive(pid) for pid in sleepers):
        return f"{names} asleep over the window, each on a timer or a keep-alive (`sleep infinity`, idle by design): the quiet log proves no stall"
    how = "asleep on a timer" if all(ctx.on_timer(pid) for pid in sleepers) else "asleep on a timer or a deadline"
    return f"{names} {how}{where} over the window: it wakes by itself, so the quiet log proves no stall"


def _why_not_judged(ctx: Context, pids: tuple[int, ...]) -> str:
    if not ctx.two_samples:
        return "one sample: no window to tell whether the job still works (--sample 1, the default, tells)"
    if not pids:
        return "no process holds the log and no --pid/--match names the job: nothing to tell whether it still works"
    moved = [pid for pid in pids if (pr := ctx.progress.get(pid)) is not None and pr.active]
    how = sorted({how for pid in moved for how in _how_moved(ctx.progress[pid])})
    return f"the job moved over the window ({', '.join(how) or 'it changed'}): not seen to be stuck"


def _how_moved(pr: Progress) -> list[str]:
    """What a process did over the window, in words (it said "context switches or a state change" of a
    job that used CPU; found by a new user's review)."""
    return [
        words
        for words, did in (
            ("CPU", pr.cpu_ticks),
            ("I/O", pr.io_bytes),
            ("context switches", pr.ctxt_switches),
            ("a state change", pr.state_changed),
            ("a process ended", pr.gone),
            ("a thread running", pr.thread_running),
        )
        if did
    ]


#: Bytes read or written over the window (rchar + wchar) that count as a process doing I/O.
BUSY_IO = 1024 * 1024


def _busy(ctx: Context, pids: tuple[int, ...]) -> list[str]:
    """What the writers (or, with none, the watched processes) did on the CPU or in I/O while the
    log was silent: a job computing or copying without logging is not a job waiting on something."""
    window = ctx.snapshot.sample_window
    if not ctx.two_samples or window <= 0:
        return []
    out = []
    for pid in pids:
        pr = ctx.progress.get(pid)
        if pr is None or not pr.sampled:
            continue
        if ctx.computes(pid):
            out.append(
                f"{ctx.proc_label(pid)} used {ctx.cpu_seconds(pid):.2f}s of CPU over the {window:.1f}s between samples"
            )
        elif pr.io_bytes is not None and pr.io_bytes >= BUSY_IO:
            out.append(f"{ctx.proc_label(pid)} read or wrote {pr.io_bytes} B over the {window:.1f}s between samples")
    if not out and (gpu := gpu_computing(ctx.snapshot, frozenset(pids))) is not None:
        # its CPU threads asleep in a blocking sync while its GPU computes: a trainer whose epoch logs at
        # its end read STALLED beside a GPU at 91% of its power limit (found by a helper)
        out.append(f"{gpu} in every sample")
    return out[:4]


def check(ctx: Context) -> Iterator[Finding]:
    for h in ctx.log_healths:
        f = _finding(ctx, h)
        if f is not None:
            yield f


RULE = Rule(META, check)
