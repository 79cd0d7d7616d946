"""Stalled chains: for each waiting process at the top of the job, the one chain of waits that
explains it best, classified by what ends it (the root blocker), and the evidence that work
should be happening. Rules format these; none walks the graph itself.

One finding per waiter, not one per idle leaf: a shell waiting on three idle jobs has one chain
reported, the best-evidenced one (a deadlock, an orphan holding a pipe, a dead or stopped holder,
an idle holder, an idle job after an OOM kill).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from vastprobe.analysis.gpu import idle_gpus
from vastprobe.analysis.oom import unlogged_kills
from vastprobe.analysis.signal_waiters import STOP_SIGNAL, waits_for_a_signal
from vastprobe.analysis.waitgraph.edges import Chain, Hop, WaitEdge, private_untimed_wait
from vastprobe.analysis.waitgraph.locks import process_title
from vastprobe.analysis.wchan_families import family
from vastprobe.model import Evidence, Process, Syscall

if TYPE_CHECKING:
    from vastprobe.analysis.view import SnapshotView

ChainKind = Literal[
    "child", "orphan-pipe", "tcp", "unix-socket", "file-lock", "fuse", "fifo-open", "deadlock", "db-lock"
]


@dataclass(frozen=True)
class StalledChain:
    kind: ChainKind
    chain: Chain
    edge: WaitEdge | None  # the resource edge that names the root blocker; None for a chain of children
    blockers: tuple[int, ...]  # who ends the wait: the edge's holders, or the chain's end
    idle: bool | None  # nothing from the resource's waiter down made progress over the window; None: one sample
    dead_end: str | None  # why the blocker cannot end it by itself (stopped, gone, orphan), if it cannot
    orphans: tuple[int, ...] = ()  # orphan-pipe: the re-parented writers
    #: why the blocker is proven not to end the wait by itself, seen over the whole window (an idle
    #: server with the waiter's bytes unread, a listener that does not accept, an idle lock holder):
    #: such a chain is a stall from the first diagnosis, with no log or GPU evidence needed
    proof: str | None = None

    @property
    def waiter(self) -> int:
        return self.chain.waiter


@dataclass(frozen=True)
class StallEvidence:
    """Why work should be happening: an OOM kill in the job, a silent log, an idle GPU."""

    evidence: tuple[Evidence, ...]
    oom: bool  # the job lost a process to the OOM killer
    logs_only: bool = False  # all of it is quiet logs (no OOM kill, no idle GPU)

    def __bool__(self) -> bool:
        return bool(self.evidence)


def _related(ctx: SnapshotView, pids: set[int], waiter: int, others: Iterable[int]) -> bool:
    """Whether any of `others` belongs to this chain: in it, below its waiter, or above it."""
    return any(o in pids or ctx.tree.in_subtree(o, waiter) or ctx.tree.in_subtree(waiter, o) for o in others)


def stall_evidence(ctx: SnapshotView, pids: Iterable[int], waiter: int) -> StallEvidence:
    """Evidence that counts for this chain: an OOM kill whose loser is in it or below its waiter; a
    silent log written (held open) by a process related to it, or, when nobody holds the log, any
    log where the scope is the job; an idle GPU that a related process holds, or that the job was
    expected to use where the scope is the job. On a whole host, one silent log or idle GPU does
    not make every idle shell's wait a stall."""
    chain_pids = set(pids)
    bounded = ctx.bounded
    ev: list[Evidence] = []
    oom = False
    for m in ctx.oom_matches:
        if m.loser is not None and (m.loser in chain_pids or ctx.tree.in_subtree(m.loser, waiter)):
            ev.append(Evidence("oom-killed-child", f"{m.event.comm} was OOM-killed; {m.how}"))
            oom = True
    if not oom and bounded and not any(m.relevant for m in ctx.oom_matches):
        # the kernel log no longer holds the kill (rolled over, or not readable): the chain's own
        # memory cgroup counting one is the same loss
        for cg in ctx.snapshot.cgroups:
            if not cg.oom_kill or cg.path in ("/", "") or not unlogged_kills(ctx.snapshot, ctx.oom_matches, cg):
                continue
            inside = [
                p for p in chain_pids if (q := ctx.tree.by_pid.get(p)) and cg.path in (q.memory_cgroup, q.cgroup_v2)
            ]
            if inside:
                ev.append(Evidence("oom-killed-child", f"memory cgroup {cg.path} counts {cg.oom_kill} OOM kill(s)"))
                oom = True
                break
    for h in ctx.log_healths:
        if not h.alarming(ctx.options.stale_after):
            continue
        if (h.writers and _related(ctx, chain_pids, waiter, h.writers)) or (not h.writers and bounded):
            ev.append(Evidence("missing-logs", f"{h.log.path}: {h.state}" + (f", {h.age:.0f}s old" if h.age else "")))
    logs = len(ev) - (1 if oom else 0)
    expected, why = ctx.gpu_expected
    g = ctx.snapshot.gpus
    if expected and g.present and g.error is None:
        holders = ctx.gpu_holders
        # a server waiting for requests holds its model and runs nothing by design: no sign work should
        # be happening (an inference engine waiting on its API process read STALLED; found by a helper)
        if ctx.gpus_serve_requests:
            holders, bounded = [], False
        if (holders and _related(ctx, chain_pids, waiter, holders)) or (not holders and bounded):
            for idle in idle_gpus(ctx.snapshot):
                ev.append(Evidence("idle-gpu", f"GPU {idle.index} idle ({why})"))
    return StallEvidence(tuple(ev), oom, logs_only=bool(ev) and not oom and logs == len(ev))


