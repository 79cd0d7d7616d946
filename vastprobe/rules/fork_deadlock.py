"""VP127 fork-deadlock: a single-threaded process asleep on a private futex with no timeout. No
thread of its own is left to release the lock, and a private futex cannot be woken from another
process: it waits for ever.

The usual cause is fork() in a multi-threaded program while another thread held a lock (a logging
lock, an allocator's, a `threading.Lock` in a loop): the child gets the locked lock and none of the
threads, so its first acquire never returns (PyTorch's DataLoader workers with the `fork` start
method, a `multiprocessing.Pool` started beside a busy thread). /proc/PID/syscall gives the op and
the timeout: a shared futex (a `multiprocessing` semaphore in shared memory) or one with a timeout
is no such proof. The state itself is the proof, so one sample is enough; with two, the process
must also have done nothing over the window.

A signal handler can release such a lock: a program that runs its own (not forked from a threaded
parent) and catches SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD or SIGIO is waiting to be told something
(`threading.Event().wait()`, set by its SIGTERM handler: a service waiting to be stopped), a note
for a named job and nothing otherwise. A worker forked from a threaded parent inherits the parent's
handlers (a trainer's SIGTERM checkpoint handler), so for it they prove nothing.

The same holds of a *shared* futex where no process that shares it is left: a single-threaded
program waiting on a `multiprocessing` lock or semaphore whose children have all exited (zombies it
never reaped, as it waits) and that no other process runs: the child that held it died (SIGKILL,
the OOM killer, a crash) and nothing can release it. It read HEALTHY on a whole host.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.signal_waiters import (
    CTRL_C,
    STOP_SIGNAL,
    forked_from_threaded,
    waits_for_a_signal,
    waits_for_ctrl_c,
)
from vastprobe.analysis.waitgraph.edges import WaitEdge, private_untimed_wait, shared_untimed_wait
from vastprobe.model import Evidence, Finding, Process
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import asleep_throughout, is_python, pool_children, stack_command, still_evidence

META = RuleMeta(
    "fork-deadlock", "VP127", "error", "a single-threaded process waits on a lock no thread of its own can release"
)


def check(ctx: Context) -> Iterator[Finding]:
    for p in ctx.in_scope():
        call = private_untimed_wait(p.syscall)
        if call is None and (shared := _orphaned_shared_wait(ctx, p)) is not None:
            yield shared
        if call is None or p.threads != 1 or not asleep_throughout(ctx, p):
            continue
        parent = ctx.tree.by_pid.get(p.ppid)
        ev = [
            Evidence("/proc/syscall", f"{ctx.proc_label(p.pid)}: {call}"),
            Evidence("/proc/status", f"{p.pid} has 1 thread: none left to release the lock"),
        ]
        ev += still_evidence(ctx)
        # forked without exec (its parent's command line): a process exec'd, then orphaned to a
        # multi-threaded init, was told it deadlocked at fork (found by a helper)
        forked = forked_from_threaded(p, parent)
        signals = waits_for_a_signal(p, parent)
        if not signals and waits_for_ctrl_c(p, ctx.tree.kids(p.pid)):
            signals = [CTRL_C]
        if signals:
            if ctx.options.explicit_scope:
                yield _signal_waiter(ctx, p, call, signals)
            continue
        if parent is not None:
            ev.append(
                Evidence(
                    "parent",
                    # "held the lock when it forked" as a fact was false of a child whose pool's threads
                    # simply did not survive the fork, no lock held (found by a helper)
                    f"forked by {ctx.proc_label(parent.pid)}, which has {parent.threads} thread(s), without exec: "
                    "none of them came with it"
                    if forked
                    else f"its parent {ctx.proc_label(parent.pid)} runs another program: it was not forked from it "
                    "without exec",
                )
            )
        waiting = [
            (q.pid, e) for q in ctx.in_scope() if q.pid != p.pid for e in ctx.graph.edges(q.pid) if p.pid in e.holders
        ]
        ev += [
            Evidence("waits on it", f"{ctx.proc_label(w)} waits on {e.what}, held by {p.pid}") for w, e in waiting[:4]
        ]
        who = f"{p.comm} ({p.pid})"
        if forked and parent is not None:
            # "at fork" is likely, not known: a gunicorn sync worker whose handler took its lock twice,
            # requests after it was forked, was told it deadlocked at fork (found by a helper)
            summary = (
                f"{who} is deadlocked, likely at fork: its only thread waits on a lock that a thread of its parent "
                f"{parent.comm} ({parent.pid}) held when it forked, one it took twice, or one only a thread that did not "
                "come with the fork would release; nothing can release it"
            )
        else:
            summary = (
                f"{who} waits for ever on a lock no thread of its own can release (a lock it holds itself, one "
                "held by another thread of its parent when it was forked, or one a thread that exited was to "
                "release)"
            )
        if waiting:
            summary += f"; {', '.join(ctx.proc_label(w) for w, _e in waiting[:2])} wait(s) on it"
        if not forked:
            # not forked from a threaded parent: the thread that would have released it is gone (a
            # producer or notifier that died with an exception); the fork advice misled (found by a helper)
            hint = (
                f"kill {p.pid}: it cannot go on. No thread of it is left to release the lock or signal the "
                "condition it waits on: a thread that exited (a producer or notifier that died with an "
                f"exception; see its log), or a lock it took twice; see where it waits: {stack_command(ctx, p.pid)}"
            )
            pids = (p.pid, *(w for w, _e in waiting))
        else:
            python = is_python(ctx, p.pid) or (parent is not None and is_python(ctx, parent.pid))
            hint = (
                f"kill {p.pid}: it cannot go on. Then start workers without fork in a threaded program"
                + (
                    ": the `spawn` or `forkserver` start method (multiprocessing.set_start_method('spawn'), "
                    "DataLoader(multiprocessing_context='spawn')), or no lock held by another thread across fork"
                    if python
                    else " (posix_spawn, or fork before any thread starts), or register at-fork handlers "
                    "(pthread_atfork) that take and release the lock"
                )
                + f"; if it worked after it was forked (a server's worker that served requests), it took a lock "
                f"twice instead; see where it waits: {stack_command(ctx, p.pid)}"
            )
            pids = (p.pid, *([parent.pid] if parent is not None else []), *(w for w, _e in waiting if w != p.ppid))
        yield META.finding(summary, pids, ev, hint)


def _orphaned_shared_wait(ctx: Context, p: Process) -> Finding | None:
    """A single-threaded process on a shared futex with no timeout, which only its own children could
    share (no other process runs its program: none forked from it, nor its parent), every one of them
    exited: a zombie it has not reaped, as it waits. A `multiprocessing.Lock` whose holder was killed
    read HEALTHY on a whole host, and STALLED on its quiet log alone for a named job, the lock unsaid.
    Named semaphores another program opens by name are not `multiprocessing`'s (it unlinks them or
    names them at random), so the program's own children are taken as all its sharers."""
    call = shared_untimed_wait(p.syscall)
    if call is None or p.threads != 1 or not p.cmdline or not asleep_throughout(ctx, p):
        return None
    kids = _sharers(ctx, p)
    dead = [k for k in kids if k.state == "Z"]
    if not dead or len(dead) < len(kids):
        return None  # no child known to have shared it and died, or one alive that may release it
    if any(q.cmdline == p.cmdline and q.pid != p.pid and q.state != "Z" for q in ctx.snapshot.processes):
        return None  # a process forked from it (or its parent, forked the same way) may share it
    parent = ctx.tree.by_pid.get(p.ppid)
    ev = [
        Evidence("/proc/syscall", f"{ctx.proc_label(p.pid)}: {call}"),
        Evidence("/proc/status", f"{p.pid} has 1 thread: none of its own to release it"),
        *(Evidence("children", f"{ctx.proc_label(k.pid)} exited: a zombie {p.pid} has not reaped") for k in dead[:4]),
        Evidence("processes", f"no other process runs {p.comm}'s command line: none forked from it is left"),
        *still_evidence(ctx),
    ]
    who = f"{p.comm} ({p.pid})"
    signals = waits_for_a_signal(p, parent)
    if signals:
        if not ctx.options.explicit_scope:
            return None
        summary = (
            f"{who} waits on a lock it shared with its children, which have all exited, and catches "
            f"{', '.join(signals)}: only a signal can wake it"
        )
        hint = f"if {p.comm} should be working, nothing will wake it but a signal: see where it waits ({stack_command(ctx, p.pid)})"
        return META.finding(summary, (p.pid,), ev, hint, "info")
    names = ", ".join(ctx.proc_label(k.pid) for k in dead[:2]) + (" and others" if len(dead) > 2 else "")
    summary = (
        f"{who} waits for ever on a lock it shares only with its children, and every one of them has exited "
        f"({names}): none is left to release it"
    )
    hint = (
        f"kill {p.pid}: it cannot go on. A child that dies holding a multiprocessing lock or semaphore (killed, "
        "OOM-killed: see the kernel log, or crashed) never releases it; acquire with a timeout, or have the "
        f"parent watch its children (Process.sentinel, a Pool); see where it waits: {stack_command(ctx, p.pid)}"
    )
    return META.finding(summary, (p.pid, *(k.pid for k in dead[:8])), ev, hint)


