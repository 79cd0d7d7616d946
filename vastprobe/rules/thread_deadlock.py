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
from dataclasses import dataclass

from vastprobe.analysis.signal_waiters import waits_for_a_signal
from vastprobe.analysis.waitgraph.edges import main_task, private_untimed_wait
from vastprobe.analysis.waitgraph.graph import CAUGHT_AWAKE_CPU_SHARE
from vastprobe.model import Evidence, Finding, Process, Syscall
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import (
    LOCKED_HANDLERS_READINGS,
    asleep_throughout,
    locked_handlers_hint,
    names,
    stack_command,
    still_evidence,
)

META = RuleMeta(
    "thread-deadlock", "VP129", "error", "every thread of a process waits on a lock no other thread is awake to release"
)


@dataclass(frozen=True)
class ThreadWaits:
    """Every thread of a process, read, in one of two waits: on a private futex with no timeout (a
    lock only a thread of its own can release), or asleep on a timer (it wakes by itself)."""

    locked: tuple[tuple[str, str], ...]  # (thread, futex op)
    timers: tuple[str, ...]  # threads asleep on a timer
    main_locked: bool  # the main thread is among the locked
    loops: int = 0  # of the locked, event loops only a thread of their own can wake


def _thread_waits(ctx: Context, p: Process) -> ThreadWaits | None:
    """How every thread waits, or None when one does something else or was not read (a thread the
    probe did not read may be the one that releases the others)."""
    tasks = ctx.graph.all_tasks(p)
    if tasks is None:
        return None
    locked, timers, loops = [], [], 0
    for t in tasks:
        call = private_untimed_wait(t.syscall)
        if call is not None and t.state == "S":
            locked.append((t.who, call))
        elif t.state == "S" and ctx.graph.sealed_loop(p, t, children=False):
            # an event loop only a thread of its own can wake (its self-socket): a coroutine holding a
            # threading.Lock awaits run_in_executor of a function that takes it, and read HEALTHY (found
            # by a helper)
            locked.append((t.who, "epoll_wait with no timeout on its own wake-up channel alone (an event loop)"))
            loops += 1
        elif t.state in ("S", "R") and ctx.graph.task_kind(p, t) == "sleep":
            # R: caught as it woke, its wait channel read just after naming its timer again (a heartbeat
            # woken under load is runnable for a while; the deadlock beside it read HEALTHY in CI)
            timers.append(t.who)
        else:
            return None
    return ThreadWaits(tuple(locked), tuple(timers), any(t == tasks[0].who for t, _call in locked), loops)


def _lock_evidence(locked: tuple[tuple[str, str], ...]) -> list[Evidence]:
    ev = [Evidence("/proc/syscall", f"{t}: {call}") for t, call in locked[:4]]
    if len(locked) > 4:
        ev.append(Evidence("/proc/syscall", f"and {len(locked) - 4} more thread(s), each the same"))
    return ev


def _likely(ctx: Context, p: Process) -> Finding | None:
    """Threads waiting on locks with no timeout beside threads that only sleep on timers (a heartbeat,
    a monitor): a sleeper wakes and could release a lock, so nothing proves the deadlock, but nothing
    else is left to. A lock-order deadlock beside a heartbeat thread read HEALTHY (found by a helper). A
    ThreadPoolExecutor's idle workers and its caller, beside the worker whose task sleeps, read the same:
    "likely a deadlock" said too much of it (found by a helper), so the summary says both."""
    waits = _thread_waits(ctx, p)
    if waits is None or len(waits.locked) < 2 or not waits.timers or not waits.main_locked:
        return None
    if waits_for_a_signal(p, ctx.tree.by_pid.get(p.ppid)):
        return None
    locked, timers = waits.locked, waits.timers
    who = f"{p.comm} ({p.pid})"
    ev = [Evidence("/proc/syscall", f"{t}: {call}") for t, call in locked[:4]]
    ev += [Evidence("/proc/wchan", f"{t}: asleep on a timer") for t in timers[:4]]
    others = (
        "the other thread only sleeps on a timer"
        if len(timers) == 1
        else f"the other {len(timers)} only sleep on timers"
    )
    summary = (
        f"{len(locked)} of the {p.threads} threads of {who} wait on locks with no timeout, and {others}: a "
        "deadlock among them beside a heartbeat, or a pool waiting on a task that sleeps (from /proc alike)"
    )
    hint = (
        f"see which locks each thread holds and waits for ({stack_command(ctx, p.pid)}: two locks taken in opposite "
        "orders, a join on a thread that waits for its joiner); if the waits are a pool idle on its queue, nothing "
        "is wrong"
    )
    return META.finding(summary, (p.pid,), ev, hint, "warning")


