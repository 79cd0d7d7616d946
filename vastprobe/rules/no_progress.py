"""VP126 no-progress: a watched process is alive, holds its log open, and makes no progress: the
log is silent past --stale-after, and over the probe's two samples neither it nor anything under it
used CPU, did I/O, switched context or changed state, while no wait chain (a child, a pipe, a lock,
a socket, a FIFO, a FUSE mount) says what it waits for.

This is the cause a silent log points at when nothing else explains it: a lock or condition inside
the process, a sleep that never ends, a read the kernel does not name. missing-logs says the log is
silent; this says who stopped, and how to see where. Only with a scope (--pid, --match): on a whole
host a quiet daemon holding a quiet log is no stall. Only with two samples: one instant cannot tell
a process that waits from one that works."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import stack_command, stack_evidence

#: Waits that name no other process: a lock or condition inside the process, a timer, a signal.
UNFOLLOWABLE = frozenset({"futex", "sleep", "signal", "other"})

META = RuleMeta("no-progress", "VP126", "error", "a watched process is alive, its log silent, and it makes no progress")


def check(ctx: Context) -> Iterator[Finding]:
    if not ctx.bounded or not ctx.two_samples:
        return
    explained: set[int] = set()
    for s in ctx.stalled_chains:
        explained.update(s.chain.pids)
        explained.update(s.blockers)
    window = ctx.snapshot.sample_window
    seen: set[int] = set()
    for h in ctx.log_healths:
        if not h.alarming(ctx.options.stale_after):
            continue
        writers = tuple(w for w in h.writers if w in ctx.scope and w not in seen)
        if not writers:
            continue
        job = {w for w in writers if w in ctx.tree.by_pid} | {d.pid for w in writers for d in ctx.tree.descendants(w)}
        if job & explained:
            continue  # a wait chain through the job says what it waits for (do-wait-orphan and the others)
        procs = [ctx.tree.by_pid[p] for p in sorted(job)]
        if any(p.state not in ("S", "I") for p in procs):
            continue  # running, stopped, D state or a zombie: other rules, or it works
        if any(pid not in ctx.progress or ctx.progress[pid].active for pid in job):
            continue  # something in the job moved: it works without logging (a long step)
        if any(ctx.graph.kind(ctx.tree.by_pid[w]) not in UNFOLLOWABLE for w in writers):
            continue  # a socket, a pipe, a terminal, a poll loop...: the rules for those say it, or it idles by design
        if all(ctx.quiet_server(w) or ctx.serves_in_a_thread(w) for w in writers):
            # a launcher joining the thread that accepts (an idle JVM), a Python service joining its
            # listener thread: a server nobody asks; missing-logs' warning says the log is quiet
            continue
        seen.update(writers)
        if ctx.timer_sleepers(tuple(sorted(job)), flow=True):
            # a job asleep on timers wakes by itself (time.sleep(3600), a back-off): it read STALLED on
            # its quiet log alone (found by a helper); missing-logs' warning says so
            continue
        first = ctx.tree.by_pid[writers[0]]
        where = first.wchan if isinstance(first.wchan, str) and first.wchan not in ("", "0") else "the kernel"
        age = f" for {h.age:.0f}s" if h.age is not None else ""
        ev = [Evidence(f"log {h.log.path}", f"{h.state}{age}; held open for writing by {ctx.proc_label(writers[0])}")]
        quiet = f"no CPU, I/O or context switch over the {window:.1f}s between samples"
        ev += [
            Evidence("/proc/stat", f"{ctx.proc_label(p.pid)}: state {p.state}, wchan {p.wchan}, {quiet}")
            for p in procs[:6]
        ]
        ev += stack_evidence(ctx, tuple(p.pid for p in procs))
        others = f" (and {len(job) - 1} more of the job)" if len(job) > 1 else ""
        yield META.finding(
            f"{first.comm} ({first.pid}){others} is alive but makes no progress: asleep in {where}, its log "
            f"{h.log.path} silent{age}",
            tuple(sorted(job)),
            ev,
            f"nothing vastprobe can follow says what {first.comm} ({first.pid}) waits for (a lock or condition "
            f"inside it, a sleep that does not end, a request with no answer): see where it is "
            f"({stack_command(ctx, first.pid)}), then fix that, or kill {first.pid} and restart the job",
        )


RULE = Rule(META, check)