def _sharers(ctx: Context, p: Process) -> list[Process]:
    """The children that may share `p`'s locks (a forkserver's children in its place), not
    multiprocessing's resource tracker: the `spawn` method starts it beside the workers; it unlinks
    names at exit, never posts a lock."""
    return [k for k in pool_children(ctx, p) if not any("multiprocessing.resource_tracker" in a for a in k.cmdline[:4])]


def _signal_waiter(ctx: Context, p: Process, call: str, signals: list[str]) -> Finding:
    """A lock only a signal handler can release, in a program with handlers of its own: a note; but a
    server with connections in its accept queue that it left there over the window is no service
    waiting to be stopped: a deadlocked uvicorn named alone read HEALTHY while its queued client read
    STALLED (found by a helper)."""
    ev = [
        Evidence("/proc/syscall", f"{ctx.proc_label(p.pid)}: {call}"),
        Evidence("/proc/status", f"{p.pid} has 1 thread, and handlers for {', '.join(signals)} (SigCgt)"),
    ]
    queued = _undrained_listener(ctx, p)
    if queued is not None:
        sock, n = queued
        summary = (
            f"{p.comm} ({p.pid}) waits on a lock no thread of its own can release, and {n} connection(s) wait in "
            f"the accept queue of {sock}, which it holds and did not drain over the window: a server stuck, not a "
            "service waiting to be stopped"
        )
        ev.append(Evidence("/proc/net/tcp", f"{sock} LISTEN, {n} connection(s) queued, none accepted over the window"))
        hint = f"kill {p.pid} (restart the server): its clients wait for ever; see where it waits: {stack_command(ctx, p.pid)}"
        return META.finding(summary, (p.pid,), ev, hint, "error")
    client = _waiting_client(ctx, p) if ctx.two_samples and signals == [STOP_SIGNAL] else None
    if client is not None:
        q, e = client
        summary = (
            f"{p.comm} ({p.pid}) waits on a lock no thread of its own can release, and {ctx.proc_label(q)} waits on "
            f"{e.what}, which it holds: a server stuck, not a service waiting to be stopped"
        )
        ev.append(Evidence("waits on it", f"{ctx.proc_label(q)} waits on {e.what}, held by {p.pid}"))
        hint = f"kill {p.pid} (restart the server): its clients wait for ever; see where it waits: {stack_command(ctx, p.pid)}"
        return META.finding(summary, (p.pid, q), ev, hint, "error")
    summary = (
        f"{p.comm} ({p.pid}) waits on a lock no thread of its own can release, and catches {', '.join(signals)}: "
        "it waits for a signal (a service waiting to be stopped looks like this)"
    )
    hint = (
        f"if {p.comm} should be working, nothing will wake it but a signal: see where it waits "
        f"({stack_command(ctx, p.pid)})"
    )
    return META.finding(summary, (p.pid,), ev, hint, "info")


