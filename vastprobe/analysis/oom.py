"""OOM kills matched to the watched job.

A kill is the job's only when the victim was in one of the job's memory cgroups, or was one of
its processes (its program is what a watched wrapper runs, or a watched process still has
children of the victim's name: a Pool or a server replacing workers; names count only where the
scope is the job, never on a whole host where "python" is everybody). A kill elsewhere on the
host is context. Kernel-log PIDs are host PIDs, so inside a container a victim is matched by
cgroup and name, and by time: a kill from before a process started cannot be that process's loss.
The loser named is the victim's likely parent: the watched process closest to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from vastprobe.analysis.tree import ProcessTree
from vastprobe.analysis.waitgraph.graph import WaitGraph
from vastprobe.model import CgroupMemory, HostSnapshot, KernelEvent, Process, available

ROOT_CGROUPS = ("/", "")
CLOCK_SLACK = 0.25  # seconds: the kernel log's clock against process start times


@dataclass(frozen=True)
class OomMatch:
    event: KernelEvent
    loser: int | None  # the watched process that most likely lost the victim (its parent)
    how: str  # how the victim was tied to the job, or why it was not
    tie: Literal["job", "before", "elsewhere"]  # the job's kill, or context: before it started, or not its own
    cgroup: str | None = None  # the memory cgroup the kill is placed in (the log's, or the job's that counted it)
    #: the loser is only the watched process closest to the victim, no sign that it was its parent
    guessed: bool = False

    @property
    def relevant(self) -> bool:
        return self.tie == "job"


def start_wall(snapshot: HostSnapshot, p: Process) -> float | None:
    btime = available(snapshot.host.btime)
    return None if btime is None else btime + p.starttime / snapshot.host.clk_tck


def job_is_bounded(snapshot: HostSnapshot, explicit_scope: bool) -> bool:
    """Whether the scope is the job — named by --pid/--match, or a container (a PID namespace shows
    no kernel threads) — rather than a whole host where any idle shell could be blamed."""
    return explicit_scope or not any(p.kernel_thread for p in snapshot.processes)


def _cgroups(p: Process) -> set[str]:
    return {c for c in (p.memory_cgroup, p.cgroup_v2) if c is not None}


_CgroupIndex = tuple[dict[str, list[Process]], dict[str, list[Process]]]


def _index(procs: list[Process]) -> _CgroupIndex:
    """Processes by each of their cgroups as written, and by each non-root one without a trailing
    "/" (what a path below it starts with)."""
    exact: dict[str, list[Process]] = {}
    above: dict[str, list[Process]] = {}
    for p in procs:
        for c in _cgroups(p):
            exact.setdefault(c, []).append(p)
            if c not in ROOT_CGROUPS:
                above.setdefault(c.rstrip("/"), []).append(p)
    return exact, above


def _members(path: str, by_cgroup: _CgroupIndex, order: dict[int, int]) -> list[Process]:
    """The processes in memory cgroup `path`: in it exactly, or in a non-root cgroup above it (a
    kill in a child cgroup of the job's is the job's). Found through the path's few ancestors
    rather than by testing every process against every kill; in `order`."""
    exact, above = by_cgroup
    out: dict[int, Process] = {p.pid: p for p in exact.get(path, [])}
    at = path.find("/", 1)
    while at > 0:  # every prefix that ends where a "/" follows: the cgroups `path` is under
        for p in above.get(path[:at], []):
            out.setdefault(p.pid, p)
        at = path.find("/", at + 1)
    return sorted(out.values(), key=lambda p: order[p.pid])


def _by_name(watched: list[Process], tree: ProcessTree) -> tuple[dict[str, list[Process]], dict[str, list[Process]]]:
    """Who runs a program (a wrapper that names it in its arguments: timeout, nohup, srun, mpirun;
    comm is the file name cut to 15 bytes), and who has live children of a name: built once, a
    host's log can hold hundreds of kills and a host hundreds of processes."""
    runs: dict[str, list[Process]] = {}
    parents_of: dict[str, list[Process]] = {}
    for p in watched:
        for name in {a.rsplit("/", 1)[-1][:15] for a in p.cmdline[1:8]}:
            runs.setdefault(name, []).append(p)
        for name in {k.comm for k in tree.kids(p.pid) if k.state != "Z"}:
            parents_of.setdefault(name, []).append(p)
    return runs, parents_of


