"""Edges of a wait on a socket: the peer of a TCP connection on this host (or the listener whose
queue holds a connection not accepted yet), the peer of a Unix socket, a client polling its only
connection; and which processes a process is connected to (the ranks of a job)."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

from vastprobe.analysis.waitgraph.edges import Task, WaitEdge, main_task
from vastprobe.analysis.waitgraph.index import WaitIndex
from vastprobe.model import Evidence, Process, Socket, SocketTable, Unavailable, is_loopback, split_endpoint


class SocketEdges(WaitIndex):
    """Who holds the other end of a socket a process waits on."""

    def _socket_edge(self, p: Process, t: Task | None = None) -> WaitEdge | None:
        t = t or main_task(p)
        entry = self.waited_entry(p, t.syscall)
        inodes: list[tuple[int, int]] = []
        if entry is not None and entry.socket_inode is not None:
            inodes = [(entry.socket_inode, entry.fd)]
        elif not isinstance(p.fds, Unavailable):  # no system call: a single connected socket decides
            conn = [
                (e.socket_inode, e.fd)
                for e in p.fds
                if e.socket_inode is not None
                and (s := self._sockets.get(e.socket_inode)) is not None
                and s.state in ("ESTABLISHED", "CONNECTED")
            ]
            inodes = conn if len(conn) == 1 else []
        if not inodes:
            return None
        ino, fd = inodes[0]
        sock = self._sockets.get(ino)
        if sock is None or sock.state == "LISTEN":
            # a listening socket: it waits for connections to come (a Unix socket's accept() sleeps
            # in a datagram wait, which reads like a read), as inet_csk_accept says for TCP
            return None
        edge = None
        if sock.proto.startswith("tcp"):
            edge = self._tcp_edge(p, sock, fd)
        elif sock.proto == "unix":
            edge = self._unix_edge(p, sock, fd)
        return replace(edge, thread=t.tid) if edge is not None and t.tid is not None else edge

    def _poll_socket_edge(self, p: Process) -> WaitEdge | None:
        """A client like curl waits in poll() on its one connection: with no listening socket and a
        single connected socket (and a short fd set, when the system call shows it), that is the wait."""
        if isinstance(p.fds, Unavailable) or self.relayed(p):
            # a relay (socat's child) waits on what it opened, not on its client: the poll's edges say so
            return None
        sc = p.syscall
        if not isinstance(sc, Unavailable) and sc.name in ("poll", "ppoll") and len(sc.args) > 1 and sc.args[1] > 8:
            return None
        conn: list[tuple[Socket, int]] = []
        for e in p.fds:
            if e.socket_inode is not None:
                sock = self._sockets.get(e.socket_inode)
                if sock is None:
                    continue
                if sock.state == "LISTEN":
                    return None
                # or a connection not yet made (SYN_SENT: a listener whose accept queue is full drops its
                # SYN): the client past the queue read HEALTHY while those in it read STALLED (found by a helper)
                connecting = sock.state == "SYN_SENT" and sock.proto in ("tcp", "tcp6")
                if connecting or (sock.state in ("ESTABLISHED", "CONNECTED") and sock.proto in ("tcp", "tcp6", "unix")):
                    if sock.peer_inode is not None and set(self._fds.sockets.get(sock.peer_inode, [])) <= {p.pid}:
                        continue  # a socketpair with itself: curl's and libuv's wake-up channel
                    conn.append((sock, e.fd))
        if len(conn) > 1:  # a wake-up pair whose peer ss could not name: the one TCP connection decides
            conn = [c for c in conn if c[0].proto != "unix"]
        if len(conn) != 1:
            return None
        sock, fd = conn[0]
        if not isinstance(sc, Unavailable) and sc.name in ("select", "pselect6") and sc.args and sc.args[0] <= fd:
            # select's first argument is the highest fd watched plus one: psql at its prompt selects on
            # its terminal (fd 0) alone, and was said to poll its connection (found by a helper)
            return None
        edge = self._tcp_edge(p, sock, fd) if sock.proto.startswith("tcp") else self._unix_edge(p, sock, fd)
        return WaitEdge(
            edge.waiter,
            edge.kind,
            edge.holders,
            edge.what,
            (Evidence("/proc/syscall", f"{p.pid} ({p.comm}) polls its only connection"), *edge.evidence),
            fd=edge.fd,
            socket=edge.socket,
            peer=edge.peer,
            listener=edge.listener,
            inferred=True,
        )

    def _tcp_edge(self, p: Process, sock: Socket, fd: int) -> WaitEdge:
        mirrors = self._tcp_mirrors(sock)
        peer = mirrors[0] if mirrors else None
        holders = tuple(sorted(set(self._fds.sockets.get(peer.inode, [])) - {p.pid})) if peer else ()
        if peer is not None and not holders and p.pid in self._fds.sockets.get(peer.inode, []):
            holders = (p.pid,)  # it holds the other end itself: a server in another of its threads
        conn = f"{sock.local} -> {sock.remote}"
        ev = [Evidence("/proc/net/tcp", f"fd {fd}: {conn} {sock.state}, unread here {sock.recv_queue} B")]
        # no peer socket at all: a connection the kernel accepted that no server has accepted yet sits in
        # the listener's queue; a peer socket whose holder is not visible (another PID namespace, a
        # host outside this container) is no queued connection
        listener = self._listener(sock.remote, sock.netns) if not holders and peer is None else None
        if listener is not None and sock.state == "SYN_SENT" and not listener.recv_queue:
            # a SYN unanswered beside an empty accept queue: the listener did not drop it (a full queue
            # does), something between did (a firewall). Tied to it, the client read "its queue is full"
            # with 0 queued, and STALLED where the listener was stopped (found by a helper)
            listener = None
        if listener is not None:
            # accepted by the kernel, not yet by the server: it sits in the listener's queue
            queued = f"not accepted yet: {listener.local} LISTEN has {listener.recv_queue} connection(s) queued"
            holders = self._queued_at(p, listener, Evidence("/proc/net/tcp", queued), ev)
        elif peer is not None:
            ev.append(
                Evidence(
                    "/proc/net/tcp",
                    f"peer {peer.local} -> {peer.remote} {peer.state}: {peer.recv_queue} B unread by its holder, "
                    f"{peer.send_queue} B unacknowledged",
                )
            )
            ev += [Evidence("/proc/fd", f"peer socket:[{peer.inode}] held by {self._label(h)}") for h in holders[:8]]
        elif not holders:
            ev.append(Evidence("/proc/net/tcp", f"no process visible here holds the other end: {sock.remote} is "
                                                "another host (or outside this container)"))  # fmt: skip
        return WaitEdge(
            p.pid, "tcp", holders, f"TCP {conn}", tuple(ev), fd=fd, socket=sock, peer=peer,
            listener=listener if listener is not None and holders else None,
        )  # fmt: skip

    def _queued_at(self, p: Process, listener: Socket, queued: Evidence, ev: list[Evidence]) -> tuple[int, ...]:
        """The holders of the listener whose queue holds `p`'s connection (TCP's or a Unix socket's),
        with `queued` and who holds the listening socket added to `ev`."""
        holders = tuple(sorted(set(self._fds.sockets.get(listener.inode, [])) - {p.pid}))
        ev.append(queued)
        ev += [
            Evidence("/proc/fd", f"listening socket:[{listener.inode}] held by {self._label(h)}") for h in holders[:8]
        ]
        return holders

    @cached_property
    def _local_ips(self) -> frozenset[str]:
        return frozenset(s.local_address[0] for s in self._sockets.values() if s.proto.startswith("tcp"))

    def _listener(self, address: str, netns: int | None) -> Socket | None:
        """The listening socket a connection to `address` lands on, when that address is this host's."""
        ip, port = split_endpoint(address)
        local = is_loopback(ip) or ip in self._local_ips
        for s in self._sockets.values():
            if s.state != "LISTEN" or not s.proto.startswith("tcp") or (s.netns != netns and netns is not None):
                continue
            lip, lport = s.local_address
            if lport == port and (lip == ip or (local and lip in ("0.0.0.0", "[::]"))):
                return s
        return None

    def _unix_edge(self, p: Process, sock: Socket, fd: int) -> WaitEdge:
        peer = self._sockets.get(sock.peer_inode) if sock.peer_inode else None
        holders = tuple(sorted(set(self._fds.sockets.get(sock.peer_inode, [])) - {p.pid})) if sock.peer_inode else ()
        if sock.peer_inode and not holders and p.pid in self._fds.sockets.get(sock.peer_inode, []):
            holders = (p.pid,)
        name = f"Unix socket {sock.local or ''}".rstrip() + f" (socket:[{sock.inode}])"
        ev = [Evidence("/proc/net/unix", f"fd {fd}: {name} {sock.state}")]
        peers_known = not isinstance(self.snapshot.sockets, SocketTable) or self.snapshot.sockets.unix_peers_known
        listener = self._unix_listener(p, sock) if peers_known and sock.peer_inode == 0 else None
        if sock.peer_inode:
            ev.append(
                Evidence("ss", f"peer socket:[{sock.peer_inode}]" + (f" {peer.local}" if peer and peer.local else ""))
            )
            ev += [Evidence("/proc/fd", f"peer held by {self._label(h)}") for h in holders[:8]]
        elif listener is not None:
            queued = (
                f"its peer has no inode: a connection not accepted yet; the Unix listener here with "
                f"connections queued is {listener.local} ({listener.recv_queue} queued)"
            )
            holders = self._queued_at(p, listener, Evidence("ss", queued), ev)
        elif not peers_known:
            ev.append(Evidence("ss", "not on the target: a Unix socket's peer is unknown"))
        return WaitEdge(
            p.pid, "unix-socket", holders, name, tuple(ev), fd=fd, socket=sock, peer=peer,
            listener=listener if listener is not None and holders else None,
        )  # fmt: skip

    def _unix_listener(self, p: Process, sock: Socket) -> Socket | None:
        """The listener whose accept queue holds the other end of connected Unix socket `sock`: ss names
        a peer with no inode (0) for a connection not accepted yet, which sits in its listener's queue
        with the listener's path, and /proc/net/unix gives neither end a link to the other. The one Unix
        listener with connections queued, or of several the one whose path (or its directory: psql's
        `-h /run/postgresql`) the waiter's command line names: a `redis-cli -s` or a psql queued at a
        stopped server read HEALTHY with no finding (found by a helper). None where that leaves more
        than one. A peer that closed has no inode either, but then a read returns at once."""
        if sock.state != "CONNECTED":
            return None
        queued = [
            s
            for s in self._sockets.values()
            if s.proto == "unix" and s.state == "LISTEN" and s.recv_queue and s.local and s.netns == sock.netns
        ]
        if len(queued) > 1:
            args = _named_paths(p.cmdline[1:64])
            queued = [s for s in queued if s.local in args or s.local.rsplit("/", 1)[0] in args]
        return queued[0] if len(queued) == 1 else None

    def connected(self, pid: int) -> tuple[set[int], int]:
        """The processes at the other end of the connected sockets `pid` holds (TCP on this host: the
        mirror-image row; Unix sockets where ss named the peer), and how many TCP connections lead to
        no process visible here (another host, or outside this container)."""
        p = self.tree.by_pid.get(pid)
        if p is None or isinstance(p.fds, Unavailable):
            return set(), 0
        out: set[int] = set()
        unseen = 0
        for e in p.fds:
            sock = self._sockets.get(e.socket_inode) if e.socket_inode is not None else None
            if sock is None or sock.state not in ("ESTABLISHED", "CONNECTED"):
                continue
            if sock.proto.startswith("tcp"):
                holders = self._mirror_holders(sock)
                out |= holders
                unseen += not holders
            elif sock.peer_inode:
                out.update(self._fds.sockets.get(sock.peer_inode, []))
        return out - {pid}, unseen

    def _mirror_holders(self, sock: Socket) -> set[int]:
        """The processes here holding the other end of TCP socket `sock`."""
        holders: set[int] = set()
        for peer in self._tcp_mirrors(sock):
            holders.update(self._fds.sockets.get(peer.inode, []))
        return holders

    def _tcp_in(self, pid: int, state: str) -> list[Socket]:
        """The TCP sockets `pid` holds in `state`."""
        p = self.tree.by_pid.get(pid)
        return [s for s in self._tcp_held(p)[0] if s.state == state] if p is not None else []

    def _remote_ends(self, pid: int, state: str) -> tuple[str, ...]:
        """The remote ends of the TCP connections `pid` holds in `state` whose other end no process
        here holds (another host), each once."""
        return tuple(dict.fromkeys(s.remote for s in self._tcp_in(pid, state) if not self._mirror_holders(s)))

    def own_ends(self, pid: int) -> tuple[str, ...]:
        """The local ends of the established TCP connections `pid` holds (at most 32): what another
        host's process connected to it sees as its remote end, so a run can name who it waits on."""
        return tuple(dict.fromkeys(s.local for s in self._tcp_in(pid, "ESTABLISHED")))[:32]

    def unseen_ends(self, pid: int) -> tuple[str, ...]:
        """The remote ends of the established TCP connections `pid` holds whose other end no process
        here holds (another host): where a rank's peers are, which tells two jobs under one id apart."""
        return self._remote_ends(pid, "ESTABLISHED")

    def closed_by_peer(self, pid: int) -> tuple[str, ...]:
        """The remote ends of the TCP connections `pid` holds that the other end closed (CLOSE_WAIT:
        its FIN arrived, unread) and no process here holds: a peer on another host that exited, or
        closed it. A distributed job's pairs live as long as the job."""
        found = self._closed.get(pid)
        if found is None:
            found = self._closed[pid] = self._remote_ends(pid, "CLOSE_WAIT")
        return found


def _named_paths(args: tuple[str, ...]) -> set[str]:
    """The absolute paths a command line names: an argument itself, or after its address type or option
    name (socat's `UNIX-CONNECT:/run/app.sock,retry=3`, `--socket=/run/x.sock`). socat's were missed, and
    its client read HEALTHY beside a second stopped listener with a queue (found by a helper)."""
    out = set()
    for a in args:
        for part in (a, a.partition(":")[2], a.partition("=")[2]):
            path = part.split(",", 1)[0].rstrip("/")
            if path.startswith("/"):
                out.add(path)
    return out