def _moved(ctx: SnapshotView, pids: Iterable[int], reader: int | None = None) -> bool | None:
    """Whether any of `pids` moved over the window. `reader`: a waiter blocked in a plain read or write
    of the resource (no poll, no timeout), whose wakes count too (Progress.active): such a call returns
    only when the other end delivers, so a wake is the transfer moving. A slow download into memory
    (urllib) counts no tick and no vfs byte, and read "does not answer" (found by a helper). Not a
    poller's wakes (curl's timeout, a client's 1 ms retry) nor a holder's (its timer loop beside workers
    stuck on its own pipes: docs/evidence.md)."""
    if not ctx.two_samples:
        return None
    return any((pr := ctx.progress[pid]).moved or (pid == reader and pr.active) for pid in pids if pid in ctx.progress)


def _reader(edge: WaitEdge) -> int | None:
    """The edge's waiter where it is blocked in a plain read or write of the resource itself."""
    plain = not edge.poll and not edge.inferred and edge.retry is None and not edge.caught_awake
    return edge.waiter if plain and edge.kind in ("tcp", "unix-socket", "pipe", "fifo") else None


def _dead_end(ctx: SnapshotView, edge: WaitEdge | None, end: int) -> str | None:
    g = ctx.graph
    if edge is not None and not edge.holders:
        if edge.kind == "fuse" and not ctx.graph.fuse_servers:
            return "no process holds /dev/fuse: the FUSE server is gone"
        if edge.kind == "fifo-open":
            return "nobody opens the FIFO's other end"
        if edge.retry == "lock-exists":  # torch's FileBaton: it waits for a file nobody holds to go
            return f"no process here has {edge.path} open: a lock file left behind"
        return None
    p = g.process(end)
    if p is not None and ctx.stopped_throughout(p):
        return f"{p.comm} ({p.pid}) is stopped"
    if p is not None and (q := ctx.stopped_below(end)) is not None:
        return f"{p.comm} ({p.pid}) sleeps on a timer, and {q.comm} ({q.pid}) under it is stopped: its work cannot end"
    return None


def _holding(ctx: SnapshotView, pid: int) -> str:
    p = ctx.tree.by_pid.get(pid)
    if p is None:
        return str(pid)
    where = p.wchan if isinstance(p.wchan, str) and p.wchan not in ("", "0") else None
    return f"{p.comm} ({pid}" + (f", asleep in {where})" if p.state == "S" and where else ")")