def match_oom_kills(
    snapshot: HostSnapshot, scope: frozenset[int], graph: WaitGraph, explicit_scope: bool = False
) -> list[OomMatch]:
    kills = [e for e in snapshot.kernel_log.events if e.kind == "oom-kill"]
    if not kills:
        return []
    watched = [p for p in snapshot.processes if p.pid in scope and not p.kernel_thread and p.state != "Z"]
    # a kill's stamp is the kernel log's clock (each CPU's sched_clock), a start time is boottime:
    # on this project's VM the log runs 49 ms behind, and a benchmark script's client OOM-killed
    # 60 ms after the script started looked killed before it (the seed case, lost in CI). A
    # process counts as alive at a kill it may have seen, within CLOCK_SLACK.
    slack = CLOCK_SLACK
    starts = {p.pid: start_wall(snapshot, p) for p in watched}
    known = [t for t in starts.values() if t is not None]
    unknown_start = len(known) < len(starts)
    earliest = min(known) if known else None
    job_cgroups: set[str] = set().union(*(_cgroups(p) for p in watched)) if watched else set()
    # a job in cgroups of its own can be compared with the victim's; a job in the root cgroup, or
    # behind a cgroup namespace (a container sees its own cgroup as "/"), cannot
    comparable = bool(job_cgroups - set(ROOT_CGROUPS))
    bounded = job_is_bounded(snapshot, explicit_scope)
    own = [c for c in snapshot.cgroups if c.path in job_cgroups and c.path not in ROOT_CGROUPS]
    counters = [c.oom_kill for c in own if c.oom_kill is not None]
    job_counted_none = bool(counters) and all(n == 0 for n in counters)
    tree = graph.tree
    waiting = {p.pid for p in watched if graph.waits_on_jobs(p)}
    runs, parents_of = _by_name(watched, tree)
    by_cgroup = _index(watched)
    order = {p.pid: i for i, p in enumerate(watched)}
    # the probe sees host PIDs (the kernel log's) only where every watched process is in the
    # initial PID namespace (one NSpid entry)
    host_pids = bool(watched) and all(len(p.nspid) == 1 for p in watched)
    ties = _Ties(waiting, parents_of, runs, tree, host_pids)
    in_memcg: dict[str, list[Process]] = {}  # kills share a few cgroups: each is matched once
    out: list[OomMatch | None] = []
    unnamed: list[tuple[int, KernelEvent, list[Process]]] = []  # kills whose cgroup line the kernel dropped
    earlier: list[tuple[int, KernelEvent]] = []  # those of them from before the job started
    for ev in kills:
        when = ev.wall_time

        def alive_before(p: Process, when: float | None = when) -> bool:
            s = starts.get(p.pid)
            return when is None or s is None or s <= when + slack

        if not (when is None or unknown_start or (earliest is not None and earliest <= when + slack)):
            if ev.task_memcg is None and comparable:
                earlier.append((len(out), ev))  # it may be one a counter of the job's cgroups counted
            out.append(OomMatch(ev, None, "the kill happened before every watched process started", "before"))
            continue
        # names are weak ties ("python"): only where the scope is the job itself
        named = (
            [p for p in parents_of.get(ev.comm or "", []) + runs.get(ev.comm or "", []) if alive_before(p)]
            if bounded
            else []
        )
        if ev.task_memcg is None and comparable:
            # the kernel rate-limits the lines that name the cgroup (10 reports in 5 s), never the
            # "Killed process" line; the job's own counters say whether, and how often, it lost one
            if job_counted_none:
                out.append(OomMatch(ev, None, "the job's memory cgroups count no OOM kill", "elsewhere"))
            else:
                unnamed.append((len(out), ev, [p for p in watched if alive_before(p)]))
                out.append(None)
            continue
        if ev.task_memcg is not None and comparable:
            inside = in_memcg.get(ev.task_memcg)
            if inside is None:
                inside = in_memcg[ev.task_memcg] = _members(ev.task_memcg, by_cgroup, order)
            members = [p for p in inside if alive_before(p)]
            if ev.task_memcg not in ROOT_CGROUPS and members:
                # on a whole host, a process in a cgroup above the victim's is no sign it ran the victim
                # unless a strong tie says so: a tool shell waiting on its idle child "made no progress
                # after an OOM kill" in a test's cgroup below its own (found by a helper)
                own_cgroup = None if bounded else {p.pid for p in by_cgroup[0].get(ev.task_memcg, [])}
                out.append(
                    replace(
                        _blame(ev, members, ties, "in the job's memory cgroup", bounded, own_cgroup),
                        cgroup=ev.task_memcg,
                    )
                )
            else:  # the victim was demonstrably elsewhere, whatever its name
                where = ev.task_memcg or "the root cgroup"
                out.append(OomMatch(ev, None, f"in memory cgroup {where}, not the job's", "elsewhere"))
            continue
        if named:
            out.append(_blame(ev, named, ties, "one of the job's processes by name"))
        elif bounded and (waiters := [p for p in watched if p.pid in waiting and alive_before(p)]):
            out.append(_blame(ev, waiters, ties, "waits on children and was running when the victim died"))
        else:
            out.append(OomMatch(ev, None, "no watched process could be tied to the victim", "elsewhere"))
    if unnamed:
        # every kill the log names a cgroup for, whenever it was: a counter counts its cgroup's kills
        # from before the job started too (a neighbour's rate-limited kill took what those had spent,
        # and was blamed on the job: two findings for one launcher in a clean-clone CI)
        named_in = [ev.task_memcg for ev in kills if ev.task_memcg is not None]
        counting = [c for c in own if c.oom_kill]
        _place_unnamed(out, unnamed, counting, named_in, watched, ties, bounded, earlier=earlier)
    return [m for m in out if m is not None]


