"""VP129 thread-deadlock: every thread of a process asleep on a private futex with no timeout. A
private futex is woken only by a thread of its own process, and none is left awake to do it: the
threads wait on each other (two locks taken in opposite orders, a join on a thread that waits for
its joiner, a queue nobody is left to feed). No wait edge leads anywhere, so such a host read
HEALTHY.

The probe reads each thread's system call where every task of a process waits on a futex (at
most 64 processes): the op and the timeout are the proof, so one sample is enough; with two, the
process must also have done nothing over the window. A program that catches a wake-up signal and
runs its own (not forked from a threaded parent) may be waiting for that signal: a note for a
named job, as fork-deadlock does.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.signal_waiters import waits_for_a_signal
from vastprobe.analysis.waitgraph.edges import private_untimed_wait
from vastprobe.model import Evidence, Finding, Process
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import asleep_throughout, stack_command

META = RuleMeta(
    "thread-deadlock", "VP129", "error", "every thread of a process waits on a lock no other thread is awake to release"
)


def _waits(ctx: Context, p: Process) -> list[tuple[str, str]] | None:
    """(thread, futex op) for every thread, when each waits on a private futex with no timeout and
    every thread was read; else None."""
    tasks = ctx.graph.all_tasks(p)
    if tasks is None:
        return None  # a thread the probe did not read may be the one that releases the others
    out = []
    for t in tasks:
        call = private_untimed_wait(t.syscall)
        if call is None or t.state != "S":
            return None
        out.append((t.who, call))
    return out


def _beside_timers(ctx: Context, p: Process) -> tuple[list[tuple[str, str]], list[str]] | None:
    """(thread, futex op) of the threads waiting on a private futex with no timeout, and the threads
    asleep on a timer, when those are all of them (every thread read), two or more wait on locks, the
    main thread among them, and one or more sleep; else None."""
    tasks = ctx.graph.all_tasks(p)
    if tasks is None:
        return None
    locked, timers = [], []
    for t in tasks:
        call = private_untimed_wait(t.syscall)
        if call is not None and t.state == "S":
            locked.append((t.who, call))
        elif t.state == "S" and ctx.graph.task_kind(p, t) == "sleep":
            timers.append(t.who)
        else:
            return None
    main = private_untimed_wait(tasks[0].syscall)
    return (locked, timers) if len(locked) >= 2 and timers and main is not None else None


def _likely(ctx: Context, p: Process) -> Finding | None:
    """Threads waiting on locks with no timeout beside threads that only sleep on timers (a heartbeat,
    a monitor): a sleeper wakes and could release a lock, so nothing proves the deadlock, but nothing
    else is left to. A lock-order deadlock beside a heartbeat thread read HEALTHY (found by a helper)."""
    found = _beside_timers(ctx, p)
    if found is None or waits_for_a_signal(p, ctx.tree.by_pid.get(p.ppid)):
        return None
    locked, timers = found
    who = f"{p.comm} ({p.pid})"
    ev = [Evidence("/proc/syscall", f"{t}: {call}") for t, call in locked[:4]]
    ev += [Evidence("/proc/wchan", f"{t}: asleep on a timer") for t in timers[:4]]
    others = (
        "the other thread only sleeps on a timer"
        if len(timers) == 1
        else f"the other {len(timers)} only sleep on timers"
    )
    summary = (
        f"{len(locked)} of the {p.threads} threads of {who} wait on locks with no timeout, and {others}: likely a "
        "deadlock among them (a heartbeat thread wakes, but seldom takes another thread's lock)"
    )
    hint = (
        f"see which locks each thread holds and waits for ({stack_command(ctx, p.pid)}: two locks taken in opposite "
        "orders, a join on a thread that waits for its joiner); if the waits are a pool idle on its queue, nothing "
        "is wrong"
    )
    return META.finding(summary, (p.pid,), ev, hint, "warning")


def check(ctx: Context) -> Iterator[Finding]:
    for p in ctx.in_scope():
        if p.threads < 2:
            continue
        if not asleep_throughout(ctx, p):
            likely = _likely(ctx, p)  # its timer threads moved
            if likely is not None:
                yield likely
            continue
        waits = _waits(ctx, p)
        if waits is None:
            likely = _likely(ctx, p)
            if likely is not None:
                yield likely
            continue
        who = f"{p.comm} ({p.pid})"
        ev = [Evidence("/proc/syscall", f"{t}: {call}") for t, call in waits[:4]]
        if len(waits) > 4:
            ev.append(Evidence("/proc/syscall", f"and {len(waits) - 4} more thread(s), each the same"))
        if ctx.two_samples:
            ev.append(Evidence("progress", f"no CPU, I/O or state change over {ctx.snapshot.sample_window:.1f}s"))
        signals = waits_for_a_signal(p, ctx.tree.by_pid.get(p.ppid))
        if signals:
            if ctx.options.explicit_scope:
                # a warning, not a note: a trainer that checkpoints on SIGTERM catches it too, and its
                # lock-order deadlock read HEALTHY (found by a helper); nothing here tells the two apart
                summary = (
                    f"every thread of {who} waits on a lock with no timeout, and it catches {', '.join(signals)}: "
                    "only a signal wakes it (a service waiting to be stopped looks like this, and so does a "
                    "deadlocked program with a handler of its own, a trainer's checkpoint on SIGTERM)"
                )
                hint = (
                    f"see where each thread waits ({stack_command(ctx, p.pid)}): the main thread in Event.wait() "
                    "for its handler is a service at rest; two locks taken in opposite orders, or a join on a "
                    "thread that waits for its joiner, a deadlock: kill it"
                )
                yield META.finding(summary, (p.pid,), ev, hint, "warning")
            continue
        summary = (
            f"{who} is deadlocked: all {p.threads} of its threads wait on locks with no timeout, and none is left "
            "awake to release another's"
        )
        hint = (
            f"see which locks each thread holds and waits for ({stack_command(ctx, p.pid)}: two locks taken in "
            f"opposite orders, a join on a thread that waits for its joiner), then kill {p.pid}: it cannot go on"
        )
        yield META.finding(summary, (p.pid,), ev, hint)


RULE = Rule(META, check)