def _holders(ctx: SnapshotView, holders: tuple[int, ...]) -> tuple[str, bool]:
    """The holders in words, every one counted (`a (1, asleep in x), b (2) and 1 more`), and whether
    they are several: the proof said "x,, b (2) holds" of three (found by a helper)."""
    named = [_holding(ctx, h) for h in holders[:2]]
    more = len(holders) - len(named)
    if more:
        return ", ".join(named) + f" and {more} more", True
    return " and ".join(named), len(named) > 1


def _proof(ctx: SnapshotView, kind: ChainKind, edge: WaitEdge | None, idle: bool | None) -> str | None:
    """Why the chain's blocker is proven not to end the wait by itself, or None. Every proof rests
    on the window: the blocker did nothing over it (no CPU, I/O, context switch or state change), and
    what it holds says it had work waiting that it never took up (docs/evidence.md)."""
    if edge is None or not edge.holders:
        return None
    # a connection the holder accepted: a signal it catches may stop it, never answer the waiter
    serving = (
        kind == "tcp" and edge.socket is not None and all(_serves(ctx, h, edge.socket.remote) for h in edge.holders)
    ) or (
        kind == "unix-socket"
        and all(
            (q := ctx.tree.by_pid.get(h)) is not None and ctx.graph.accepted_unix(q, edge.peer) for h in edge.holders
        )
    )
    if serving and all(_locked_for_ever(ctx, h, serving) for h in edge.holders):
        # before the wakes, the waiter's or the holder's: a threaded server's accepting loop wakes on its
        # timer and answers nobody, whatever its client does between its own (curl's 1 s poll counted a
        # tick, the loop another, and the client read HEALTHY, no finding: a CI flake under load)
        return _locked_words(ctx, edge.holders)
    if not idle:
        # the waiter moved (a client polling with a 1 ms timeout burns CPU), yet a holder locked for ever
        # that did nothing itself proves it: the client read HEALTHY, no finding (found by a helper)
        # one sample (--sample 0): the state is the proof, as fork-deadlock's own finding takes it (a curl
        # on a server whose handler deadlocked read HEALTHY, a note; found by a helper)
        still = idle is None or _moved(ctx, edge.holders) is False
        if still and all(_locked_for_ever(ctx, h, serving) for h in edge.holders):
            return _locked_words(ctx, edge.holders)
        if not (edge.caught_awake and edge.listener is not None):
            return None
        # a client caught running, then asleep, queued at a listener whose holders did nothing over the
        # window (graph._caught_awake_on): its own wakes do not accept it; the listener's proof below does
    if any(ctx.runnable_throughout(h) for h in edge.holders):
        # runnable at every read, yet no CPU tick counted: waiting for a CPU, not blocked. On a loaded
        # machine a server back from its handler's sleep read so, its queued client STALLED (a CI flake);
        # one throttled by its cgroup's CPU quota as well
        return None
    if all(ctx.wakes_by_itself(h) or ctx.on_timer_beside_unread(h) for h in edge.holders):
        # asleep on a timer, it moves again by itself: a server whose handler sleeps 2 s, a lock holder
        # between steps (`echo; sleep 3`) did nothing over a 1 s window and read STALLED (found by a
        # helper). Every holder: the waiter needs each to let go, and one that sleeps on a timer does
        # not free a co-holder that is stuck (a shared flock, a listener a `sleep` child inherited). Its
        # main thread on a timer beside threads the probe's bound left unread (a busy host) proves
        # nothing either
        return None
    window = f"{ctx.snapshot.sample_window:.1f}s"
    who, several = _holders(ctx, edge.holders)
    holds = "hold" if several else "holds"
    if all(_locked_for_ever(ctx, h, serving) for h in edge.holders):
        # fork-deadlock's proof, whatever the holder holds: a download from a server that is, read HEALTHY
        # when the job was named (the server out of scope), STALLED for the whole host (found by a helper)
        return _locked_words(ctx, edge.holders)
    if kind in ("tcp", "unix-socket"):
        if edge.listener is not None and edge.listener.recv_queue:
            return (
                f"{who} {holds} the listening socket {edge.listener.local} with {edge.listener.recv_queue} "
                f"connection(s) in its accept queue, and accepted none over {window}"
            )
        unread = edge.peer.recv_queue if edge.peer is not None else None
        if unread:
            return f"{who} did not read the {unread} B sent to it over {window}: the request sits in its receive queue"
        return None
    if kind == "file-lock" and edge.retry != "sqlite-wal":  # a WAL reader between queries looks the same
        return f"{who} {holds} the lock and did nothing over {window}"
    if kind == "fuse" and all(_awaits_requests_only(ctx, h) for h in edge.holders):
        return (
            f"every thread of {who} waits for its next request (fuse_dev_do_read) over {window}: the request was "
            "read, and nothing works on it"
        )
    if kind == "db-lock":
        stopped = [q for h in edge.holders if (q := ctx.tree.by_pid.get(h)) is not None and ctx.stopped_throughout(q)]
        if edge.holders and len(stopped) == len(edge.holders):
            # every session that could hold it is stopped: whichever holds it cannot finish (a holder
            # SIGSTOPped mid-statement read DEGRADED, exit 0; found by a helper)
            return (
                f"{who} {'are' if several else 'is'} stopped over {window}: no session that could hold the lock "
                "can finish its statement or release it"
            )
        titles = [process_title(ctx.tree.by_pid[h]) for h in edge.holders]
        idle_tx = [h for h, t in zip(edge.holders, titles, strict=True) if "idle in transaction" in t]
        if idle_tx and not any(_client_goes_on(ctx, h) for h in idle_tx):
            return (
                f"session {idle_tx[0]} is idle in a transaction over {window}: it keeps its locks until its client "
                "commits or rolls back"
            )
        if len(titles) == 1 and titles[0].endswith(" idle"):
            # the one session of the database that could hold it (none is in a transaction or running a
            # statement): a session-level lock, held until released or the session ends
            return (
                f"session {edge.holders[0]}, the database's only other session, is idle over {window}: a "
                "session-level lock (pg_advisory_lock) is held until it is released or the session ends"
            )
    return None


