"""Edges of an event loop (poll, select, epoll) over several pipes and connections: it waits on
any of their other ends, bounded by what its system call or epoll's interest list says it
watches. Built on the pipe and socket lookups; kept apart because a loop waits on many ends at once
and must leave out those that wait back on it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from vastprobe.analysis.waitgraph.edges import Task, WaitEdge
from vastprobe.analysis.waitgraph.sockets import SocketEdges
from vastprobe.analysis.wchan_families import WaitKind
from vastprobe.model import Evidence, Process, Socket, Syscall, Unavailable

#: fds of one event loop followed as its waits
MAX_POLL_FDS = 64


class PollEdges(SocketEdges):
    """What an event loop waits on: one `poll` edge per pipe or connection it watches."""

    def _poll_edges(self, p: Process, t: Task) -> Iterator[WaitEdge]:
        """An event loop (poll, select, epoll) over several pipes and connections waits on any of
        their other ends: ssh on sshd, sshd on the command it runs for the client, rsync on ssh. An
        end that waits on this very process through the same pipe or socket is left out (a writer
        blocked on a full pipe this one reads is not what this one waits for), and so is an end only
        this process holds (a wake-up pipe). A server (it holds a listening socket) waits for work
        by design and gets none. One edge per fd, each `poll`: a ring of pollers is no deadlock, and
        a chain through them counts only where it reaches something that does not move."""
        sc = t.syscall if isinstance(t.syscall, Syscall) else None
        if isinstance(p.fds, Unavailable) or not self._pollable(p) or sc is None:
            return  # which fds it watches, only its system call (root) and epoll's interest lists say
        if (sc.name or "").startswith("epoll") and p.epoll is None:
            return
        out: list[WaitEdge] = []
        own: set[frozenset[int]] = set()  # its own wake-up pipes and socketpairs (both ends its own)
        connecting = 0  # its connections not yet made (SYN_SENT): polled, and no end to follow
        head = Evidence("/proc/wchan", f"{t.who} waits in {t.wchan} over its pipes and connections")
        relay = self.listens(p)  # pollable while holding a listener: a relay, followed only into what it opened
        for e in p.fds:
            if len(out) >= MAX_POLL_FDS:
                break
            ino = e.pipe_inode
            if ino is not None and e.mode in ("r", "w"):
                if relay:
                    continue
                reading = e.mode == "r"
                other = ("w", "rw") if reading else ("r", "rw")
                holders = sorted(
                    {
                        pid
                        for pid, o in self._fds.pipes.get(ino, [])
                        if o.mode in other and pid != p.pid and not self._waits_back(pid, ino, reading)
                    }
                )
                if not holders:
                    if self._own_pipe(p, ino):
                        own.add(frozenset((ino,)))
                    continue
                role = "writer" if reading else "reader"
                ev = (
                    head,
                    Evidence("/proc/fd", f"fd {e.fd}: {'reads' if reading else 'writes'} pipe:[{ino}]"),
                    *(Evidence("/proc/fd", f"pipe:[{ino}] {role}: {self._label(h)}") for h in holders[:8]),
                )
                what = f"pipe:[{ino}] (fd {e.fd}) it {'reads' if reading else 'writes'}, among others it polls"
                out.append(WaitEdge(p.pid, "pipe", tuple(holders), what, ev, fd=e.fd, thread=t.tid, inferred=True,
                                    poll=True, writes=not reading))  # fmt: skip
                continue
            sino = e.socket_inode
            sock = self._sockets.get(sino) if sino is not None else None
            if sock is not None and sock.state == "SYN_SENT" and self._connect_polled(p, e.fd):
                connecting += 1
            if sock is None or sock.state not in ("ESTABLISHED", "CONNECTED"):
                continue
            if sock.proto.startswith("tcp"):
                edge = self._tcp_edge(p, sock, e.fd)
            elif sock.proto == "unix":
                edge = self._unix_edge(p, sock, e.fd)
            else:
                continue
            if relay and not self._relay_keeps(p, edge):
                continue
            kept = tuple(h for h in edge.holders if h != p.pid and not self._waits_back_socket(h, edge.peer))
            if edge.holders and not kept:
                if edge.holders == (p.pid,) and edge.peer is not None:
                    own.add(frozenset((sock.inode, edge.peer.inode)))
                continue  # its own socketpair, or a peer that waits on it
            if not kept and sock.proto == "unix":
                continue  # a Unix peer nobody named: nothing to follow
            out.append(replace(edge, holders=kept, evidence=(head, *edge.evidence), thread=t.tid, inferred=True,
                               poll=True))  # fmt: skip
        # the system call bounds the set: select() watches fds below its first argument, poll() as many
        # fds as its second says (which ones only its memory holds: connections first, then the lowest
        # fds; a pipe inherited at fd 251 from a launcher is seldom polled)
        if sc.name in ("select", "pselect6") and sc.args:
            out = [e for e in out if e.fd is not None and e.fd < sc.args[0]]
        elif p.epoll is not None and (sc.name or "").startswith("epoll"):
            # epoll: the interest list of the instance it waits on (its first argument), read from fdinfo
            epfd = sc.args[0] if sc.args else None
            watched = {w.fd for w in p.epoll if epfd is None or w.epfd == epfd}
            out = [e for e in out if e.fd in watched]
        elif sc.name in ("poll", "ppoll") and len(sc.args) > 1 and sc.args[1] - len(own) - connecting < len(out):
            # its own wake-up pipe or socketpair is polled at one end and counts in the number (curl polls
            # its connection and its socketpair: 2 fds, not a pipe it inherited at fd 251); so does a
            # connection not yet made (curl in SYN_SENT took its stdout pipe, shared with another job
            # under one supervisor, for its wait, and read STALLED on that job's stopped server; found by
            # a helper); its own stdout or stderr, a pipe to a supervisor (docker's shim, a test), after
            # the rest: the pipes of the children it reads (communicate()) are what it polls
            bound = max(sc.args[1] - len(own) - connecting, 0)
            out = sorted(out, key=_poll_order)[:bound]
        # ends that cannot move first, and what it writes to them (a backlog), before the rest: the
        # walk meets them before the other pollers
        out = [replace(e, holders=tuple(sorted(e.holders, key=lambda h: not self._frozen(h)))) for e in out]
        out.sort(key=lambda e: (not any(self._frozen(h) for h in e.holders), not e.writes))
        yield from out

    def _connect_polled(self, p: Process, fd: int) -> bool:
        """A connection being made that an event loop polls (a non-blocking connect): not one another
        thread of it is blocked in connect() on. Counted for such a thread, it hid the polled pipe of a
        main thread behind a stopped writer (found by a helper): with threads unread, none is counted."""
        tasks = self.tasks(p)
        if p.threads > len(tasks):
            return False
        return not any(
            isinstance(t.syscall, Syscall) and t.syscall.name == "connect" and t.syscall.args[:1] == (fd,)
            for t in tasks
        )

    def _pollable(self, p: Process) -> bool:
        """Not a server: a process holding a listening socket waits for work, not on its clients;
        unless it relays (socat, `ssh -L`, a TCP proxy): then what it opened is followed."""
        return not self.listens(p) or bool(self.relayed(p))

    def _relay_keeps(self, p: Process, edge: WaitEdge) -> bool:
        """Which of a relay's connections it waits on: one it opened (not one accepted on its own
        listening ports: its clients wait on it), whose other end cannot move, or is off this host
        while a client here waits on the relay (an idle server's pool of connections to another host
        is no wait of its own)."""
        if edge.socket is None or edge.socket.inode not in self.relayed(p):
            return False
        if edge.holders:
            # stopped or in D, or one thread locked for ever (a server whose handler took its lock twice)
            return any(self._cannot_move(h) for h in edge.holders) and not self._ambiguous_relay(p)
        return self.relay_has_client(p)

    def _cannot_move(self, pid: int) -> bool:
        return self._frozen(pid) or self._locked(pid)

    def _ambiguous_relay(self, p: Process) -> bool:
        """A relay of several clients over several connections it opened, some of whose far ends can move
        (an nginx worker, HAProxy, an asyncio proxy): which client's bytes go on which connection is in
        its memory alone. A client streaming through nginx from a live server read STALLED, exit 1,
        naming another client's stopped upstream (found by a helper). One client, or every far end
        unable to move, names it. Once a relay: asked for each connection it polls."""
        found = self._ambiguous.get(p.pid)
        if found is None:
            found = self._ambiguous[p.pid] = self._any_far_end_moves(p)
        return found

    def _any_far_end_moves(self, p: Process) -> bool:
        tcp, ports = self._tcp_held(p)
        clients = sum(1 for s in tcp if s.state == "ESTABLISHED" and s.local_address[1] in ports)
        if clients < 2:
            return False
        for ino in self.far_ends(p):
            peer = self._sockets.get(ino)
            if peer is None:
                continue
            for h in self._fds.sockets.get(ino, []):
                # a far end idle on this very connection (an upstream's pooled keep-alive) serves no
                # client now, and one stuck on a stopped process of its own moves for none (the
                # attack on this rule found both hid a stall it had named)
                if h != p.pid and not (
                    self._cannot_move(h) or self._waits_back_socket(h, peer) or self._stuck_on_frozen(h)
                ):
                    return True
        return False

    def _stuck_on_frozen(self, pid: int) -> bool:
        """A thread of `pid` blocked reading a connection whose other end is stopped or in D, and none
        running: an upstream whose handler waits on a stopped database."""
        q = self.tree.by_pid.get(pid)
        if q is None or q.state == "R" or any(t.state == "R" for t in q.threads_detail):
            return False
        for t in self.tasks(q):
            if self.task_kind(q, t) == "socket-read":
                edge = self._socket_edge(q, t)
                if edge is not None and edge.holders and all(self._frozen(h) for h in edge.holders):
                    return True
        return False

    def _waits_back(self, pid: int, ino: int, reading: bool) -> bool:
        """Whether `pid` is blocked on pipe `ino` itself: writing it (full) when the poller reads it,
        reading it (empty) when the poller writes it. Then the poller does not wait on it there."""
        q = self.tree.by_pid.get(pid)
        if q is None:
            return False
        want: WaitKind = "pipe-write" if reading else "pipe-read"
        for t in self.tasks(q):
            if self.task_kind(q, t) != want:
                continue
            entry = self.waited_entry(q, t.syscall)
            if entry is not None:
                if entry.pipe_inode == ino:
                    return True
            elif not isinstance(q.fds, Unavailable) and any(
                o.pipe_inode == ino and o.mode in (("w", "rw") if reading else ("r", "rw")) for o in q.fds
            ):
                return True
        return False

    def _waits_back_socket(self, pid: int, peer: Socket | None) -> bool:
        """Whether `pid` is blocked reading or writing the peer socket itself: it waits on the poller."""
        q = self.tree.by_pid.get(pid)
        if q is None or peer is None:
            return False
        for t in self.tasks(q):
            if self.task_kind(q, t) not in ("socket-read", "socket-write"):
                continue
            entry = self.waited_entry(q, t.syscall)
            if entry is not None and entry.socket_inode == peer.inode:
                return True
        return False


def _poll_order(e: WaitEdge) -> tuple[bool, bool, int]:
    """Which fds a poll of N most likely watches: connections, then pipes by fd, a write end of its
    own stdio last."""
    stdio_out = e.writes and e.fd is not None and e.fd <= 2
    return (e.socket is None, stdio_out, e.fd if e.fd is not None else 1 << 20)
