"""The wait-for graph itself: each process's edges (the kind of its wait picks the edge module that
derives them), the chains they make from a waiter to its root blocker, and the loops among them
(deadlocks, and loops of full pipes that another thread might still drain)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from functools import cached_property

from vastprobe.analysis.progress import progress
from vastprobe.analysis.tree import ProcessTree
from vastprobe.analysis.waitgraph.edges import (
    Chain,
    Hop,
    Task,
    WaitEdge,
    main_task,
    untimed_futex,
)
from vastprobe.analysis.waitgraph.fuse import FuseEdges
from vastprobe.analysis.waitgraph.locks import LockEdges
from vastprobe.analysis.waitgraph.pidwatch import watched_pid
from vastprobe.analysis.waitgraph.pipes import PipeEdges
from vastprobe.analysis.waitgraph.polls import PollEdges
from vastprobe.analysis.waitgraph.pylocks import PyLockEdges
from vastprobe.analysis.wchan_families import WaitKind, wait_kind
from vastprobe.model import Evidence, HostSnapshot, Process, Syscall

#: The most CPU a process caught running may have used over the window and still be taken to wait
#: on its one connection: a client polling with a 1 ms timeout uses a few percent, a job at work more
CAUGHT_AWAKE_CPU_SHARE = 0.2
MAX_CHAINS = 32
MAX_DEPTH = 64
#: processes one chain search visits at most (poll edges make the graph dense)
MAX_VISITS = 4096


def _waits_for_a_child(t: Task) -> bool:
    """A thread in wait4/waitid by its wait channel (task_kind reads a thread's as a signal wait)."""
    return wait_kind(t.wchan if isinstance(t.wchan, str) else None, None) == "child"


def _awake_at_first_read(p: Process) -> str | None:
    """How the first read caught `p` awake, if it did: running, or asleep in its stat but woken by the
    time its wait channel was read (none, and its system call running): no wait of its own to follow."""
    if p.state == "R":
        return "running"
    if p.state == "S" and p.wchan in ("0", "") and isinstance(p.syscall, Syscall) and p.syscall.running:
        return "awake between two calls"
    return None


def _loop_of(ch: Chain) -> tuple[Hop, ...]:
    """The hops of a chain that leads back into itself, from where it comes back to."""
    return ch.hops[ch.pids.index(ch.hops[-1].pid) :]


def _loop_key(loop: tuple[Hop, ...]) -> tuple[int, ...]:
    """A loop's members from its smallest pid on: the same loop found from any member."""
    pids = [h.pid for h in loop[:-1]]
    i = pids.index(min(pids))
    return tuple(pids[i:] + pids[:i])


class WaitGraph(PipeEdges, PollEdges, LockEdges, PyLockEdges, FuseEdges):
    """What each process waits on, and the chains of waits: built once per snapshot, edges on demand."""

    def __init__(self, snapshot: HostSnapshot, tree: ProcessTree) -> None:
        super().__init__(snapshot, tree)
        self._edges: dict[int, tuple[WaitEdge, ...]] = {}

    def edges(self, pid: int) -> tuple[WaitEdge, ...]:
        found = self._edges.get(pid)
        if found is None:
            p = self.tree.by_pid.get(pid)
            found = self._edges[pid] = tuple(self._derive(p)) if p is not None else ()
        return found

    def socket_peer(self, pid: int) -> int | None:
        """The process at the other end of the connection `pid` waits on, when it is here: a PostgreSQL
        backend's client."""
        for edge in self.edges(pid):
            if edge.kind in ("unix-socket", "tcp") and edge.holders:
                return edge.holders[0]
        return None

    def tcp_waits(self, pid: int) -> Iterator[WaitEdge]:
        """`pid`'s waits on one TCP connection it is blocked on (not one fd of a poll over several),
        its socket's remote end known: where a run of hosts follows it."""
        for e in self.edges(pid):
            if e.kind == "tcp" and not e.poll and e.socket is not None and e.socket.remote:
                yield e

    def _derive(self, p: Process) -> Iterator[WaitEdge]:
        main = main_task(p)
        kind = self.kind(p)
        if kind == "child":
            jobs = self.jobs(p)
            if jobs:
                yield WaitEdge(p.pid, "child", tuple(k.pid for k in jobs), "its children's exit")
                yield from self._pid_watch_edges(p)  # `while kill -0 P; do sleep 1; done`: its sleep, and P
            return
        found = list(self._task_edges(p, main, kind))
        if kind == "event-loop":
            # one connection and nothing else to wait on: curl, psql (the single edge says more);
            # several pipes and connections: ssh's sshd session, rsync
            polled = list(self._poll_edges(p, main))
            if not found or len(polled) > 1 or (polled and polled[0].socket is None):
                found = polled
        elif kind == "sleep" and not found:
            retries = (self._py_lock_edge(p, main), self._sqlite_busy_edge(p), self._app_lock_edge(p))
            found = [e for e in retries if e is not None][:1] or list(self._pid_watch_edges(p))
        elif kind is None and not found:
            # caught awake (no wait channel: inside an attempt, between two sleeps): a Python polling
            # lock's frame on its stack says it is in the retry loop all the same
            found = [e for e in (self._py_lock_edge(p, main), self._caught_awake_on(p)) if e is not None][:1]
        if kind == "event-loop":
            found += [e for e in (self._db_lock_edge(p),) if e is not None]
        yield from found
        if kind in ("pipe-read", "pipe-write") and self._loops_back(p, found):
            # a pipe to a helper it feeds from another thread (git's fetch: index-pack's output read while
            # the demux thread feeds it from the server): that thread's read of a connection whose other
            # end cannot move holds the whole loop; a clone behind a stopped upload-pack read HEALTHY
            # (found by a helper). Only such a loop: a side thread's telemetry to a stopped server, beside
            # a child that computes, holds nothing the job needs (found by a helper)
            yield from self._frozen_reads(p)
        sealed = kind == "event-loop" and self.sealed_loop(p, main)
        if found and not sealed:
            return
        # a loop sealed apart from its children polls their pipes (inferred edges, which make no cycle);
        # its child watcher's wait is a firm one: `await proc.stdout.read()` from a cat whose stdin it
        # never closed read HEALTHY (found by a helper)
        if kind in ("pipe-read", "pipe-write", "fifo-open", "file-lock", "fuse", "event-loop", "sleep") and not sealed:
            return  # an event loop or a sleep can act by itself: its threads' waits are not the process's
        if kind == "futex" and isinstance(p.syscall, Syscall) and not untimed_futex(p.syscall):
            return  # a futex wait with a timeout (Event.wait(5), a join with a timeout): it wakes and acts
        # the main thread waits for another thread (a futex with no timeout: a join, a lock) or on
        # nothing we follow: another thread may be held by a full pipe or socket (multiprocessing's queue feeder, a loader thread), a lock or a FUSE
        # server. Threads that wait to read are left out: a result handler waiting for input is how
        # a pool idles, and following it leads round the pool and back
        for t in self.tasks(p)[1:]:
            tk = self.task_kind(p, t)
            if sealed and _waits_for_a_child(t):
                # the loop wakes when this thread sees a child end (asyncio's child watcher): its wait is
                # the process's
                yield from self._watcher_edge(p, t)
            elif tk in ("pipe-write", "socket-write", "file-lock", "fuse"):
                yield from self._task_edges(p, t, tk)
            elif tk == "sleep" and (edge := self._py_lock_edge(p, t)) is not None:
                yield edge  # a worker thread keeps trying a Python polling lock (--py-spy)
            elif tk == "socket-read":
                # a thread reading a connection whose other end cannot move (a prefetch thread's download
                # from a stopped server), or a threaded relay's pump reading what it opened (a TCP proxy)
                edge = self._socket_edge(p, t)
                if edge is not None and (
                    any(self._frozen(h) for h in edge.holders) or (self.relayed(p) and self._relay_keeps(p, edge))
                ):
                    yield edge
            elif tk == "pipe-read":
                # a reader thread of a pipe whose every writer cannot move (stdin read in a thread, behind a
                # stopped producer: HEALTHY, no finding; found by a helper); a pool's result handler reading
                # live workers is how it idles, and is left out
                yield from (e for e in self._task_edges(p, t, tk) if e.holders and all(map(self._frozen, e.holders)))
            elif tk == "event-loop" and not sealed:
                # a transport thread's event loop (gRPC's, an HTTP client's I/O thread) whose every end cannot
                # move, the main thread waiting on its result: a grpcio stream from a stopped server read
                # HEALTHY, no finding (found by a helper). Every end: a loop that also watches a live
                # connection still to answer waits on that one (a stopped side service beside it read
                # STALLED, and the request was answered; found by a helper)
                polled = list(self._poll_edges(p, t))
                if polled and all(e.holders and all(map(self._frozen, e.holders)) for e in polled):
                    yield from (e for e in polled if e.socket is not None)

    def waits_for_children(self, p: Process) -> bool:
        """Its wait is for its children: in wait4/sigsuspend, or an event loop nothing else can wake
        beside a thread waiting for a child (asyncio's child watcher, `to_thread(subprocess.run)`): a
        job whose step sleeps on a timer read STALLED there, DEGRADED without asyncio (found by a helper)."""
        kind = self.kind(p)
        if kind == "child":
            return True
        if kind != "event-loop" or not self.sealed_loop(p, main_task(p)):
            return False
        return any(_waits_for_a_child(t) for t in self.tasks(p)[1:])

    def _watcher_edge(self, p: Process, t: Task) -> Iterator[WaitEdge]:
        jobs = self.jobs(p)
        if jobs:
            # sealed by a pipe its children read, watched too (asyncio's on a child's stdin): said so, not "alone"
            ends = self.children_pipe_ends(p, main_task(p))
            also = {frozenset(): "", frozenset("w"): " and a pipe only its children read",
                    frozenset("r"): " and a pipe only its children write"}.get(ends, " and pipes only its children "
                                                                                  "read or write")  # fmt: skip
            ev = (
                Evidence("/proc/syscall", f"{p.pid} ({p.comm}): its event loop waits with no timeout on its own "
                                          f"wake-up channel{also or ' alone'} (the epoll interest list)"),
                Evidence("/proc/wchan", f"{t.who} waits in {t.wchan} for a child to end"),
            )  # fmt: skip
            yield WaitEdge(p.pid, "child", tuple(k.pid for k in jobs), "its children's exit", ev, thread=t.tid)

    def _pid_watch_edges(self, p: Process) -> Iterator[WaitEdge]:
        """Its wait on a process its command line says it polls for the exit of (tail --pid)."""
        watched = watched_pid(p)
        if watched is None:
            return
        pid, how = watched
        q = self.tree.by_pid.get(pid)
        if q is None or pid == p.pid or q.ppid == p.pid:
            return
        ev: tuple[Evidence, ...] = (
            Evidence("/proc/cmdline", f"{p.pid} ({p.comm}) polls for {self._label(pid)} to exit: {how}"),
        )
        parent = self.tree.by_pid.get(q.ppid)
        if q.state == "Z" and parent is not None and parent.pid != p.pid:
            # exited, not reaped: it is there (kill -0 answers) until its parent reaps it, so the wait is
            # on the parent. tail --pid of a zombie whose parent is stopped read HEALTHY (found by a helper)
            ev = (
                *ev,
                Evidence("/proc/stat", f"{pid} exited (Z): it goes when its parent {self._label(parent.pid)} reaps it"),
            )
            yield WaitEdge(p.pid, "child", (parent.pid,), f"the exit of {pid}, which it polls for ({how}), reaped by "
                           f"{parent.pid}", ev, inferred=True)  # fmt: skip
            return
        yield WaitEdge(p.pid, "child", (pid,), f"the exit of {pid}, which it polls for ({how})", ev, inferred=True)

    def _caught_awake_on(self, p: Process) -> WaitEdge | None:
        """Awake at the first read (running, or woken between its stat and its wait channel) and asleep
        or awake again at the last, its only connection's other end held by a process that cannot move
        (stopped, in D, one thread locked for ever, a threaded server whose every handler is), having used
        little CPU and moved no byte: it waits there whatever it did between. A client polling with a
        1 ms timeout, caught running, read HEALTHY beside a stopped server (found by a helper; a test's
        flake in CI); caught awake at both reads, 1 read in 10 still did. curl caught at its 1 s poll's
        wake beside a gunicorn worker whose handler is locked read HEALTHY (a CI flake)."""
        first = _awake_at_first_read(p)
        if first is None or p.threads != 1 or len(p.samples) < 2 or p.last.state not in ("S", "R"):
            return None  # one thread: in a threaded one, the running main thread says nothing of the others
        window = self.snapshot.sample_window * self.snapshot.host.clk_tck
        moved = progress(p, len(p.samples))
        if window <= 0 or moved.io_bytes or moved.cpu_ticks >= window * CAUGHT_AWAKE_CPU_SHARE:
            # at work over the window (a job at 30% of a CPU, logging, beside an idle connection to a stopped
            # server read STALLED 3 runs of 34; found by a helper): whatever its connection, it does not wait there
            return None
        edge = self._poll_socket_edge(p)
        if edge is None or not edge.holders:
            return None
        if not all(
            self._frozen(h) or self._locked(h) or self.handlers_locked(h) for h in edge.holders
        ) and not self._queued_at_still(edge):
            return None
        last = "asleep at the last" if p.last.state == "S" else "running again at the last"
        used = f" (it used {moved.cpu_ticks / window:.0%} of a CPU over the window)" if p.last.state == "R" else ""
        seen = Evidence("/proc/stat", f"{p.pid} ({p.comm}) was {first} at the first read, {last}{used}")
        return replace(edge, evidence=(seen, *edge.evidence[1:]), caught_awake=True)

    def _queued_at_still(self, edge: WaitEdge) -> bool:
        """The connection sits in a listener's accept queue, and every holder of that listener did
        nothing over the window: the listener proof (analysis.stalls) then judges it. A curl queued
        behind an asyncio server whose handler blocked its loop, caught running, read HEALTHY (a CI flake)."""
        if edge.listener is None or not edge.listener.recv_queue:
            return False
        for h in edge.holders:
            q = self.tree.by_pid.get(h)
            if q is None or len(q.samples) < 2 or progress(q, len(q.samples)).moved:
                return False
        return True

    def _loops_back(self, p: Process, found: list[WaitEdge]) -> bool:
        """The pipe `p` waits on is held by a process that waits on a pipe `p` holds (git and its
        index-pack), which another thread of `p` must feed."""
        for e in found:
            for h in e.holders:
                q = self.tree.by_pid.get(h)
                if q is None or h == p.pid:
                    continue
                hk = self.task_kind(q, main_task(q))
                if hk in ("pipe-read", "pipe-write") and any(
                    p.pid in back.holders for back in self._pipe_edges(q, hk, main_task(q))
                ):
                    return True
        return False

    def _frozen_reads(self, p: Process) -> Iterator[WaitEdge]:
        """The threads but the main one reading a connection whose other end cannot move (stopped, D)."""
        for t in self.tasks(p)[1:]:
            if self.task_kind(p, t) == "socket-read":
                edge = self._socket_edge(p, t)
                if edge is not None and any(self._frozen(h) for h in edge.holders):
                    yield edge

    def waits_on_itself(self, p: Process, t: Task) -> bool:
        """One thread of `p` waits on what only `p` holds (a pipe only it writes): nothing outside can
        end that wait."""
        return any(set(e.holders) == {p.pid} for e in self._task_edges(p, t, self.task_kind(p, t)))

    def task_waits(self, p: Process, t: Task) -> tuple[WaitEdge, ...]:
        """What one thread of `p` waits on that can be followed (a pipe, a socket, a lock, a mount)."""
        return tuple(self._task_edges(p, t, self.task_kind(p, t)))

    def _task_edges(self, p: Process, t: Task, kind: WaitKind | None) -> Iterator[WaitEdge]:
        if kind in ("pipe-read", "pipe-write"):
            yield from self._pipe_edges(p, kind, t)
        elif kind == "fifo-open" and t.tid is None:
            yield self._fifo_open_edge(p)
        elif kind in ("socket-read", "socket-write", "socket-connect"):
            edge = self._socket_edge(p, t)
            if edge is not None:
                yield edge
        elif kind == "file-lock":
            yield from self._lock_edges(p, t)
        elif kind == "fuse":
            yield self._fuse_edge(p, t.tid)
        elif kind == "event-loop" and t.tid is None:
            edge = self._poll_socket_edge(p)
            if edge is not None:
                yield edge

    # ------------------------------------------------------------------ chains

    def chains(self, start: int, limit: int = MAX_CHAINS) -> list[Chain]:
        """Every path from `start` along its wait edges to a process that waits on nothing we can
        follow (the root blocker), or back into the path (a cycle). A path back through an inferred
        edge (a poll, a retry loop) is a ring, not a cycle: it is not followed, and the search goes
        on along the other edges (ssh and sshd poll each other; what stops them is further on)."""
        out: list[Chain] = []
        self._walk(start, (), frozenset({start}), out, [MAX_VISITS], limit)
        return out

    def _walk(
        self, pid: int, path: tuple[Hop, ...], on_path: frozenset[int], out: list[Chain], budget: list[int], limit: int
    ) -> None:
        """One step of chains' search, a method and not a closure: a recursive closure holds itself,
        and that cycle (with self in it) left each host's whole snapshot to the garbage collector,
        a tenth of a sweep's CPU (tests/test_pipeline_garbage.py)."""
        if len(out) >= limit or budget[0] <= 0:
            return
        budget[0] -= 1
        edges = self.edges(pid)
        followed = False
        for edge in edges:
            if not edge.holders:
                continue
            for h in edge.holders:
                if len(out) >= limit:
                    return
                hop = Hop(pid, edge)
                if h in on_path or len(path) >= MAX_DEPTH:
                    members = (*path, hop)
                    at = next((i for i, x in enumerate(members) if x.pid == h), None) if h in on_path else None
                    loop = members[at:] if at is not None else ()
                    if any(x.edge is not None and x.edge.inferred for x in loop):
                        continue  # a ring of pollers or retries: nothing new to follow there
                    if any(x.edge is not None and x.edge.kind == "child" and not on_path.issuperset(x.edge.holders)
                           for x in loop):  # fmt: skip
                        # a parent waits for any of its children: one off the path can end its wait (a
                        # script in its foreground job, whose process substitution reads what it writes)
                        continue
                    acting = next(
                        (
                            f"{x.pid}: {a}"
                            for x in loop
                            if (a := self.acts_elsewhere(x.pid, x.edge.thread if x.edge else None))
                        ),
                        None,
                    )
                    out.append(Chain((*path, hop, Hop(h, None)), cycle=bool(loop) and acting is None,
                                     open_loop=acting if loop else None))  # fmt: skip
                    followed = True
                    continue
                self._walk(h, (*path, hop), on_path | {h}, out, budget, limit)
                followed = True
        if not followed:
            dangling = next((e for e in edges if not e.holders), None)
            out.append(Chain((*path, Hop(pid, None)), dangling=dangling))
        elif len(out) < limit:
            # a poller over pipes to processes here and a connection leaving this host (ssh under git
            # clone, reading git's pipes and the session to the other host) waits on that connection
            # too: a chain ends there, for the run to find its other end on another host. So does a
            # PostgreSQL backend's lock no session holds (a prepared transaction's), beside the pipe from
            # its postmaster that every backend watches: it read HEALTHY, no finding (found by a helper)
            unheld = next(
                (e for e in edges if not e.holders and ((e.poll and e.kind == "tcp") or e.kind == "db-lock")), None
            )
            if unheld is not None:
                out.append(Chain((*path, Hop(pid, None)), dangling=unheld))

    def settle(self, chain: Chain) -> Chain | None:
        """A chain through an event loop's edges (`poll`) counts only as far as it is sure: to its end
        where that end cannot move first (stopped, traced, in D state, one thread locked for ever: a
        relay's server whose handler took its lock twice) or waits on something nobody here holds (a
        remote peer, a gone server); otherwise up to the last edge that was not a poll's. None: nothing
        of it is sure (a poller among pollers)."""
        edges = chain.edges
        if not any(e.poll for e in edges):
            return chain
        if self._frozen(chain.end) or self._locked(chain.end) or chain.dangling is not None or chain.cycle:
            return chain
        last = max((i for i, e in enumerate(edges) if not e.poll), default=None)
        if last is None:
            return None
        return Chain((*chain.hops[: last + 1], Hop(chain.hops[last + 1].pid, None)))

    @cached_property
    def cycles(self) -> list[Chain]:
        """Each deadlock once, as the cycle itself (smallest pid first)."""
        seen: set[tuple[int, ...]] = set()
        out = []
        for p in self.snapshot.processes:
            if not self.edges(p.pid):
                continue
            for ch in self.chains(p.pid, limit=8):
                if not ch.cycle or any(e.inferred for e in ch.edges):
                    continue
                loop = _loop_of(ch)
                if _loop_key(loop) not in seen:
                    seen.add(_loop_key(loop))
                    out.append(Chain(loop, cycle=True))
        return out

    @cached_property
    def full_pipe_loops(self) -> list[Chain]:
        """Loops of writes into full pipes (a parent writing a child's stdin while the child writes
        a full stdout the parent should read) through a process with another live thread. That
        thread could drain one (a paced consumer), so this is no proven deadlock; but nothing
        moving while both pipes stay full is what the classic subprocess deadlock looks like in a
        program that also has a heartbeat or progress thread. Each once, as the loop itself."""
        seen: set[tuple[int, ...]] = set()
        out = []
        for p in self.snapshot.processes:
            if self.kind(p) != "pipe-write":
                continue
            for ch in self.chains(p.pid, limit=8):
                if ch.open_loop is None or any(e.inferred for e in ch.edges):
                    continue
                loop = _loop_of(ch)
                if not all(h.edge is None or (h.edge.kind in ("pipe", "fifo") and self.kind(self.tree.by_pid[h.pid])
                           == "pipe-write") for h in loop):  # fmt: skip
                    continue
                if _loop_key(loop) not in seen:
                    seen.add(_loop_key(loop))
                    out.append(Chain(loop, open_loop=ch.open_loop))
        return out