def _locked_words(ctx: SnapshotView, holders: tuple[int, ...]) -> str:
    who, several = _holders(ctx, holders)
    # said only where it holds: a threaded server's accepting loop may count a tick on its timer
    still = f", and did nothing over {ctx.snapshot.sample_window:.1f}s" if _moved(ctx, holders) is False else ""
    caught = sorted(
        {
            sig
            for h in holders
            if (p := ctx.tree.by_pid.get(h))
            for sig in waits_for_a_signal(p, ctx.tree.by_pid.get(p.ppid))
        }
    )
    signal = f"; a signal it catches ({', '.join(caught[:3])}) may end it, not answer the waiter" if caught else ""
    threaded = [p for h in holders if (p := ctx.tree.by_pid.get(h)) is not None and p.threads > 1]
    if threaded and not several:
        p = threaded[0]
        locked = [t.who for t in ctx.graph.tasks(p) if private_untimed_wait(t.syscall) is not None]
        return (
            f"{p.comm} ({p.pid}) serves the connection, and every thread of it but its accepting loop waits for ever "
            f"on a lock no thread of its own can release ({', '.join(locked[:3])}: a private futex wait with no "
            f"timeout), the loop waiting for new connections alone{still}{signal}"
        )
    return (
        f"{who} {'wait' if several else 'waits'} for ever on a lock no thread of {'their' if several else 'its'} "
        f"own can release (one thread, in a private futex wait with no timeout){still}{signal}"
    )


