"""VP101 do-wait-orphan: a watched process waits on children (or reads a pipe to EOF), and that
wait cannot end by itself.

Read from the wait-for graph (analysis/stalls.py), one finding per waiter:
- a pipe or FIFO the chain reads whose only writers are orphans: processes re-parented to an
  init (host PID 1, a PID namespace's init, a subreaper) that are neither the reader's ancestors
  nor its siblings. They inherited the write end and will never close it;
- a chain of children (and live pipes) that made no progress over the sample window while other
  evidence says work should be happening: an OOM kill in the job, a silent log, an idle GPU.
Chains that end at a lock, socket, FIFO open or FUSE server belong to the rules for those.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.stalls import StalledChain
from vastprobe.model import Evidence, Finding, Process
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import chain_evidence, names, resume_hint, stack_command

META = RuleMeta("do-wait-orphan", "VP101", "error", "a process waits on children whose work cannot finish by itself")


def check(ctx: Context) -> Iterator[Finding]:
    for s in ctx.stalled_chains:
        if s.kind == "orphan-pipe":
            f = _orphan_pipe(ctx, s)
        elif s.kind == "child":
            f = _idle_chain(ctx, s)
        else:
            continue
        if f is not None:
            yield f


def _orphan_pipe(ctx: Context, s: StalledChain) -> Finding | None:
    if s.idle is False or s.edge is None:
        return None  # the reader or the writers moved: data still flows
    edge = s.edge
    reader = ctx.tree.by_pid[edge.waiter]
    orphans = names(ctx, s.orphans)
    thing = f"FIFO {edge.path}" if edge.kind == "fifo" else "a pipe"
    ev = chain_evidence(ctx, s)
    for w in s.orphans:
        wp = ctx.tree.by_pid[w]
        ev.append(Evidence("orphan", f"{w} ({wp.comm}) was re-parented to {ctx.proc_label(wp.ppid)}"))
    upto = s.chain.pids[: s.chain.pids.index(reader.pid) + 1]
    if s.waiter == reader.pid:
        summary = f"{reader.comm} ({reader.pid}) waits for EOF on {thing} held open only by the orphan {orphans}"
    else:
        waiter = ctx.tree.by_pid[s.waiter]
        summary = (
            f"{waiter.comm} ({waiter.pid}) waits on {reader.comm} ({reader.pid}), which reads {thing} held open only "
            f"by the orphan {orphans}"
        )
    return META.finding(
        summary,
        [*upto, *s.orphans],
        ev,
        f"the orphan inherited {edge.what.split(' (')[0]} and will never close it, so {reader.comm} never sees EOF: "
        f"kill {orphans}, and start background jobs with their output redirected (`cmd > log 2>&1 &`)",
    )


def _idle_chain(ctx: Context, s: StalledChain) -> Finding | None:
    end = ctx.tree.by_pid.get(s.chain.end)
    if end is not None and end.state in ("T", "t") and s.dead_end and s.chain.end not in ctx.scope:
        return _stopped_end(ctx, s, end)
    if end is None or end.state in ("T", "t", "D", "Z") or not s.idle or len(s.chain.hops) < 2:
        return None  # stopped-child and d-state say it better; a moving chain is no stall
    if ctx.graph.kind(end) == "tty":
        return None  # terminal-prompt says what it waits for
    stall = ctx.stall_evidence(s)
    if not stall or (stall.logs_only and (_runs_a_quiet_server(ctx, s) or ctx.waits_on_watchers(s.waiter))):
        # idle, but nothing says it should be busy: a healthy wait. A pre-fork master on its idle workers,
        # its log quiet: nobody asks (an idle nginx read STALLED with its 10-minute-old log); a pipeline
        # from `tail -F`: nothing was written to what it follows
        return None
    waiter = ctx.tree.by_pid[s.waiter]
    ev = chain_evidence(ctx, s) + list(stall.evidence)
    because = " after an OOM kill in the job" if stall.oom else ""
    middle = [ctx.tree.by_pid[p] for p in s.chain.pids[1:-1] if p in ctx.tree.by_pid]
    via = "".join(f" and {m.comm} ({m.pid})" for m in middle)
    verb = "wait" if middle else "waits"
    where = end.wchan if isinstance(end.wchan, str) and end.wchan not in ("", "0") else "the kernel"
    if stall.oom:
        hint = (
            f"{end.comm} ({end.pid}) is where the chain ends and it will not finish by itself: it lost a process to "
            f"the OOM killer (above); give the job more memory or less work, then kill {end.pid} or restart the job"
        )
    elif (looper := _poll_loop(ctx, end)) is not None:
        hint = (
            f"{end.comm} ({end.pid}) is the pause of a polling loop in {looper.comm} ({looper.pid}): it waits for a "
            f"condition its script tests between sleeps (a file, a port, a process), not for the sleep; find what "
            f"that condition waits for (`cat /proc/{looper.pid}/cmdline`, its script); killing the sleep only "
            "starts the next one"
        )
    else:
        hint = (
            f"{end.comm} ({end.pid}) is where the chain ends, waiting in {where} on nothing vastprobe can follow "
            f"(a lock or a condition inside it, or a child that died without a trace): see where it waits "
            f"({stack_command(ctx, end.pid)}), then kill {end.pid} or restart the job"
        )
    if stall.logs_only and (
        ctx.timer_sleepers(s.chain.pids) or ctx.wake_by_themselves(s.blockers) or ctx.waits_end_on_timers(s.chain.pids)
    ):
        # asleep on a timer, it wakes by itself: a quiet log beside it proves no stall (a polling loop
        # waiting for a file, `sleep 3600` in a script read STALLED; found by a helper). Its blockers alone
        # decide, not every process before them: `(while :; do check; sleep 400; done) | consumer` has the
        # consumer reading a pipe, and read STALLED, "sleep makes no progress" (found by a helper)
        if ctx.keeps_alive(end.pid):
            ev.append(
                Evidence("progress", f"{end.comm} ({end.pid}) is a keep-alive (`sleep infinity`): idle by design")
            )
            how = "is a keep-alive (`sleep infinity`)"
        else:
            ev.append(Evidence("progress", f"{end.comm} ({end.pid}) sleeps on a timer: it wakes by itself"))
            how = "sleeps on a timer"
        return META.finding(
            f"{waiter.comm} ({waiter.pid}){via} {verb} on {end.comm} ({end.pid}), which {how} while the job's log is silent",
            s.chain.pids,
            ev,
            hint,
            severity="warning",
        )
    return META.finding(
        f"{waiter.comm} ({waiter.pid}){via} {verb} on {end.comm} ({end.pid}), which makes no progress{because}",
        s.chain.pids,
        ev,
        hint,
        caused_by="oom-killed-child" if stall.oom else None,
    )


def _runs_a_quiet_server(ctx: Context, s: StalledChain) -> bool:
    """The chain ends in a server nobody asks, and each process before it is one too or waits on its
    child: a launcher (`timeout 300 nginx`, a script that runs the server) waits on the server as the
    server waits on its workers. Scoped to the launcher, an idle nginx read STALLED, exit 1, beside its
    quiet access log; scoped to nginx's master it read HEALTHY (found by a helper)."""
    if not ctx.quiet_server(s.chain.end):
        return False
    return all(ctx.quiet_server(h.pid) or (h.edge is not None and h.edge.kind == "child") for h in s.chain.hops[:-1])


SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "busybox"})


def _poll_loop(ctx: Context, end: Process) -> Process | None:
    """The shell that runs `sleep` as the pause of a loop (`until test -f ready; do sleep 5; done`)."""
    if end.comm not in ("sleep", "usleep"):
        return None
    parent = ctx.tree.by_pid.get(end.ppid)
    return parent if parent is not None and parent.comm in SHELLS else None


def _stopped_end(ctx: Context, s: StalledChain, end: Process) -> Finding:
    """The chain leaves the scope and ends at a stopped process (the remote side of `tar | ssh`,
    rsync's server under sshd): stopped-child watches only the scope, so the chain says it here."""
    waiter = ctx.tree.by_pid[s.waiter]
    middle = [ctx.tree.by_pid[p] for p in s.chain.pids[1:-1] if p in ctx.tree.by_pid]
    via = f" through {', '.join(f'{m.comm} ({m.pid})' for m in middle[:4])}" if middle else ""
    return META.finding(
        f"{waiter.comm} ({waiter.pid}) waits{via} on {end.comm} ({end.pid}), which is stopped ({end.state})",
        s.chain.pids,
        chain_evidence(ctx, s),
        resume_hint(ctx, end.pid),
    )


RULE = Rule(META, check)