def _sealed_loop(ctx: Context, p: Process) -> Finding | None:
    """One thread, in an event loop's epoll wait with no timeout whose interest list holds only its own
    wake-up channel (asyncio's self-socket): no other process can write it, no thread of its own is
    left to, and no handler of a signal that would. An asyncio task re-entering an asyncio.Lock, or
    awaiting an Event whose setter died, read HEALTHY (found by a helper)."""
    if p.threads != 1 or not asleep_throughout(ctx, p) or not ctx.graph.sealed_loop(p, main_task(p), children=False):
        return None
    if waits_for_a_signal(p, ctx.tree.by_pid.get(p.ppid)):
        return None  # a service waiting to be told to stop (asyncio's add_signal_handler): at rest
    who = ctx.proc_label(p.pid)
    ev = [
        Evidence(
            "/proc/syscall", f"{who}: {p.syscall.name if isinstance(p.syscall, Syscall) else 'epoll'}, no timeout"
        ),
        Evidence("/proc/fdinfo", f"{p.pid}: its epoll interest list holds its own wake-up channel alone"),
        Evidence("/proc/status", f"{p.pid} has 1 thread and catches no signal that would wake it"),
    ]
    ev += still_evidence(ctx)
    summary = (
        f"{who} waits in its event loop for ever: with no timeout, on nothing but its own wake-up channel, and no "
        "thread or signal handler of its own is left to write it"
    )
    hint = (
        f"a task awaits what no task will ever do (asyncio: an asyncio.Lock taken twice, an Event whose setter "
        f"failed, a future nobody completes); see its stack ({stack_command(ctx, p.pid)}), then kill {p.pid}: "
        "it cannot go on"
    )
    return META.finding(summary, (p.pid,), ev, hint)


def _asleep_but_for_its_loop(ctx: Context, p: Process) -> list[Evidence] | None:
    """The window's lines for a server asleep at every read that did nothing over the window but what
    its accepting loop's timer wakes cost (a CPU tick or two, no I/O, under a fifth of a CPU), or None:
    serve_forever's 0.5 s poll counted a tick 1 read in 10 on a loaded machine, and the server named
    alone read HEALTHY beside the curl it could not answer."""
    if asleep_throughout(ctx, p):
        return still_evidence(ctx)
    pr = ctx.progress.get(p.pid)
    window = ctx.snapshot.sample_window
    if p.state != "S" or any(s.state != "S" for s in p.samples) or pr is None or not pr.sampled or window <= 0:
        return None
    if (
        pr.gone
        or pr.io_bytes
        or pr.state_changed
        or pr.cpu_ticks >= window * ctx.snapshot.host.clk_tck * CAUGHT_AWAKE_CPU_SHARE
    ):
        return None
    return [
        Evidence(
            "progress",
            f"asleep at every read; {pr.cpu_ticks} CPU tick(s) and no I/O over {window:.1f}s: its accepting "
            "loop's timer wakes",
        )
    ]


def _locked_server(ctx: Context, p: Process) -> Finding | None:
    """A threaded server whose every thread but its accepting loop waits on a lock with no timeout,
    while a client here waits on it: named with --pid, a ThreadingHTTPServer whose handler took its lock
    twice read HEALTHY, its client's curl STALLED (found by a helper). A warning, not proof: the loop
    starts a thread for each new request, and that thread may set what the others wait on, as a long
    poll's publish does (ThreadingHTTPServer, Flask and gunicorn handlers waiting on an event read
    STALLED, exit 1, and answered at the next POST; found by a helper). Without a waiting client, an
    idle pool on its queue beside an accept() looks the same: nothing said."""
    window = _asleep_but_for_its_loop(ctx, p) if ctx.graph.handlers_locked(p.pid) else None
    if window is None:
        return None
    clients = ctx.waiting_clients(p.pid)
    if not clients:
        return None
    locked = [(t.who, call) for t in ctx.graph.tasks(p) if (call := private_untimed_wait(t.syscall)) is not None]
    who = ctx.proc_label(p.pid)
    waiting = names(ctx, clients, 3)
    ev = _lock_evidence(tuple(locked))
    ev.append(Evidence("/proc/net", f"{waiting} wait(s) on a connection {who} holds"))
    ev += window
    summary = (
        f"{who} answers none of {waiting}: every thread of it but its accepting loop waits on a lock with no "
        f"timeout, and the loop only accepts new connections ({LOCKED_HANDLERS_READINGS})"
    )
    hint = (
        f"see where each thread waits ({stack_command(ctx, p.pid)}): "
        f"{locked_handlers_hint(f'restart {p.pid}; give clients a timeout')}"
    )
    return META.finding(summary, (p.pid, *clients), ev, hint, "warning")


def check(ctx: Context) -> Iterator[Finding]:
    for p in ctx.in_scope():
        server = _locked_server(ctx, p) if p.threads > 1 else None
        if server is not None:
            yield server
            continue
        if p.threads < 2:
            sealed = _sealed_loop(ctx, p)
            if sealed is not None:
                yield sealed
            continue
        waits = _thread_waits(ctx, p) if asleep_throughout(ctx, p) else None
        if waits is None or waits.timers:
            # not every thread on a lock (or its timer threads moved): at most a likely deadlock
            likely = _likely(ctx, p)
            if likely is not None:
                yield likely
            continue
        who = f"{p.comm} ({p.pid})"
        ev = _lock_evidence(waits.locked)
        ev += still_evidence(ctx)
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
            if not waits.loops
            else f"{who} is deadlocked: all {p.threads} of its threads wait with no timeout, on locks or in an event "
            "loop only its own threads can wake, and none is left awake to wake another"
        )
        hint = (
            f"see which locks each thread holds and waits for ({stack_command(ctx, p.pid)}: two locks taken in "
            f"opposite orders, a join on a thread that waits for its joiner), then kill {p.pid}: it cannot go on"
        )
        yield META.finding(summary, (p.pid,), ev, hint)


RULE = Rule(META, check)