def _locked_for_ever(ctx: SnapshotView, pid: int, serving: bool = False) -> bool:
    """docs/rules/fork-deadlock.md's proof: one thread, asleep on a private futex with no timeout (no
    other process can wake it, and no thread of its own is left to), and no handler of a signal that
    could (a service waiting to be told to stop). `serving`: the waiter is a client on a connection it
    accepted, which a SIGTERM may end but never answer (curl on a uvicorn whose handler took a lock twice
    read HEALTHY, uvicorn catching SIGTERM; found by a helper). Any other handler may be how it works:
    SIGUSR1 sends a publisher's next event, SIGALRM answers at its time (found by a helper). A threaded
    server whose handlers all wait on locks is no proof: the thread its accepting loop starts for the
    next request may release them, as a long poll's publish does (thread-deadlock's warning)."""
    p = ctx.tree.by_pid.get(pid)
    if p is None or p.state != "S":
        return False
    if not (p.threads == 1 and private_untimed_wait(p.syscall) is not None):
        return False
    signals = waits_for_a_signal(p, ctx.tree.by_pid.get(p.ppid))
    return not signals or (serving and signals == [STOP_SIGNAL])


def _client_goes_on(ctx: SnapshotView, backend: int) -> bool:
    """The client of a backend idle in a transaction, on this host, at work over the window or asleep on a
    timer: it commits when its step ends. A transaction whose client computed, or slept between steps,
    was taken for one left open, and its waiter read STALLED (found by a helper, real PostgreSQL)."""
    client = ctx.graph.socket_peer(backend)
    if client is None:
        return False
    family = (client, *(d.pid for d in ctx.tree.descendants(client)))  # `\! step` in psql: its child
    return any((pr := ctx.progress.get(q)) is not None and pr.moved for q in family) or ctx.wakes_by_itself(client)


def _serves(ctx: SnapshotView, pid: int, remote: str) -> bool:
    """Whether `pid` accepted the connection whose other end is `remote` (a server's end): not one it
    opened itself (the client of an echo server waiting for its next line), nor a socketpair."""
    p = ctx.tree.by_pid.get(pid)
    return p is not None and ctx.graph.accepted(p, remote)


def _awaits_requests_only(ctx: SnapshotView, pid: int) -> bool:
    """Every thread of a FUSE server waits to read its next request. A request is read off the queue
    by a waiting reader at once, so the waiter's request was read, and no thread is answering it (a
    server with its backend call under way has that thread elsewhere). Every thread must have been
    read: one not listed may be the one working."""
    p = ctx.tree.by_pid.get(pid)
    tasks = ctx.graph.all_tasks(p) if p is not None else None
    return tasks is not None and all(
        t.state == "S" and isinstance(t.wchan, str) and family(t.wchan) in ("fuse_dev_do_read", "fuse_dev_read")
        for t in tasks
    )


def _adopted_sibling(ctx: SnapshotView, writer: Process, reader: Process) -> bool:
    """A writer that shares the reader's parent, and that parent a PID namespace's init seen from
    outside (a container's shell): a live pipeline's producer is such a sibling too, but a shell
    forks a pipeline from left to right, so its producer starts before its reader; a writer that
    started after the reader was forked by something else and adopted by the init when that ended
    (a launcher's daemon holding the pipe it inherited)."""
    parent = ctx.tree.by_pid.get(writer.ppid)
    ns_init = parent is not None and parent.pid != 1 and bool(parent.nspid) and parent.nspid[-1] == 1
    return ns_init and writer.starttime > reader.starttime


def _orphan_writers(ctx: SnapshotView, edge: WaitEdge) -> tuple[int, ...]:
    """The writers of a pipe or FIFO the waiter reads, when every one is an orphan that is neither
    the reader's ancestor nor its sibling (a live pipeline's producer is a sibling). A pipe among
    others a loop polls counts only where every fd it polls is such a pipe (_polls_orphaned_only)."""
    if edge.poll and not _polls_orphaned_only(ctx, edge):
        return ()
    return _orphans_of(ctx, edge)