def _waiting_client(ctx: Context, p: Process) -> tuple[int, WaitEdge] | None:
    """A process here whose one wait is a connection `p` accepted (where `p` catches SIGTERM alone: any
    other handler may be how it answers): a request it read and never answers (a deadlocked uvicorn
    named alone read HEALTHY while its client waited; found by a helper)."""
    here, _unseen = ctx.graph.connected(p.pid)
    for q in sorted(here - {p.pid})[:64]:
        # its one wait (a blocked read, curl's poll of its only connection), not one fd of a poll over
        # several (a test runner polling its child's pipes beside a connection it keeps)
        edges = ctx.graph.edges(q)
        e = edges[0] if len(edges) == 1 else None
        if e is None or e.kind != "tcp" or p.pid not in e.holders or e.socket is None:
            continue
        w = ctx.tree.by_pid.get(q)
        if e.inferred and (w is None or w.threads > 1 or ctx.tree.kids(q)):
            # "polls its only connection" is inferred: a process polling its children's pipes beside a
            # connection it keeps reads so too (the test runner of this very case, under xdist: a CI run)
            continue
        # a client of `p`: on a connection `p` accepted (not the echo server `p` is itself a client of,
        # reading its next line; not a socketpair shared with a forked worker; found by a helper)
        if ctx.graph.accepted(p, e.socket.remote):
            return q, e
    return None


def _undrained_listener(ctx: Context, p: Process) -> tuple[str, int] | None:
    """A listening socket `p` holds with connections queued, where two samples say it did nothing."""
    if not ctx.two_samples:
        return None
    sock = next((s for s in ctx.graph.listeners(p) if s.recv_queue), None)
    return (sock.local, sock.recv_queue) if sock is not None and sock.recv_queue else None


RULE = Rule(META, check)
