"""Ranks that wait on one another: whether nothing of a job moved over the window (so no rank is
outside the wait to end it: docs/rules/culprit-rank.md, "Every rank waits, and nothing moves"), and
how the ranks' blocked receives lead to each other (a cycle, or the one rank every wait ends at)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from vastprobe.analysis.waitgraph.edges import untimed_futex
from vastprobe.analysis.wchan_families import timed_wait
from vastprobe.model import JobRank, Process, Syscall

if TYPE_CHECKING:
    from vastprobe.analysis.view import SnapshotView

#: The share of a CPU over the window under which a rank of a still job does no work: a watchdog
#: thread's wakes cost well under it (NCCL's wakes ten times a second, and may be charged a tick)
STILL_SHARE = 0.05

#: A thread's wait that is no wait on something outside the job: on another thread (a lock, a condition),
#: in an event loop over its connections (gloo's, NCCL's), for a connection to its listener (a store)
_INSIDE = frozenset({"futex", "event-loop", "accept"})


def job_still(ctx: SnapshotView, procs: list[Process], whole: bool) -> tuple[str | None, tuple[str, ...]]:
    """Why nothing of the job here moved over the window, in words, or None: no rank and no process
    under one read or wrote a byte, changed state, had its main thread scheduled (a ring exchanging
    data wakes its receiving main threads however little CPU it gets) or used STILL_SHARE of a CPU, and
    no thread of theirs sleeps on a timer (a rank waiting on its own thread's back-off wakes by itself)
    or waits on what is not the job's, nor a main thread waits with a deadline. `whole`: every rank of
    the world is here; else a wait on a connection leaving this host may be on a rank elsewhere, and
    is returned for a run of the job's hosts to check (the second item).
    A timed wait on a condition (a watchdog: NCCL's wakes ten times a second) is no work, and its wakes
    may be charged a tick: under load a deadlocked ring read HEALTHY in 1 run of 4 when a tick counted.
    Every thread must have been read, and each main thread's wakes counted (the second sample's
    status line)."""
    if not ctx.two_samples or not procs:
        return None, ()
    g = ctx.graph
    family = [*procs, *(d for p in procs for d in ctx.tree.descendants(p.pid))]
    inside = {p.pid for p in family}
    off_host: list[str] = []
    window = ctx.snapshot.sample_window
    for p in family:
        pr, cpu = ctx.progress.get(p.pid), ctx.cpu_seconds(p.pid)
        if pr is None or not pr.sampled or pr.ctxt_switches is None or cpu is None or window <= 0:
            return None, ()
        if pr.gone or pr.io_bytes or pr.state_changed or pr.ctxt_switches or cpu >= STILL_SHARE * window:
            return None, ()
        tasks = g.all_tasks(p)
        if tasks is None:
            return None, ()
        # its main thread waits with a deadline (rank 0's `Event.wait(60)` while the others wait in a
        # barrier read STALLED; found by a helper), or on a futex whose deadline was not read
        if timed_wait(p.syscall) or (g.kind(p) == "futex" and not isinstance(p.syscall, Syscall)):
            return None, ()
        for t in tasks:
            if t.state != "S" or (kind := g.task_kind(p, t)) in _INSIDE:
                continue
            # a thread asleep on a timer, or waiting on what is not the job's (rank 0's download in an
            # executor thread while its main thread waits for the result read STALLED; found by a helper)
            edges = g.task_waits(p, t) if kind != "sleep" else ()
            if not edges:
                return None, ()
            for e in edges:
                if e.holders and not set(e.holders) <= inside:
                    return None, ()
                if not e.holders:
                    remote = e.socket.remote if e.kind == "tcp" and e.socket is not None else None
                    if whole or not remote:
                        return None, ()
                    off_host.append(remote)  # a rank on another host, where a run of its hosts says so
    under = len(family) - len(procs)
    beside = f" and the {under} process(es) under them" if under else ""
    return (
        f"nothing of the job here moved over {ctx.snapshot.sample_window:.1f}s: its {len(procs)} rank(s){beside} "
        f"read or wrote nothing, did not change state, used under {STILL_SHARE:.0%} of a CPU, and no main thread woke"
    ), tuple(dict.fromkeys(off_host))[:64]


#: gloo's run loops (ProcessGroupGloo's worker threads, by the name torch gives them): idle, each waits
#: for work with no deadline; running a collective, one waits on a peer's data with the group's timeout
GLOO_RUN_LOOP = "pt_gloo_runloop"


def in_gloo_collective(ctx: SnapshotView, p: Process) -> bool | None:
    """Whether a run loop of the rank works a collective (a wait with a deadline, or not asleep on a
    futex); False: every one was read waiting for work with no deadline; None: no run loop, or a thread
    or a run loop's system call unread. A rank that skipped an all_reduce, or stuck on its own lock, waits
    in a futex as the ranks inside the collective do; its run loops alone tell it apart (real PyTorch)."""
    tasks = ctx.graph.all_tasks(p)
    loops = [t for t in tasks[1:] if t.comm == GLOO_RUN_LOOP] if tasks is not None else []
    if not loops or not all(isinstance(t.syscall, Syscall) for t in loops):
        return None
    return any(t.state != "S" or not untimed_futex(t.syscall) for t in loops)


def outside_collective(ranks: Sequence[JobRank]) -> tuple[JobRank, ...]:
    """The ranks whose gloo run loops are all idle where other ranks' work a collective: the ranks that
    have not entered the collective the others wait in (none where no rank's loops say either way)."""
    if not any(r.in_gloo_collective for r in ranks):
        return ()
    return tuple(r for r in ranks if r.in_gloo_collective is False)


def outside_hint(rank: JobRank, where: str) -> str:
    """What to do about a rank that has not entered the collective the others wait in (outside_collective);
    `where`: how to see where it is (its stack command, on its host)."""
    return (
        f"see where {rank.name} is ({where}): it skipped the collective, or waits on something of its own instead "
        "(a lock, an event, a queue); the others wait in the collective until it times out (the process group's "
        "timeout: 30 minutes by default), then restart the job"
    )


def waits_among(ranks: Sequence[JobRank]) -> tuple[tuple[JobRank, ...], JobRank | None]:
    """How the ranks' blocked receives lead to each other: (a cycle, `rank 0, rank 3, rank 2, rank 1,
    rank 0`: each waits to receive from the next before it sends; or the one rank every other's wait
    ends at, itself blocked on no rank's connection: the likeliest holder). ((), None): the waits say
    neither (NCCL's main threads wait in futexes, on no connection)."""
    # by the rank itself, not its pid: ranks read on several hosts may share pids (a container's, a PID
    # namespace's), and keyed by pid one host's rank stood for another's
    owner = {end: r for r in ranks for end in r.ends}
    link = {r: o for r in ranks if r.waits_on and (o := owner.get(r.waits_on)) is not None and o != r}
    # each rank walked once (a ring of 2,048 ranks over a sweep's hosts, walked from every rank and once a
    # host, took minutes; found by a helper)
    done: set[JobRank] = set()
    for start in ranks:
        at: dict[JobRank, int] = {}
        path: list[JobRank] = []
        cur: JobRank | None = start
        while cur is not None and cur not in done and cur not in at:
            at[cur] = len(path)
            path.append(cur)
            cur = link.get(cur)
        if cur is not None and cur in at:
            return (*path[at[cur] :], cur), None
        done.update(path)
    end: dict[JobRank, JobRank] = {}
    for r in ranks:  # no cycle: every walk ends, and each rank's end is found once
        trail, cur = [], r
        while cur not in end and (nxt := link.get(cur)) is not None:
            trail.append(cur)
            cur = nxt
        last = end.get(cur, cur)
        end.update((x, last) for x in (*trail, cur))
    ends = {end[r] for r in ranks}
    if len(ends) != 1 or len(link) < 2:
        return (), None
    return (), next(iter(ends))


#: What to do about ranks that all wait on one another (one host, or a run's hosts read together)
DEADLOCK_HINT = (
    "no rank is outside the wait to end it: a collective the ranks entered in different orders, one a rank "
    "skipped, or a rank stuck on a lock of its own; the job ends only when the collective times out (the process "
    "group's timeout, TORCH_NCCL_TIMEOUT: 10 to 30 minutes by default). Compare where each rank is"
)


def how_they_wait(ranks: Sequence[JobRank], where: dict[JobRank, str] | None = None) -> str:
    """waits_among in words; `where`: rank -> host, for ranks read on several hosts."""
    cycle, sink = waits_among(ranks)
    if cycle:
        # the first and last few of a long one (a 2,048-rank ring made 26 KB of every host's headline)
        names = [r.name for r in cycle]
        shown = names if len(names) <= 9 else [*names[:6], "…", *names[-2:]]
        size = f" ({len(cycle) - 1} ranks)" if len(names) > 9 else ""
        return f"their receives wait on each other in a cycle{size}, " + " <- ".join(shown)
    if sink is not None:
        at = f" on {where[sink]}" if where and sink in where else ""
        return (
            f"every other rank's wait over the job's connections ends at {sink.label}{at}, which waits on no rank's "
            "connection: the likeliest holder"
        )
    outside = outside_collective(ranks)
    if outside:
        inside = [r for r in ranks if r.in_gloo_collective]

        def named(rs: Sequence[JobRank]) -> str:
            shown = [r.label + (f" on {where[r]}" if where and r in where else "") for r in rs[:4]]
            return ", ".join(shown) + (" …" if len(rs) > 4 else "")

        one = len(outside) == 1
        return (
            f"{named(outside)} {'has' if one else 'have'} not entered the collective the others wait in: "
            f"{'its' if one else 'their'} gloo run loops ({GLOO_RUN_LOOP}) wait for work with no deadline, while "
            f"{named(inside)} {'has' if len(inside) == 1 else 'each have'} one waiting on a peer with the group's "
            "timeout"
        )
    return "they wait on one another"