def _polls_orphaned_only(ctx: SnapshotView, edge: WaitEdge) -> bool:
    """The waiter polls exactly its poll edges (poll's count of fds is theirs), and each is a pipe it
    reads whose writers are all orphans: `subprocess.run(capture_output=True)` of a launcher that
    left a daemon behind holding its stdout and stderr, which communicate() polls for ever. It read
    HEALTHY (found by a helper); a poll over anything else may end by another fd."""
    g = ctx.graph
    p = g.process(edge.waiter)
    if p is None:
        return False
    task = next((t for t in g.tasks(p) if t.tid == edge.thread), None)
    sc = task.syscall if task is not None and isinstance(task.syscall, Syscall) else None
    polled = [e for e in g.edges(edge.waiter) if e.poll and e.thread == edge.thread]
    if sc is None or sc.name not in ("poll", "ppoll") or len(sc.args) < 2 or sc.args[1] != len(polled):
        return False
    return all(e.kind in ("pipe", "fifo") and not e.writes and _orphans_of(ctx, e) for e in polled)


def _orphaned_poll(ctx: SnapshotView, chain: Chain) -> bool:
    """A chain through a poll over pipes that only orphans hold: sure, though it goes through a poll
    (settle drops a chain of polls alone, a poller among pollers)."""
    return any(e.poll and _polls_orphaned_only(ctx, e) for e in chain.edges)


def _orphans_of(ctx: SnapshotView, edge: WaitEdge) -> tuple[int, ...]:
    g = ctx.graph
    reader = g.process(edge.waiter)
    if reader is None or edge.kind not in ("pipe", "fifo") or edge.writes or not edge.holders:
        return ()
    ancestors = {a.pid for a in ctx.tree.ancestors(reader.pid)}
    out = []
    for h in edge.holders:
        w = g.process(h)
        if w is None or h == reader.pid or h in ancestors or not g.orphan(w):
            return ()
        if w.ppid == reader.ppid and not _adopted_sibling(ctx, w, reader):
            return ()
        if w.ppid == reader.pid:
            return ()  # an init reading its own child's output: an adopted orphan looks the same as a real child
        out.append(h)
    return tuple(out)


