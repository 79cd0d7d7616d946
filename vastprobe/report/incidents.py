"""Findings grouped by cause, and the one line that says why a host is what it is.

An operator reads a host's findings as a story: the root cause (an OOM kill, a stopped process),
then what follows from it (the chain that waits forever, the log that went quiet). A finding
follows another when it says so (`caused_by`), when its wait chain ends at a process another
finding is about (a chain waiting on a stopped or D-state process), or when it is a symptom
(a silent log, an idle GPU) of the worst stall on the host. Every finding lands in exactly one
incident; incidents come worst first, the ones that explain others before lone ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from vastprobe.clock import utc_text
from vastprobe.model import SEVERITY_ORDER, Finding, Incident, Process, Verdict, WaitLink, WaitPicture
from vastprobe.units import processes

if TYPE_CHECKING:
    from vastprobe.analysis.context import Context
    from vastprobe.analysis.stalls import StalledChain
    from vastprobe.analysis.waitgraph.edges import Chain, WaitEdge

#: Findings about a chain of waits: their first pid is the waiter.
CHAIN_RULES = frozenset(
    {"do-wait-orphan", "socket-peer-wait", "file-lock-wait", "fifo-no-partner", "fuse-no-answer", "db-lock-wait"}
)
#: Findings about one process in a state nothing ends by itself: chains that end there follow from them.
STATE_RULES = frozenset({"stopped-child", "d-state"})
#: What a stall looks like from outside; they follow the worst stall rather than stand alone.
SYMPTOM_RULES = frozenset({"missing-logs", "idle-gpu", "gpu-busy-no-progress"})
#: Roots a symptom may follow: the ones that stop a job.
STALL_RULES = (
    CHAIN_RULES | STATE_RULES | {"oom-killed-child", "deadlock", "culprit-rank", "no-progress", "terminal-prompt"}
)
#: How the consequence's summary words a cause the arrow in the headline already says.
CAUSE_SUFFIXES = {"oom-killed-child": " after an OOM kill in the job"}


def _worst(findings: Sequence[Finding]) -> int:
    return max((SEVERITY_ORDER[f.severity] for f in findings), default=0)


def _cause(i: int, findings: Sequence[Finding]) -> int | None:
    """The index of the finding that finding i follows from, if any."""
    f = findings[i]
    if f.caused_by:
        same = [j for j, g in enumerate(findings) if j != i and g.rule == f.caused_by]
        if same:
            overlap = [j for j in same if set(findings[j].pids) & set(f.pids)]
            serious = [j for j in same if SEVERITY_ORDER[findings[j].severity] >= SEVERITY_ORDER["warning"]]
            return (overlap or serious or same)[0]
    if f.rule in CHAIN_RULES and f.pids:
        for j, g in enumerate(findings):
            if j != i and g.rule in STATE_RULES and g.pids and g.pids[0] in f.pids[1:]:
                return j
    if f.pids and f.rule != "culprit-rank":
        # a rank's own finding (the culprit's chain, a waiting rank's silent peer or busy GPU) follows
        # the finding that names the rank holding the job
        for j, g in enumerate(findings):
            if j != i and g.rule == "culprit-rank" and f.pids[0] in g.pids:
                return j
    return None


def group_findings(findings: Sequence[Finding]) -> list[list[Finding]]:
    """[root, *consequences] per incident, in the order the incidents should be read."""
    n = len(findings)
    parent = {i: _cause(i, findings) for i in range(n)}

    def root_of(i: int) -> int:
        seen = {i}
        while parent[i] is not None:
            j = parent[i]
            assert j is not None
            if j in seen:  # two findings that name each other: the first one is the root
                return min(seen)
            seen.add(j)
            i = j
        return i

    roots: dict[int, list[int]] = {}
    for i in range(n):
        roots.setdefault(root_of(i), []).append(i)
    # a symptom that stands alone follows the worst stall, when there is one
    stall = next(
        (r for r in sorted(roots, key=lambda r: _rank(r, roots, findings)) if _is_stall(roots[r], findings)), None
    )
    if stall is not None:
        for r in list(roots):
            if r != stall and roots[r] == [r] and findings[r].rule in SYMPTOM_RULES:
                roots[stall].append(r)
                del roots[r]
    groups = []
    for r in sorted(roots, key=lambda r: _rank(r, roots, findings)):
        members = [findings[i] for i in roots[r]]
        root = findings[r]
        rest = [f for f in members if f is not root]
        groups.append([root, *rest])
    return groups


def _is_stall(members: list[int], findings: Sequence[Finding]) -> bool:
    fs = [findings[i] for i in members]
    return _worst(fs) >= SEVERITY_ORDER["error"] and any(f.rule in STALL_RULES for f in fs)


def _rank(r: int, roots: dict[int, list[int]], findings: Sequence[Finding]) -> tuple[int, int, int]:
    members = [findings[i] for i in roots[r]]
    return (-_worst(members), -len(members), r)


# ---------------------------------------------------------------- headlines


def _clock(wall: float | None) -> str:
    return utc_text(wall, "%H:%M:%S UTC", "at an unknown time") if wall else "at an unknown time"


def _oom_phrase(ctx: Context | None, f: Finding) -> str:
    """`cuzk-bench was OOM-killed at 00:57:10 UTC (memory cgroup limit 64 MiB)`, from the kill itself."""
    if ctx is None:
        return f.summary
    lines = {ev.detail for ev in f.evidence if ev.source == "kernel log"}
    for m in reversed(ctx.oom_matches):
        # the latest kill this finding is about (its kernel lines are its evidence): several kills lost
        # by one parent all read the first one's time (found by a helper)
        if m.relevant and m.loser is not None and m.loser in f.pids and (not lines or m.event.line[:400] in lines):
            e = m.event
            n = sum(1 for k in ctx.oom_matches if k.relevant and k.loser == m.loser and k.event.comm == e.comm)
            limit = e.limit_kb // 1024 if e.limit_kb else None
            if limit is None:
                cg = next((c for c in ctx.snapshot.cgroups if e.task_memcg and c.path == e.task_memcg), None)
                limit = cg.limit_bytes // 2**20 if cg is not None and cg.limit_bytes else None
            why = f" (memory cgroup limit {limit} MiB)" if limit else ""
            if not why and e.constraint and "MEMCG" not in e.constraint:
                why = " (the machine ran out of memory)"
            times = f" {n} times, the latest" if n > 1 else ""
            return f"{e.comm or '?'} was OOM-killed{times} at {_clock(e.wall_time)}{why}"
    return f.summary


def _waiters_on(ctx: Context | None, pid: int) -> str | None:
    """`sh (100) waits on it` for a stopped or D-state process some chain ends at."""
    if ctx is None:
        return None
    for s in ctx.stalled_chains:
        if s.chain.end == pid or pid in s.blockers:
            waiters = [p for p in s.chain.pids if p != pid][:3]
            if waiters:
                names = [_name(ctx, p) for p in waiters]
                who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
                return f"{who} {'wait' if len(waiters) > 1 else 'waits'} on it"
    return None


def _name(ctx: Context, pid: int) -> str:
    p = ctx.tree.by_pid.get(pid)
    return f"{p.comm} ({pid})" if p is not None else str(pid)


def incident_headline(root: Finding, consequences: Sequence[Finding], ctx: Context | None) -> str:
    head = _oom_phrase(ctx, root) if root.rule == "oom-killed-child" else root.summary
    if root.rule in STATE_RULES and root.pids:
        waiting = _waiters_on(ctx, root.pids[0])
        if waiting:
            head = f"{head}; {waiting}"
    chained = [c for c in consequences if c.rule in CHAIN_RULES] or list(consequences)
    if not chained:
        return head
    follow = chained[0].summary
    suffix = CAUSE_SUFFIXES.get(root.rule)
    if suffix and follow.endswith(suffix):
        follow = follow[: -len(suffix)]
    return f"{head} → {follow}"


def host_headline(verdict: Verdict, incidents: Sequence[Incident], n_scope: int, error: str | None) -> str:
    """The one line of why: the worst incident's headline, or what a healthy host looks like; an
    undiagnosed host's error. A stall seen by a probe that did not finish is still the stall."""
    if error and not (verdict == "stalled" and incidents):
        return error.splitlines()[0] if error.strip() else error
    if verdict in ("stalled", "degraded") and incidents:
        level = SEVERITY_ORDER["error"] if verdict == "stalled" else SEVERITY_ORDER["warning"]
        serious = [i for i in incidents if _worst(i.findings) >= level]
        first = serious[0] if serious else incidents[0]
        more = len(serious) - 1
        return first.headline + (f" (and {more} more)" if more > 0 else "")
    notes = sum(len(i.findings) for i in incidents)
    tail = f"; {notes} note{'s' if notes != 1 else ''}" if notes else ""
    return f"nothing stalled or at risk among {processes(n_scope)} in scope{tail}"


