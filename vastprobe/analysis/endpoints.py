"""What a host's report keeps of its sockets for a sweep to join hosts by connection: the waits on a
TCP connection whose other end no process here holds (RemotePeer), and the sockets processes here
serve on (ServedSocket: listeners, and connections accepted on a listening port). Both are bounded:
a busy server's thousands of connections are not the report's to carry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vastprobe.model import RemotePeer, ServedSocket, SocketTable, Unavailable

if TYPE_CHECKING:
    from vastprobe.analysis.context import Context

MAX_WAITS = 32
MAX_SERVED = 256


def remote_waits(ctx: Context) -> tuple[RemotePeer, ...]:
    """Waiters in scope blocked on a TCP connection whose peer is not on this host (no holder, no
    listener here queues it)."""
    out: list[RemotePeer] = []
    seen: set[int] = set()
    for s in ctx.stalled_chains:
        e = s.edge
        if e is None or e.kind != "tcp" or e.holders or e.socket is None or not e.socket.remote:
            continue
        if e.waiter in seen or e.waiter not in ctx.scope:
            continue
        seen.add(e.waiter)
        p = ctx.tree.by_pid.get(e.waiter)
        out.append(RemotePeer(e.waiter, p.comm if p else "?", e.socket.local, e.socket.remote))
        if len(out) >= MAX_WAITS:
            break
    return tuple(out)


def served(ctx: Context) -> tuple[ServedSocket, ...]:
    """Listening sockets held by a process here, then connections accepted on their ports."""
    table = ctx.snapshot.sockets
    if not isinstance(table, SocketTable):
        return ()
    holders: dict[int, int] = {}
    for p in ctx.snapshot.processes:
        if isinstance(p.fds, Unavailable):
            continue
        for fd in p.fds:
            inode = fd.socket_inode
            if inode is not None:
                holders.setdefault(inode, p.pid)
    tcp = [s for s in table.sockets if s.proto.startswith("tcp") and s.inode in holders]
    listening = [s for s in tcp if s.state == "LISTEN"]
    ports = {s.local.rpartition(":")[2] for s in listening}
    accepted = [s for s in tcp if s.state != "LISTEN" and s.remote and s.local.rpartition(":")[2] in ports]
    out = []
    for s in (*listening, *accepted)[:MAX_SERVED]:
        holder = ctx.tree.by_pid.get(holders[s.inode])
        if holder is not None:
            out.append(ServedSocket(s.local, s.remote if s.state != "LISTEN" else "", holder.pid, holder.comm,
                                    holder.state))  # fmt: skip
    return tuple(out)