def _classify(ctx: SnapshotView, chain: Chain) -> StalledChain:
    if chain.cycle:
        at = chain.pids.index(chain.end)
        if at > 0:  # it leads into a cycle it is not part of: its wait is what it meets on the way there
            entry = chain.pids[at]
            before = _classify(ctx, Chain((*chain.hops[:at], Hop(entry, None))))
            loop = " -> ".join(_holding(ctx, pid) for pid in chain.pids[at:])
            return replace(before, dead_end=before.dead_end or f"{_holding(ctx, entry)} waits in a cycle: {loop}")
        return StalledChain("deadlock", chain, chain.edges[-1] if chain.edges else None, chain.pids[:-1], None, None)
    for i, edge in enumerate(chain.edges):
        orphans = _orphan_writers(ctx, edge)
        if orphans:
            rest = chain.pids[i + 1 :]
            moved = _moved(ctx, [edge.waiter, *rest])
            return StalledChain(
                "orphan-pipe", chain, edge, orphans, None if moved is None else not moved, "orphan", orphans
            )
    resource = chain.resource_edges()
    db = next((e for e in resource if e.kind == "db-lock"), None)
    if db is not None:  # the database's own lock, likely holders named: that is the story
        if not db.holders:
            return _db_lock_unheld(ctx, chain, db)
        moved = _moved(ctx, db.holders)
        idle = None if moved is None else not moved
        return StalledChain("db-lock", chain, db, db.holders, idle, None, proof=_proof(ctx, "db-lock", db, idle))
    if not resource:
        moved = _moved(ctx, chain.pids[1:])
        return StalledChain(
            "child", chain, None, (chain.end,), None if moved is None else not moved, _dead_end(ctx, None, chain.end)
        )
    edge = resource[-1]
    kind: ChainKind = edge.kind if edge.kind in ("tcp", "unix-socket", "file-lock", "fuse", "fifo-open") else "child"  # type: ignore[assignment]
    if edge.kind in ("pipe", "fifo"):
        kind = "child"  # a pipe to a live process: its writer's progress decides, like a child's
    # The waiter on the resource counts as well: a download from a slow server moves only on the
    # client's side (the server's send() shows in no counter, its sending thread in no CPU tick);
    # not a waiter that polls a lock (SQLite's busy handler): its CPU is the retrying itself
    pids = chain.pids
    start = pids.index(edge.waiter) if edge.waiter in pids else len(pids)
    polls = edge.kind == "file-lock" and edge.inferred
    # a relay's far end too (socat before a redis in BLPOP): the relay sits still while the server it
    # passes the wait on to works or wakes; the same wait straight to the server read HEALTHY, through
    # the relay DEGRADED, "socat does not answer" (found by a helper)
    relayed = [r for h in edge.holders for r in ctx.graph.relay_ends(h)] if kind == "tcp" else []
    # and what the chain's end polls, where the chain stops at it (an sshd session over the pipes of the
    # command it runs): that command at work is the chain moving (`ssh host python3 compute.py` read
    # STALLED, "sshd does not answer", while compute.py computed; found by a helper)
    polled = (
        [h for e in ctx.graph.edges(chain.end) if e.poll for h in e.holders] if kind in ("tcp", "unix-socket") else []
    )
    beyond = [*edge.holders, *relayed, *polled, *pids[start + 1 if polls else start :]]
    moved = _moved(ctx, beyond, _reader(edge)) if beyond else None
    dead_end = _dead_end(ctx, edge, chain.end)
    frozen = dead_end is not None and chain.end not in edge.holders and edge.holders
    idle = None if moved is None else not moved
    return StalledChain(
        kind,
        chain,
        edge,
        (chain.end,) if frozen else edge.holders or (chain.end,),
        idle,
        dead_end,
        proof=_proof(ctx, kind, edge, idle),
    )


def _db_lock_unheld(ctx: SnapshotView, chain: Chain, db: WaitEdge) -> StalledChain:
    """A backend waiting for a lock that no session of its database could hold: none in a transaction,
    running a statement or idle. Every session has a backend here (its client may be elsewhere), so
    what holds it has no process: a prepared transaction, which keeps its locks until COMMIT PREPARED
    or ROLLBACK PREPARED. Such a wait read HEALTHY, no finding (found by a helper). A dead end where the
    backend waited throughout the window; one sample is a wait seen once."""
    moved = _moved(ctx, [db.waiter])
    idle = None if moved is None else not moved
    dead = (
        "no session of its database could hold the lock (none in a transaction, running a statement or idle): "
        "likely a prepared transaction, held until COMMIT PREPARED or ROLLBACK PREPARED"
        if idle
        else None
    )
    return StalledChain("db-lock", chain, db, (db.waiter,), idle, dead)


_RANK = {"deadlock": 0, "orphan-pipe": 1, "db-lock": 1}


def _score(s: StalledChain, oom_losers: set[int]) -> tuple[int, int, int, int, int, int, int, int]:
    return (
        _RANK.get(s.kind, 2),
        0 if s.dead_end else 1,
        # a chain whose blocker is proven not to move over the window (a listener that accepts none
        # with a connection queued) before one that only went quiet: a job's two clients of one
        # blocked server kept the quiet one, and read HEALTHY (found by a helper)
        0 if s.proof else 1,
        0 if s.idle else 1,
        0 if oom_losers & set(s.chain.pids) else 1,
        # a chain that loops back into itself through a process that can still act (git's threads)
        # explains less than one that reaches an end: ssh's session to the other host under git clone
        1 if s.chain.end in s.chain.pids[:-1] and s.kind != "deadlock" else 0,
        # a wait on a connection, a lock or a mount says more than "waits on an idle child": a
        # launcher of two ranks, one waiting on the other's server (which waits in accept()
        # for a rank that never came), is stalled on that connection
        0 if s.edge is not None else 1,
        -len(s.chain.hops),  # of two chains equally sure, the one that explains further
    )