# ---------------------------------------------------------------- pictures


def edge_label(ctx: Context, edge: WaitEdge) -> str:
    """The words on a drawn edge, before the holder's name; a thread other than the main one that
    waits is named first (`thread 812 (pt_data_worker) writes ...`)."""
    words = _edge_words(ctx, edge)
    if edge.thread is None:
        return words
    p = ctx.graph.process(edge.waiter)
    t = next((t for t in p.threads_detail if t.tid == edge.thread), None) if p is not None else None
    return f"thread {edge.thread}" + (f" ({t.comm})" if t is not None and t.comm else "") + f" {words}"


def _edge_words(ctx: Context, edge: WaitEdge) -> str:
    g = ctx.graph
    if edge.kind == "child":
        return "waits for child"
    if edge.kind in ("pipe", "fifo"):
        p = g.process(edge.waiter)
        reading = not edge.writes
        name = f"FIFO {edge.path}" if edge.kind == "fifo" and edge.path else _pipe_name(p, edge.fd)
        return f"reads {name} held by" if reading else f"writes {name} read by"
    if edge.kind == "fifo-open":
        return "opens a FIFO whose other end is opened by"
    if edge.kind == "file-lock":
        return f"waits for lock on {edge.path} held by" if edge.path else f"waits for {edge.what} held by"
    if edge.kind == "tcp":
        where = edge.socket.remote if edge.socket is not None else "a TCP peer"
        return f"{'polls' if edge.inferred else 'connected to'} {where} (TCP) held by"
    if edge.kind == "unix-socket":
        peer: str | None = edge.peer.local if edge.peer is not None and edge.peer.local else None
        if peer is None and edge.peer is not None:
            peer = f"socket:[{edge.peer.inode}]"
        return f"{'polls' if edge.inferred else 'connected to'} Unix socket {peer or '?'} held by"
    if edge.kind == "fuse":
        return f"waits for {edge.what} served by"
    return f"waits for {edge.what} held by"


