"""What a host's report keeps of its sockets for a sweep to join hosts by connection: the waits on a
TCP connection whose other end no process here holds (RemotePeer), and the sockets processes here
serve on (ServedSocket: listeners, and connections accepted on a listening port) or opened (clients'
ends). Both are bounded: a busy server's thousands of connections are not the report's to carry."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice
from typing import TYPE_CHECKING

from vastprobe.model import Process, RemotePeer, ServedSocket, Socket, SocketTable

if TYPE_CHECKING:
    from vastprobe.analysis.context import Context
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.analysis.waitgraph.edges import WaitEdge

MAX_WAITS = 32
MAX_SERVED = 256
#: Of an accepted connection's holder, the descendants kept: sshd's session and the command it runs.
MAX_BELOW = 32
#: Of a relay, the connections it opened that a sweep may follow on.
MAX_RELAYED = 8


def remote_peer(tree: ProcessTree, edge: WaitEdge) -> RemotePeer | None:
    """The TCP connection a wait is on, when no process here holds its other end."""
    if edge.kind != "tcp" or edge.holders or edge.socket is None or not edge.socket.remote:
        return None
    p = tree.by_pid.get(edge.waiter)
    return RemotePeer(edge.waiter, p.comm if p else "?", edge.socket.local, edge.socket.remote)


def client_peer(ctx: Context, session: int) -> RemotePeer | None:
    """A server's session (a database backend) whose client is on another host: its connection, as
    a wait its client holds (a backend idle in a transaction keeps its locks until that client acts)."""
    for edge in ctx.graph.edges(session):
        peer = remote_peer(ctx.tree, edge)
        if peer is not None:
            return replace(peer, client_holds=True)
    return None


def remote_waits(ctx: Context) -> tuple[RemotePeer, ...]:
    """Waiters in scope blocked on a TCP connection whose peer is not on this host (no holder, no
    listener here queues it); and the sessions that hold a lock others wait for, whose client is on
    another host (db-lock-wait's likely holders)."""
    out: dict[int, RemotePeer] = {}
    for s in ctx.stalled_chains:
        if s.edge is None:
            continue
        peers = [remote_peer(ctx.tree, s.edge)]
        if s.edge.kind == "db-lock":
            peers += [client_peer(ctx, h) for h in s.edge.holders]
        for peer in peers:
            if peer is not None and (peer.pid in ctx.scope or peer.client_holds) and peer.pid not in out:
                out[peer.pid] = peer
        if len(out) >= MAX_WAITS:
            break
    return tuple(out.values())[:MAX_WAITS]


def served(ctx: Context) -> tuple[ServedSocket, ...]:
    """Listening sockets held by a process here, then connections accepted on their ports, then any
    other connection held by a process that cannot move (stopped, D) or with bytes unread in it, then
    the connections processes here opened (a client's end: where a server's session on another host,
    held until its client acts, leads)."""
    table = ctx.snapshot.sockets
    if not isinstance(table, SocketTable):
        return ()
    graph = ctx.graph
    tcp = [s for s in table.sockets if s.proto.startswith("tcp") and graph.socket_holders(s.inode)]
    listening = [s for s in tcp if s.state == "LISTEN"]
    ports = {s.local_address[1] for s in listening}
    accepted = [s for s in tcp if s.state != "LISTEN" and s.remote and s.local_address[1] in ports]
    # any other connection whose holder cannot move or has not read what was sent: a one-shot server
    # that closed its listener, a client sending to another host's server, then stopped
    seen = {s.inode for s in accepted}
    stuck = [s for s in tcp if s.state != "LISTEN" and s.remote and s.inode not in seen and _stuck(ctx, s)]
    accepted += stuck
    seen.update(s.inode for s in stuck)
    opened = [s for s in tcp if s.state == "ESTABLISHED" and s.remote and s.inode not in seen]
    accepted += opened
    out = []
    under: dict[int, tuple[tuple[int, ...], str]] = {}  # a server's many connections share one holder
    relayed: dict[int, tuple[tuple[str, str], ...]] = {}
    timer: dict[int, bool] = {}
    reading: dict[int, tuple[str, str] | None] = {}
    for s in (*listening, *accepted)[:MAX_SERVED]:
        holder = ctx.tree.by_pid.get(graph.socket_holders(s.inode)[0])
        if holder is not None:
            if s.remote and holder.pid not in under:
                below = tuple(islice((d.pid for d in ctx.tree.descendants(holder.pid)), MAX_BELOW))
                under[holder.pid] = below, _moving(ctx, (holder.pid, *below))
            below, moving = under[holder.pid] if s.remote else ((), "")
            pr = ctx.progress.get(holder.pid) if ctx.two_samples else None
            idle = None if pr is None or not pr.sampled else not pr.moved
            if s.remote and holder.pid not in relayed:
                relayed[holder.pid] = _relays_to(ctx, holder)
            relays = relayed[holder.pid] if s.remote else ()
            mine = s.state != "LISTEN" and s.local_address[1] not in ports  # not accepted here: opened here
            # read only where its queue holds work and it did nothing (connection_joins): asked there alone,
            # not of every holder of every socket of every host of a sweep
            queued = s.recv_queue or 0
            if queued and idle and holder.pid not in timer:
                timer[holder.pid] = ctx.wakes_by_itself(holder.pid)
                reading[holder.pid] = _reading_off_host(ctx, holder)
            out.append(ServedSocket(s.local, s.remote if s.state != "LISTEN" else "", holder.pid, holder.comm,
                                    holder.state, below, queued, idle, moving, relays, mine,
                                    timer[holder.pid] if queued and idle else False,
                                    reading[holder.pid] if queued and idle else None))  # fmt: skip
    return tuple(out)


def _reading_off_host(ctx: Context, holder: Process) -> tuple[str, str] | None:
    """The one TCP connection `holder` is blocked reading whose other end no process here holds."""
    for e in ctx.graph.tcp_waits(holder.pid):
        if not e.holders and e.socket is not None:
            return e.socket.local, e.socket.remote
    return None


def _relays_to(ctx: Context, holder: Process) -> tuple[tuple[str, str], ...]:
    """The connections a relay opened (socat, `ssh -L`, a TCP proxy), as (local, remote), at most 8."""
    table = ctx.snapshot.sockets
    inodes = ctx.graph.relayed(holder)
    if not inodes or not isinstance(table, SocketTable):
        return ()
    return tuple((s.local, s.remote) for s in table.sockets if s.inode in inodes)[:MAX_RELAYED]


def _stuck(ctx: Context, s: Socket) -> bool:
    """A connection whose holder is stopped or in D state, or which holds bytes nobody read."""
    holder = ctx.tree.by_pid.get(ctx.graph.socket_holders(s.inode)[0])
    return bool(s.recv_queue) or (holder is not None and holder.state in ("T", "t", "D"))


def _moving(ctx: Context, pids: tuple[int, ...]) -> str:
    """The holder (first of `pids`) when it worked over the window, else the first process under it
    that worked or sleeps on a timer, in words: the one-host analysis reads a blocker that works as
    holding nobody, and a chain ending at a command asleep on a timer (`ssh B 'sleep 600'`) as a wait
    on time. A holder asleep on a timer itself is an idle server: it holds its client. "" with one
    sample."""
    if not ctx.two_samples:
        return ""
    for i, pid in enumerate(pids):
        pr, p = ctx.progress.get(pid), ctx.tree.by_pid.get(pid)
        if p is not None and pr is not None and pr.sampled and pr.moved:
            return f"{p.comm} ({pid}) worked over the window"
        if i and p is not None and ctx.graph.kind(p) == "sleep":
            return f"{p.comm} ({pid}) sleeps on a timer"
    return ""