def top_waiters(ctx: SnapshotView) -> list[int]:
    """In-scope processes that wait on something we can follow, and whose own parent (in scope)
    is not already waiting on them: they start the chains."""
    g = ctx.graph
    out = []
    for p in ctx.in_scope():
        if not g.edges(p.pid):
            continue
        parent = ctx.tree.by_pid.get(p.ppid)
        if parent is not None and parent.pid in ctx.scope and g.waits_on_jobs(parent) and p in g.jobs(parent):
            continue
        out.append(p.pid)
    return out


def _started(ctx: SnapshotView, pid: int) -> int:
    p = ctx.tree.by_pid.get(pid)
    return p.starttime if p is not None else 0


def _another_end_goes_on(ctx: SnapshotView, best: StalledChain, chains: list[StalledChain]) -> bool:
    """A pipe or FIFO with several writers (or, full, several readers) waits on any one of them: where
    another end, found on a chain of its own, moved over the window or sleeps on a timer, the one that
    cannot move proves nothing. A queue's consumer fed by two producers, one stopped and the other
    putting an item every 2 s, read STALLED, exit 1, while it consumed (found by a helper)."""
    if best.dead_end is None:
        return False
    edges = best.chain.edges
    at = next((i for i, e in enumerate(edges) if e.kind in ("pipe", "fifo") and len(e.holders) >= 2), None)
    if at is None:
        return False
    # the same way to that pipe (a wrapper's wait for its child first: `timeout 60 cat fifo`), on to another end
    return any(
        s.chain.edges[: at + 1] == edges[: at + 1]
        and s.dead_end is None
        and (s.idle is False or ctx.wakes_by_itself(s.chain.end) or ctx.flow_on_deadline(s.chain.end))
        for s in chains
        if s is not best
    )


def stalled_chains(ctx: SnapshotView) -> list[StalledChain]:
    """The best chain of each top waiter; a waiter already inside a reported chain is not reported
    again, nor one below a reported chain whose root blocker it waits on too (multiprocessing's idle
    workers reading the task pipe of a pool stuck in a lock). Chains where work visibly goes on (any
    process after the waiter moved) rank last."""
    oom_losers = {m.loser for m in ctx.oom_matches if m.loser is not None}
    candidates: list[StalledChain] = []
    for w in top_waiters(ctx):
        settled = (c if _orphaned_poll(ctx, c) else ctx.graph.settle(c) for c in ctx.graph.chains(w))
        chains = [_classify(ctx, c) for c in settled if c is not None]
        if not chains:
            continue
        best = min(chains, key=lambda s: _score(s, oom_losers))
        polls_stopped = best.dead_end is not None and bool(best.chain.edges) and best.chain.edges[0].inferred
        if best.kind == "child" and not polls_stopped and any(s.kind == "child" and s.idle is False for s in chains):
            continue  # a waiter whose jobs still work is waiting as it should (not its loop's `sleep 1` beside
            # the stopped process it polls for: `while kill -0 P`)
        if _another_end_goes_on(ctx, best, chains):
            continue
        candidates.append(best)
    # the longest first; among equals, the waiter nearest the top of the tree, then the oldest (not
    # the lowest pid: PIDs wrap, and a pool's worker started after the wrap came before its pool's
    # entrypoint and was reported instead of it)
    candidates.sort(
        key=lambda s: (-len(s.chain.hops), sum(1 for _ in ctx.tree.ancestors(s.waiter)), _started(ctx, s.waiter))
    )
    covered: set[int] = set()
    out = []
    for s in candidates:
        if s.waiter in covered:
            continue
        if s.chain.end in covered and any(ctx.tree.in_subtree(s.waiter, c) for c in covered if c != s.waiter):
            continue  # a worker of a reported chain waiting on its stuck parent: a consequence, not news
        covered.update(s.chain.pids)
        out.append(s)
    return out