def _pipe_name(p: Process | None, fd: int | None) -> str:
    from vastprobe.model import Unavailable

    if p is not None and fd is not None and not isinstance(p.fds, Unavailable):
        for e in p.fds:
            if e.fd == fd:
                return e.target
    return "a pipe"


def _chain_links(ctx: Context, chain: Chain) -> list[WaitLink]:
    links = []
    for a, b in zip(chain.hops, chain.hops[1:], strict=False):
        if a.edge is not None:
            links.append(WaitLink(a.pid, b.pid, edge_label(ctx, a.edge)))
    if chain.dangling is not None:
        links.append(WaitLink(chain.end, None, edge_label(ctx, chain.dangling)))
    return links


def _why(ctx: Context, s: StalledChain) -> str | None:
    if s.kind == "orphan-pipe":
        return "orphan"
    if s.kind == "deadlock":
        return "cycle"
    end = ctx.tree.by_pid.get(s.chain.end)
    if end is not None and end.state in ("T", "t", "D"):
        return _state_word(ctx, s.chain.end)
    if s.dead_end:
        return s.dead_end
    if s.idle:
        return "idle"
    return None


def _state_word(ctx: Context, pid: int) -> str:
    p = ctx.tree.by_pid.get(pid)
    if p is None:
        return "gone"
    return {"T": "stopped", "t": "stopped by a tracer", "D": "uninterruptible", "Z": "zombie"}.get(p.state, "stuck")


def _from_chain(ctx: Context, s: StalledChain, extra: Sequence[int] = ()) -> WaitPicture:
    pids = list(dict.fromkeys((*s.chain.pids, *extra)))
    return WaitPicture(tuple(pids), tuple(_chain_links(ctx, s.chain)), tuple(s.blockers), _why(ctx, s))


def picture(ctx: Context, f: Finding) -> WaitPicture | None:
    """The processes a finding is about, with how they wait on each other; None when there is no chain."""
    if not f.pids:
        return None
    first = f.pids[0]
    if f.rule in CHAIN_RULES:
        s = next((s for s in ctx.stalled_chains if s.waiter == first), None)
        if s is not None:
            return _from_chain(ctx, s, [p for p in f.pids if p in ctx.tree.by_pid])
        return None
    if f.rule in STATE_RULES:
        s = next((s for s in ctx.stalled_chains if s.chain.end == first or first in s.blockers), None)
        if s is not None:
            return _from_chain(ctx, s)
        return _parent_waits(ctx, first)
    if f.rule == "deadlock":
        for cycle in ctx.graph.cycles:
            if set(cycle.pids[:-1]) == set(f.pids):
                return WaitPicture(tuple(cycle.pids[:-1]), tuple(_chain_links(ctx, cycle)), tuple(f.pids), "cycle")
        return None
    if f.rule == "zombie-child":
        return WaitPicture(tuple(f.pids), (), (first,), "does not reap")
    return None


def _parent_waits(ctx: Context, pid: int) -> WaitPicture:
    """A stopped or D-state process and the parents that wait on it."""
    pids: list[int] = [pid]
    links: list[WaitLink] = []
    child = pid
    for parent in ctx.tree.ancestors(pid):
        edge = next((e for e in ctx.graph.edges(parent.pid) if child in e.holders), None)
        if edge is None:
            break
        pids.insert(0, parent.pid)
        links.insert(0, WaitLink(parent.pid, child, edge_label(ctx, edge)))
        child = parent.pid
    return WaitPicture(tuple(pids), tuple(links), (pid,), _state_word(ctx, pid))


# ---------------------------------------------------------------- all of it


def build_incidents(findings: Sequence[Finding], ctx: Context | None) -> tuple[Incident, ...]:
    out = []
    for root, *rest in group_findings(findings):
        pictures = []
        if ctx is not None:
            for f in (root, *rest):
                pic = picture(ctx, f)
                if pic is not None:
                    pictures.append((f, pic))
        out.append(Incident(incident_headline(root, rest, ctx), root, tuple(rest), tuple(pictures)))
    return tuple(out)