def counted_by(c: CgroupMemory, named: str) -> bool:
    """Whether c's counter counted a kill the kernel log placed in cgroup `named`: v2's memory.events
    counts its children's kills too, v1's memory.oom_control only its own (checked on a v1 host)."""
    return named == c.path or (c.version != "v1" and named.startswith(c.path.rstrip("/") + "/"))


def unlogged_kills(snapshot: HostSnapshot, matches: list[OomMatch], c: CgroupMemory) -> int:
    """How many of c's counted kills the kernel log does not hold, and so may be the job's unseen
    losses: all of them where the log is unreadable; otherwise the counter less the kills the log
    names c for, at any time (a counter counts the kills from before the job started too: a job
    whose container had lost a process before it read STALLED, "the log no longer holds the lines").
    None where the log reaches back past the job's start (it holds a kill from before it): the log
    drops its oldest lines first, so a kill it lost is older still."""
    if not snapshot.kernel_log.readable:
        return c.oom_kill or 0
    if any(m.tie == "before" for m in matches):
        return 0
    named = sum(1 for m in matches if m.event.task_memcg is not None and counted_by(c, m.event.task_memcg))
    return max(0, (c.oom_kill or 0) - named)


def _place_unnamed(
    out: list[OomMatch | None],
    unnamed: list[tuple[int, KernelEvent, list[Process]]],
    counting: list[CgroupMemory],
    named_in: list[str],
    watched: list[Process],
    ties: _Ties,
    bounded: bool,
    earlier: Sequence[tuple[int, KernelEvent]] = (),
) -> None:
    """Kills without their cgroup line, placed by the counters of the job's memory cgroups: each
    cgroup takes at most as many as it counted, less those the log named it for at any time, and
    only a kill that some process inside it lived through (a process outside the cgroup is no loser
    of it, whatever its children are called). The `earlier` ones (before the job started, context
    whatever they were) spend a counter too: a counter counts its cgroup's kills from before the job,
    and a neighbour's kill took what one of them had spent (two findings for one launcher in a
    clean-clone CI). The likeliest first: a victim tied by name to a process in the cgroup, then one
    whose memory at death was near the cgroup's limit (a memory cgroup kills when it is full, and
    takes its largest process), then one fewer cgroups could hold, then the newest."""
    inside = {c.path: [p for p in watched if c.path in _cgroups(p)] for c in counting}
    # a counter also counts the kills the log placed by their own cgroup line: those are spent
    left = {c.path: (c.oom_kill or 0) - sum(1 for n in named_in if counted_by(c, n)) for c in counting}

    def near_limit(ev: KernelEvent, c: CgroupMemory) -> bool:
        if not c.limit_bytes or ev.anon_rss_kb is None:
            return False
        return 0.75 * c.limit_bytes / 1024 <= ev.anon_rss_kb <= 1.1 * c.limit_bytes / 1024

    def named(ev: KernelEvent, pool: list[Process]) -> list[Process]:
        ids = {p.pid for p in pool}
        return [p for p in ties.parents_of.get(ev.comm or "", []) + ties.runs.get(ev.comm or "", []) if p.pid in ids]

    Option = tuple[bool, bool, CgroupMemory, list[Process]]

    def options(ev: KernelEvent, alive: list[Process] | None) -> list[Option]:
        """(tied by name, near the limit, cgroup, its members alive at the kill), best first; a kill
        from before the job (`alive` None) could be any counting cgroup's, with nobody to lose it."""
        ids = {p.pid for p in alive or ()}
        out: list[Option] = []
        for c in counting:
            pool = [p for p in inside[c.path] if p.pid in ids]
            if pool or alive is None:
                out.append((bounded and bool(named(ev, pool)), near_limit(ev, c), c, pool))
        return sorted(out, key=lambda o: (not o[0], not o[1]))

    candidates = [(i, ev, options(ev, alive), False) for i, ev, alive in unnamed]
    candidates += [(i, ev, options(ev, None), True) for i, ev in earlier]
    ranked = sorted(
        candidates,
        # a kill that fewer cgroups could hold is placed before one that more could; on a tie the
        # newest (a kill from before the job takes a count only where it is the likelier one)
        key=lambda u: (not (u[2] and u[2][0][0]), not (u[2] and u[2][0][1]), len(u[2]), -(u[1].uptime or 0)),
    )
    for i, ev, opts, before in ranked:
        chosen = next((o for o in opts if left[o[2].path] > 0), None)
        if chosen is not None:
            left[chosen[2].path] -= 1
        if before:
            continue  # context whatever it was: it only spent a count
        if chosen is None:
            why = "its cgroup is not in the log, and no memory cgroup of the job that counts kills had a process then"
            if opts:
                why = "its cgroup is not in the log and the job's counters are spent"
            out[i] = OomMatch(ev, None, why, "elsewhere")
            continue
        by_name, _near, c, pool = chosen
        how = f"in the job's memory cgroup {c.path} by its counter"
        out[i] = replace(_blame(ev, named(ev, pool) if by_name else pool, ties, how, bounded), cgroup=c.path)


