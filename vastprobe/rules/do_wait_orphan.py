"""VP101 do-wait-orphan: a watched process waits for children, and that wait cannot end by itself.

Followed down the wait chain to its end, the blocker is either
- a child reading a pipe whose only writers are outside the waiter's subtree: an orphan
  (re-parented to init or a subreaper) inherited the pipe and will never close it; or
- a process that made no progress over the sample window while other evidence says work should
  be happening: an OOM kill in the job, a silent or missing log, an idle GPU.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.gpu import gpu_expected, idle_gpus
from vastprobe.analysis.waitchain import WaitChain, wait_chains, waits_on_children
from vastprobe.analysis.wchan_families import is_pipe_read
from vastprobe.model import Evidence, Finding, Process, Unavailable
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("do-wait-orphan", "VP101", "error", "a process waits on children whose work cannot finish by itself")


def _link(ctx: Context, p: Process) -> str:
    pr = ctx.progress[p.pid]
    cpu = f"{pr.cpu_ticks / ctx.snapshot.host.clk_tck:.2f}s cpu" if pr.sampled else "not sampled"
    return f"{p.pid} {p.comm} [{p.state} {p.wchan if not isinstance(p.wchan, Unavailable) else '?'}, {cpu}]"


def _pipe_orphans(ctx: Context, waiter: Process, end: Process) -> list[tuple[int, int, list[int]]]:
    """(pipe inode, fd, writer pids) for pipes `end` reads whose writers are all outside the waiter's tree."""
    if isinstance(end.wchan, Unavailable) or not is_pipe_read(end.wchan) or isinstance(end.fds, Unavailable):
        return []
    out = []
    for e in end.fds:
        ino = e.pipe_inode
        if ino is None or e.mode not in ("r", "rw"):
            continue
        writers = ctx.pipes.writers(ino, besides=end.pid)
        if writers and all(not ctx.tree.in_subtree(w.pid, waiter.pid) for w in writers):
            out.append((ino, e.fd, sorted({w.pid for w in writers})))
    return out


def _stall_evidence(ctx: Context, chain_pids: set[int], waiter: Process) -> tuple[list[Evidence], str | None]:
    """Why work should be happening, and the finding this one follows from (if any)."""
    ev: list[Evidence] = []
    cause = None
    for m in ctx.oom_matches:
        if m.loser is not None and (m.loser in chain_pids or ctx.tree.in_subtree(m.loser, waiter.pid)):
            ev.append(Evidence("oom-killed-child", f"{m.event.comm} was OOM-killed; {m.how}"))
            cause = "oom-killed-child"
    for h in ctx.log_healths:
        if h.state in ("stale", "absent", "deleted-open") or (
            h.state == "empty" and (h.age or 0) > ctx.options.stale_after
        ):
            ev.append(Evidence("missing-logs", f"{h.log.path}: {h.state}" + (f", {h.age:.0f}s old" if h.age else "")))
    expected, why = gpu_expected(ctx.snapshot, ctx.scope, ctx.options.expect_gpu)
    g = ctx.snapshot.gpus
    if expected and g.present and g.error is None:
        for idle in idle_gpus(ctx.snapshot):
            ev.append(Evidence("idle-gpu", f"GPU {idle.index} idle ({why})"))
    return ev, cause


def _top_waiters(ctx: Context) -> list[Process]:
    out = []
    for p in ctx.in_scope():
        if not waits_on_children(p, ctx.tree):
            continue
        parent = ctx.tree.by_pid.get(p.ppid)
        if parent is not None and parent.pid in ctx.scope and waits_on_children(parent, ctx.tree):
            continue  # reported as part of the parent's chain
        out.append(p)
    return out


def _chain_text(ctx: Context, chain: WaitChain) -> str:
    return " -> ".join(_link(ctx, ctx.tree.by_pid[pid]) for pid in chain.pids)


def check(ctx: Context) -> Iterator[Finding]:
    reported: set[int] = set()
    for f in _waiter_findings(ctx):
        reported.update(f.pids)
        yield f
    yield from _orphan_pipe_readers(ctx, reported)


