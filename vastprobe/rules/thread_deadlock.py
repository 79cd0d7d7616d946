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


def check(ctx: Context) -> Iterator[Finding]:
    for p in ctx.in_scope():
        if p.threads < 2 or not asleep_throughout(ctx, p):
            continue
        waits = _waits(ctx, p)
        if waits is None:
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
                summary = (
                    f"every thread of {who} waits on a lock with no timeout, and it catches {', '.join(signals)}: "
                    "it waits for a signal (a service waiting to be stopped looks like this)"
                )
                hint = f"if {p.comm} should be working, only a signal will wake it: see where ({stack_command(ctx, p.pid)})"
                yield META.finding(summary, (p.pid,), ev, hint, "info")
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