@dataclass(frozen=True)
class _Ties:
    """What ties a victim to a watched process: who waits on children, who has children of a name,
    who runs a program, the tree, and whether the kernel log's PIDs are the snapshot's."""

    waiting: set[int]
    parents_of: dict[str, list[Process]]
    runs: dict[str, list[Process]]
    tree: ProcessTree
    host_pids: bool


def _seen_parent(ev: KernelEvent, ties: _Ties, ids: set[int]) -> Process | None:
    """The victim itself in the snapshot (seen in the first sample and gone by the second, or a
    zombie its parent has not reaped): its watched parent or nearest watched ancestor is the loser."""
    if not ties.host_pids or ev.pid is None:
        return None
    victim = ties.tree.by_pid.get(ev.pid)
    if victim is None or (ev.comm and victim.comm[:15] != ev.comm[:15]):
        return None
    if victim.state != "Z" and len(victim.samples) > 1:
        return None  # alive in both samples: a later process with the victim's PID and name
    return next((a for a in ties.tree.ancestors(victim.pid) if a.pid in ids), None)


def _blame(
    ev: KernelEvent,
    pool: list[Process],
    ties: _Ties,
    how: str,
    bounded: bool = True,
    own_cgroup: set[int] | None = None,
) -> OomMatch:
    """The victim's likely parent among `pool`: the victim's own parent where the snapshot still
    holds the victim, then one that still has children of the victim's name, then a wrapper running
    its program, then one waiting on children; the closest (started last). Launchers side by side
    (neither below the other) that all wait on children are no evidence: the kill is the cgroup's
    then, with no loser named, rather than blamed on whichever started last. On a whole host, any
    process in the victim's cgroup is no parent of it: nobody is named then. `own_cgroup`: those of
    `pool` in the victim's own cgroup, where only they may be named for waiting on children."""
    ids = {p.pid for p in pool}
    waits_here = ids if own_cgroup is None else ids & own_cgroup
    parent = _seen_parent(ev, ties, ids)
    if parent is not None:
        return OomMatch(ev, parent.pid, f"{how}; the victim was its child (seen in the first sample)", "job")
    for group, why in (
        (ties.parents_of.get(ev.comm or "", []), "its other children share the victim's name"),
        (ties.runs.get(ev.comm or "", []), "its command line runs the victim's program"),
        ([p for p in pool if p.pid in ties.waiting and p.pid in waits_here], "waits on children"),
        (pool if bounded else [], "the closest watched process"),
    ):
        cands = [p for p in group if p.pid in ids]
        if not cands:
            continue
        if why == "waits on children" and _side_by_side(cands, ties):
            names = ", ".join(f"{p.comm} ({p.pid})" for p in cands[:4])
            return OomMatch(ev, None, f"{how}; which of its launchers lost it ({names}) nothing shows", "job")
        loser = max(cands, key=lambda p: (p.starttime, p.pid))
        return OomMatch(ev, loser.pid, f"{how}; {why}", "job", guessed=why == "the closest watched process")
    return OomMatch(ev, None, how, "job")


def _side_by_side(cands: list[Process], ties: _Ties) -> bool:
    """Whether two of the candidates are unrelated: neither is the other's ancestor."""
    for i, a in enumerate(cands):
        for b in cands[i + 1 :]:
            if not ties.tree.in_subtree(a.pid, b.pid) and not ties.tree.in_subtree(b.pid, a.pid):
                return True
    return False