def _orphan_pipe_readers(ctx: Context, reported: set[int]) -> Iterator[Finding]:
    """The same trap without a wait: a process reads, to EOF, a pipe that only an orphan still holds
    (`x=$(sh -c 'daemon & echo ready')` in an entrypoint). Only orphans count here (re-parented to
    PID 1), and only when the reader made no progress, so a pipeline's live producer never does."""
    for p in ctx.in_scope():
        if p.pid in reported or p.state != "S" or waits_on_children(p, ctx.tree):
            continue
        if ctx.two_samples and ctx.progress[p.pid].moved:
            continue
        for ino, fd, writers in _pipe_orphans(ctx, p, p):
            if not all(ctx.tree.by_pid[w].ppid <= 1 for w in writers):
                continue
            names = ", ".join(ctx.proc_label(w) for w in writers)
            ev = [Evidence("/proc/wchan", f"{p.pid} ({p.comm}) blocked in {p.wchan}")]
            ev.append(Evidence("/proc/fd", f"{p.pid} ({p.comm}) reads pipe:[{ino}] on fd {fd}"))
            ev += [
                Evidence("/proc/fd", f"pipe:[{ino}] writer {w} ({ctx.tree.by_pid[w].comm}), re-parented to PID 1")
                for w in writers
            ]
            yield META.finding(
                f"{p.comm} ({p.pid}) waits for EOF on a pipe held open only by the orphan {names}",
                [p.pid, *writers],
                ev,
                f"the orphan inherited the pipe and will never close it: kill {names}; redirect background jobs' output (`cmd > log 2>&1 &`)",
            )
            break


def _waiter_findings(ctx: Context) -> Iterator[Finding]:
    for waiter in _top_waiters(ctx):
        for chain in wait_chains(waiter, ctx.tree):
            end = ctx.tree.by_pid[chain.end]
            if end.state in ("T", "t", "D", "Z"):
                continue  # stopped-child / d-state say it better
            orphans = _pipe_orphans(ctx, waiter, end)
            if orphans:
                ino, fd, writers = orphans[0]
                names = ", ".join(ctx.proc_label(w) for w in writers)
                ev = [Evidence("wait chain", _chain_text(ctx, chain))]
                ev.append(Evidence("/proc/fd", f"{end.pid} ({end.comm}) reads pipe:[{ino}] on fd {fd}"))
                for w in writers:
                    wp = ctx.tree.by_pid[w]
                    parent = ctx.tree.by_pid.get(wp.ppid)
                    ev.append(
                        Evidence(
                            "/proc/fd",
                            f"pipe:[{ino}] writer {w} ({wp.comm}), parent {wp.ppid} ({parent.comm if parent else '?'}), outside {waiter.pid}'s tree",
                        )
                    )
                yield META.finding(
                    f"{waiter.comm} ({waiter.pid}) waits on {end.comm} ({end.pid}), which reads a pipe held open only by the orphan {names}",
                    [*chain.pids, *writers],
                    ev,
                    f"the orphan keeps pipe:[{ino}] open so {end.comm} never sees EOF: kill {names}, and start background jobs with their output redirected",
                )
                continue
            if not ctx.two_samples:
                continue
            if any(ctx.progress[pid].moved for pid in chain.pids[1:]):
                continue
            stall_ev, cause = _stall_evidence(ctx, set(chain.pids), waiter)
            if not stall_ev:
                continue  # idle but nothing says it should be busy: a healthy wait
            ev = [Evidence("wait chain", _chain_text(ctx, chain))]
            ev.append(
                Evidence("progress", f"no CPU, I/O or state change in the chain over {ctx.snapshot.sample_window:.1f}s")
            )
            ev += stall_ev
            because = " after an OOM kill in the job" if cause == "oom-killed-child" else ""
            yield META.finding(
                f"{waiter.comm} ({waiter.pid}) waits on {end.comm} ({end.pid}), which makes no progress{because}",
                chain.pids,
                ev,
                f"{end.comm} will not finish by itself: fix the cause above, then kill {end.pid} or restart the job",
                caused_by=cause,
            )


RULE = Rule(META, check)
