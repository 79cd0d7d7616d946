"""VP115 deadlock: processes that wait on each other in a cycle — two flock holders each waiting
for the other's lock, a parent writing into a full pipe while its child writes into a full pipe
the parent should be reading (the classic `subprocess` deadlock), a process reading a pipe whose
only writer is itself. Nothing in the cycle can move first; a timeout or a kill must break it.

Cycles are found in the wait-for graph; edges inferred from poll() never make one (an idle
interactive client and its server wait on each other by design), nor does a loop through a process
with another live thread, which can still do its part (git's fetch and index-pack). One sample is one instant, and
the probe reads wait channels before fd tables: a shell between pipe() and fork() in a loop of
command substitutions holds both ends of the pipe it was reading a moment before. Seen once, a
cycle is a warning; two samples in which nothing in it moved make it critical.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.signal_waiters import waits_for_a_signal
from vastprobe.analysis.waitgraph.edges import Chain
from vastprobe.clock import utc_text
from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import ONE_SAMPLE, Context, Rule, RuleMeta
from vastprobe.rules.chains import chain_text, names, thread_evidence

META = RuleMeta("deadlock", "VP115", "critical", "processes wait on each other in a cycle")


def check(ctx: Context) -> Iterator[Finding]:
    for cycle in ctx.graph.cycles:
        members = cycle.pids[:-1]
        if not any(p in ctx.scope for p in members):
            continue
        if ctx.two_samples and any(ctx.progress[p].moved for p in members if p in ctx.progress):
            continue  # something in it moved: a cycle of waits that is still being served
        if len(members) == 1 and cycle.edges and cycle.edges[0].kind == "fifo":
            continue  # a named pipe: anyone may open it by its path (a listener holds it read-write)
        ev = _loop_evidence(ctx, cycle)
        what = ", ".join(sorted({e.kind for e in cycle.edges}))
        signals = _signal_pipe(ctx, cycle)
        if signals:
            if ctx.options.explicit_scope:
                yield _signal_waiter(ctx, cycle, ev, signals)
            continue
        if len(members) == 1:
            summary = f"{ctx.proc_label(members[0])} waits on {cycle.edges[0].what}: only it can end that wait"
        else:
            summary = f"{names(ctx, members)} wait on each other in a cycle ({what})"
        feeder = _feeder(ctx, cycle) or _unread_output(ctx, cycle)
        special = None
        if feeder is not None:
            summary, special = feeder
        lost = _lost_writer(ctx, cycle)
        if lost is not None:  # not a deadlock of its own: the other writer is dead
            summary, lost_hint = lost
            yield META.finding(summary, members, ev, lost_hint, severity="error", caused_by="oom-killed-child")
            continue
        hint = (
            special
            or _stdin_hint(ctx, cycle)
            or (
                "nothing in the cycle can move first: kill one of them (the one that should have closed or released "
                "first), then fix the order of operations (read both pipes concurrently, take locks in one order)"
            )
        )
        if not ctx.two_samples:
            yield META.finding(
                summary + ONE_SAMPLE,
                members,
                ev,
                "one instant cannot tell a deadlock from a process between two steps (a shell between pipe() and "
                "fork()): run again with a second sample (--sample 1, the default) to confirm; if it holds, " + hint,
                severity="warning",
            )
            continue
        yield META.finding(summary, members, ev, hint)
    yield from _full_pipe_loops(ctx)


def _signal_pipe(ctx: Context, cycle: Chain) -> list[str]:
    """The handlers of a process reading a pipe only it writes, when they can write it: the
    self-pipe trick (`signal.set_wakeup_fd`, a C handler's write()) is how a program waits for a
    signal. None for a worker forked from a threaded parent (its handlers are the parent's)."""
    if len(cycle.pids) != 2 or not cycle.edges or cycle.edges[0].kind != "pipe" or cycle.edges[0].writes:
        return []
    p = ctx.tree.by_pid.get(cycle.pids[0])
    return waits_for_a_signal(p, ctx.tree.by_pid.get(p.ppid)) if p is not None else []


def _signal_waiter(ctx: Context, cycle: Chain, ev: list[Evidence], signals: list[str]) -> Finding:
    pid = cycle.pids[0]
    summary = (
        f"{ctx.proc_label(pid)} waits on {cycle.edges[0].what} that only it writes, and catches {', '.join(signals)}: "
        "it waits for a signal (the self-pipe trick: its handler writes the pipe)"
    )
    ev = [*ev, Evidence("/proc/status", f"{pid} has handlers for {', '.join(signals)} (SigCgt)")]
    hint = "if it should be working, only a signal will wake it: see which one it waits for, and who should send it"
    return META.finding(summary, (pid,), ev, hint, severity="info")


def _loop_evidence(ctx: Context, loop: Chain) -> list[Evidence]:
    """The loop as a chain, then what each of its edges says."""
    return [
        Evidence("wait cycle", chain_text(ctx, loop)),
        *thread_evidence(ctx, loop.pids),
        *(e for edge in loop.edges for e in edge.evidence),
    ]


def _full_pipe_loops(ctx: Context) -> Iterator[Finding]:
    """The subprocess deadlock in a program with another thread (a heartbeat, a progress bar): the
    other thread could drain a pipe, so it is a warning, and only after two samples in which
    nothing in the loop moved."""
    if not ctx.two_samples:
        return
    for loop in ctx.graph.full_pipe_loops:
        members = loop.pids[:-1]
        if not any(p in ctx.scope for p in members):
            continue
        if any(ctx.progress[p].moved for p in members if p in ctx.progress):
            continue
        ev = _loop_evidence(ctx, loop)
        ev.insert(1, Evidence("threads", loop.open_loop or ""))
        yield META.finding(
            f"{names(ctx, members)} each write into a full pipe the other should read, and nothing moved; "
            f"unless another thread drains one ({loop.open_loop})",
            members,
            ev,
            "the subprocess deadlock (Popen(stdin=PIPE, stdout=PIPE) written without reading) if no thread of "
            "theirs is meant to read these pipes: kill one, and read and write concurrently (communicate()); if a "
            "thread is meant to read, it has stopped doing so",
            severity="warning",
        )


def _lost_writer(ctx: Context, cycle: Chain) -> tuple[str, str] | None:
    """A process reading a pipe whose only other writer was its child, killed by the OOM killer: the
    write end it still holds itself is what keeps it from EOF (a multiprocessing.Queue or a
    DataLoader's result queue whose worker died: get() waits forever). The kill is the cause."""
    if len(cycle.pids) != 2 or not cycle.edges or cycle.edges[0].kind not in ("pipe", "fifo"):
        return None
    edge = cycle.edges[0]
    if edge.writes:
        return None
    reader = edge.waiter
    kills = [m for m in ctx.oom_matches if m.relevant and m.loser == reader]
    if not kills:
        return None
    e = kills[-1].event
    when = utc_text(e.wall_time, "%H:%M:%S UTC", "at an unknown time") if e.wall_time else "at an unknown time"
    summary = (
        f"{ctx.proc_label(reader)} waits on {edge.what} whose writer, its child {e.comm} (host pid {e.pid}), was "
        f"OOM-killed {when}; only {reader} itself still holds the write end, so no EOF will come"
    )
    hint = (
        f"the OOM kill is the cause: {reader} will wait forever (a bare Queue.get() or a pipe read does not notice a "
        "dead worker; multiprocessing.Pool and concurrent.futures do, DataLoader raises after its timeout). Give the "
        f"job more memory or smaller batches, kill {reader} or restart the job, and read with a timeout that checks "
        "the workers are alive"
    )
    return summary, hint


def _feeder(ctx: Context, cycle: Chain) -> tuple[str, str] | None:
    """A thread of a child writes a full pipe that only its parent reads, and the parent waits for
    the child to exit: multiprocessing's Queue feeder thread (put() before join()), a DataLoader
    worker's result queue. The child cannot exit until its feeder has flushed."""
    for i, edge in enumerate(cycle.edges):
        if edge.thread is None or edge.kind not in ("pipe", "fifo") or not edge.writes:
            continue
        waiter = cycle.edges[i - 1]  # the edge into this process: its reader waiting for it to end
        if waiter.kind != "child" or set(edge.holders) != {waiter.waiter}:
            continue
        child, parent = ctx.tree.by_pid.get(edge.waiter), ctx.tree.by_pid.get(waiter.waiter)
        if child is None or parent is None:
            continue
        thread = next((t for t in child.threads_detail if t.tid == edge.thread), None)
        tname = f"thread {edge.thread}" + (f" ({thread.comm})" if thread and thread.comm else "")
        summary = (
            f"{parent.comm} ({parent.pid}) waits for {child.comm} ({child.pid}) to exit, and {child.pid}'s {tname} "
            f"writes {edge.what.split(' (')[0]} that only {parent.pid} reads: neither can go on"
        )
        hint = (
            f"a child cannot exit while its thread still has data to flush into a pipe its parent is not reading: "
            f"multiprocessing.Queue.put() in the child and join() before get() in the parent (or a DataLoader worker "
            f"whose results nobody collects). Kill {child.pid} to free {parent.pid} now (the queued data is lost); "
            "fix the order: get() every result before join(), or use a Manager queue / cancel_join_thread()"
        )
        return summary, hint
    return None


def _unread_output(ctx: Context, cycle: Chain) -> tuple[str, str] | None:
    """A parent's thread waits for its child to exit while its event loop, watching nothing but its
    own wake-up channel, never reads the pipe the child fills: asyncio's `await proc.wait()` before
    reading `proc.stdout` (the Python docs warn of it)."""
    for i, edge in enumerate(cycle.edges):
        if edge.kind != "child" or edge.thread is None:
            continue
        out = cycle.edges[(i + 1) % len(cycle.edges)]  # the child's wait: writing a pipe only the parent reads
        if out.kind not in ("pipe", "fifo") or not out.writes or set(out.holders) != {edge.waiter}:
            continue
        parent, child = ctx.proc_label(edge.waiter), ctx.proc_label(out.waiter)
        summary = (
            f"{parent} waits for {child} to exit, and {child} is blocked writing {out.what.split(' (')[0]}, which "
            f"{parent}'s event loop does not watch: neither can go on"
        )
        hint = (
            f"{parent} waits for its child before reading its output (asyncio: `await proc.wait()` with stdout=PIPE, "
            f"while the child writes more than a pipe holds). Kill {out.waiter} to free {edge.waiter} now (its output "
            "is lost); fix the order: `await proc.communicate()`, or read the output before waiting"
        )
        return summary, hint
    return None


def _stdin_hint(ctx: Context, cycle: Chain) -> str | None:
    """The commonest cycle of all has a precise fix: a process reads its stdin, a pipe whose writer is
    an ancestor waiting for its children (Popen(stdin=PIPE) never written or closed, then wait())."""
    for edge in cycle.edges:
        if edge.kind != "pipe" or edge.fd != 0 or len(edge.holders) != 1:
            continue
        writer = ctx.tree.by_pid.get(edge.holders[0])
        if writer is None or not ctx.graph.waits_for_children(writer):  # wait(), or asyncio's `await proc.wait()`
            continue
        if not ctx.tree.in_subtree(edge.waiter, writer.pid):
            continue
        reader = ctx.proc_label(edge.waiter)
        return (
            f"{reader} reads its stdin, a pipe only {ctx.proc_label(writer.pid)} can write, and that one waits for "
            f"its children: a stdin=PIPE never written or closed. Kill {edge.waiter} to free the rest now; start "
            "the job with stdin=DEVNULL (or `< /dev/null`), or close the pipe before waiting"
        )
    return None


RULE = Rule(META, check)
