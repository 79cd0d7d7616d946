"""The snapshot indexed once for the graph (fd tables by pipe, socket and path; sockets by inode and
by connection; file locks waiting and held), and what each process and thread waits for: the kind
of wait from its wait channel, system call and fd, its threads, its jobs, whether another of its
threads can still act. Every edge module builds on this; none re-reads the snapshot's tables."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property

from vastprobe.analysis.tree import ProcessTree
from vastprobe.analysis.waitgraph.edges import Task, main_task, private_untimed_wait, untimed_futex
from vastprobe.analysis.wchan_families import WaitKind, timed_wait, wait_kind, waited_fd
from vastprobe.model import (
    FdEntry,
    FileLock,
    HostSnapshot,
    Process,
    Socket,
    SocketTable,
    Syscall,
    Unavailable,
    is_loopback,
    split_endpoint,
)

#: epoll's writability event (sys/epoll.h): a write end watched with it waits to write, not for its readers
EPOLLOUT = 0x004

#: Processes that adopt orphans besides PID 1: container shims and inits that set
#: PR_SET_CHILD_SUBREAPER (procfs does not show the flag itself).
SUBREAPERS = frozenset(
    {"tini", "dumb-init", "catatonit", "containerd-shim", "containerd-shim-runc-v2", "conmon", "docker-init"}
)


@dataclass
class _FdIndex:
    pipes: dict[int, list[tuple[int, FdEntry]]] = field(default_factory=dict)
    sockets: dict[int, list[int]] = field(default_factory=dict)
    paths: dict[str, list[tuple[int, FdEntry]]] = field(default_factory=dict)
    fuse_servers: list[int] = field(default_factory=list)


class WaitIndex:
    """The snapshot and its process tree, indexed for the edge modules, and each process's waits."""

    def __init__(self, snapshot: HostSnapshot, tree: ProcessTree) -> None:
        self.snapshot = snapshot
        self.tree = tree
        self._relays: dict[int, frozenset[int]] = {}
        self._ambiguous: dict[int, bool] = {}  # PollEdges._ambiguous_relay's, by the relay's PID
        self._closed: dict[int, tuple[str, ...]] = {}  # sockets.closed_by_peer, once a process

    # ------------------------------------------------------------------ indexes, built once

    @cached_property
    def _fds(self) -> _FdIndex:
        idx = _FdIndex()
        for p in self.snapshot.processes:
            if isinstance(p.fds, Unavailable):
                continue
            for e in p.fds:
                t = e.target
                if t.startswith("pipe:["):
                    ino = e.pipe_inode
                    if ino is not None:
                        idx.pipes.setdefault(ino, []).append((p.pid, e))
                elif t.startswith("socket:[") and t.endswith("]"):
                    n = e.socket_inode
                    if n is not None:
                        idx.sockets.setdefault(n, []).append(p.pid)
                elif t == "/dev/fuse":
                    idx.fuse_servers.append(p.pid)
                elif t.startswith("/"):
                    idx.paths.setdefault(e.path, []).append((p.pid, e))
        return idx

    @cached_property
    def _sockets(self) -> dict[int, Socket]:
        return self.snapshot.sockets.by_inode() if isinstance(self.snapshot.sockets, SocketTable) else {}

    @cached_property
    def _tcp_peers(self) -> dict[tuple[str, str], list[Socket]]:
        out: dict[tuple[str, str], list[Socket]] = {}
        for s in self._sockets.values():
            if s.proto.startswith("tcp") and s.remote:
                out.setdefault((s.local, s.remote), []).append(s)
        return out

    def _tcp_mirrors(self, sock: Socket) -> list[Socket]:
        """The other end of TCP socket `sock` (its mirror-image row): in its own network namespace, else in
        another where its addresses can cross one (a container's bridge to the host). A loopback connection
        never does: a host pair that happened to use a namespaced client's 4-tuple was taken for its peer,
        and the client of a stopped server in its namespace read HEALTHY (found by a helper)."""
        peers = [s for s in self._tcp_peers.get((sock.remote, sock.local), []) if s.inode != sock.inode]
        same_ns = [s for s in peers if s.netns == sock.netns]
        if not same_ns and sock.netns is not None and is_loopback(split_endpoint(sock.local)[0]):
            return []
        return same_ns or peers

    @cached_property
    def _locks(self) -> tuple[dict[int, list[FileLock]], dict[int, FileLock]]:
        waiting: dict[int, list[FileLock]] = {}
        held: dict[int, FileLock] = {}
        if isinstance(self.snapshot.locks, tuple):
            for lk in self.snapshot.locks:
                if lk.waiting:
                    if lk.pid is not None:
                        waiting.setdefault(lk.pid, []).append(lk)
                else:
                    held.setdefault(lk.number, lk)
        return waiting, held

    # ------------------------------------------------------------------ processes

    def socket_holders(self, inode: int) -> list[int]:
        """The processes here holding socket `inode` open, in the snapshot's order."""
        return self._fds.sockets.get(inode, [])

    def process(self, pid: int) -> Process | None:
        return self.tree.by_pid.get(pid)

    def listeners(self, p: Process) -> list[Socket]:
        """The listening sockets `p` holds."""
        if isinstance(p.fds, Unavailable):
            return []
        socks = (self._sockets.get(e.socket_inode) for e in p.fds if e.socket_inode is not None)
        return [s for s in socks if s is not None and s.state == "LISTEN"]

    def accepted(self, p: Process, remote: str) -> bool:
        """Whether `p`'s end of a TCP connection, `remote` as its peer sees it, is one it accepted: on a
        port it listens on (a server's end, not a client's or a socketpair's)."""
        port = split_endpoint(remote)[1] if remote else ""
        return bool(port) and any(s.local_address[1] == port for s in self.listeners(p) if s.proto.startswith("tcp"))

    def listens(self, p: Process) -> bool:
        """Holds a listening socket: a server, which waits for work rather than on its clients."""
        return bool(self.listeners(p))

    def relayed(self, p: Process) -> frozenset[int]:
        """The TCP connections a process holding a listening socket opened itself (its local port is
        none it listens on), where it holds connections accepted on its ports too: what a relay
        (socat, `ssh -L`, a TCP proxy) passes its clients' bytes on to. A forking server's child
        (sshd's session, the same program) counts its parent's listener. Empty for a plain server
        and for a process that holds no listener."""
        found = self._relays.get(p.pid)
        if found is None:
            found = self._relays[p.pid] = self._relayed(p)
        return found

    def _tcp_held(self, p: Process) -> tuple[list[Socket], set[str]]:
        """The TCP sockets `p` holds, and the ports it listens on."""
        if isinstance(p.fds, Unavailable):
            return [], set()
        tcp = [
            s
            for e in p.fds
            if e.socket_inode is not None and (s := self._sockets.get(e.socket_inode)) and s.proto.startswith("tcp")
        ]
        return tcp, {s.local_address[1] for s in tcp if s.state == "LISTEN"}

    def _relayed(self, p: Process) -> frozenset[int]:
        tcp, ports = self._tcp_held(p)
        parent = self.tree.by_pid.get(p.ppid)
        if not ports and parent is not None and p.comm.startswith(parent.comm):
            # a forking server's child holds what its parent accepted, not the listener: sshd's session
            # process relays a jump host's channel (`ssh -J B C`), and A read HEALTHY behind C's
            # stopped receiver (found by a helper)
            ports = self._tcp_held(parent)[1]
        conns = [s for s in tcp if s.state == "ESTABLISHED" and s.remote]
        if not ports or not any(s.local_address[1] in ports for s in conns):
            return frozenset()
        return frozenset(s.inode for s in conns if s.local_address[1] not in ports) | self._unix_opened(p)

    def _unix_opened(self, p: Process) -> frozenset[int]:
        """The Unix connections `p` opened to another process's named socket: its own end unnamed, the
        other end named (accepted on a listener's path) and held elsewhere. socat's `UNIX-CONNECT:` of
        a TCP listener's client: its clients read DEGRADED, "socat does not answer", before a server
        whose handler locked for ever (found by a helper). A socketpair has two unnamed ends."""
        if isinstance(p.fds, Unavailable):
            return frozenset()
        out = set()
        for e in p.fds:
            s = self._sockets.get(e.socket_inode) if e.socket_inode is not None else None
            if s is None or s.proto != "unix" or s.state != "CONNECTED" or s.local or s.peer_inode is None:
                continue
            peer = self._sockets.get(s.peer_inode)
            if peer is not None and peer.local and set(self._fds.sockets.get(peer.inode, [])) - {p.pid}:
                out.add(s.inode)
        return frozenset(out)

    def relay_ends(self, pid: int) -> tuple[int, ...]:
        """The processes here holding the far ends of what relay `pid` opened (socat's redis, an ssh
        -L tunnel's server): where its clients' requests go on to, so what they wait on moves there."""
        p = self.tree.by_pid.get(pid)
        out: dict[int, None] = {}
        for peer_inode in self.far_ends(p) if p is not None else []:
            out.update((h, None) for h in self._fds.sockets.get(peer_inode, []) if h != pid)
        return tuple(out)

    def far_ends(self, p: Process) -> list[int]:
        """The socket inodes at the other end of what relay `p` opened: a Unix socket's peer, a TCP
        connection's mirror row (in its own network namespace: _tcp_mirrors)."""
        out: list[int] = []
        for ino in self.relayed(p):
            sock = self._sockets.get(ino)
            if sock is not None and sock.proto == "unix":
                out += [sock.peer_inode] if sock.peer_inode is not None else []
            elif sock is not None:
                out += [q.inode for q in self._tcp_mirrors(sock)]
        return out

    def accepted_unix(self, p: Process, end: Socket | None) -> bool:
        """Whether `end`, a Unix socket `p` holds, is one it accepted: named with the path of a listening
        socket of its own (a server's end, as accepted() says of TCP)."""
        return end is not None and bool(end.local) and any(s.local == end.local for s in self.listeners(p))

    def relay_has_client(self, p: Process) -> bool:
        """A process here waits on one of the connections the relay accepted (blocked reading it, or
        polling it alone): its client is on this host, and waits."""
        tcp, ports = self._tcp_held(p)
        for s in tcp:
            if s.state != "ESTABLISHED" or s.local_address[1] not in ports:
                continue
            for peer in self._tcp_mirrors(s):
                for pid in self._fds.sockets.get(peer.inode, []):
                    q = self.tree.by_pid.get(pid)
                    if q is not None and pid != p.pid and self.kind(q) in ("socket-read", "event-loop"):
                        return True
        return False

    def feeders(self, p: Process) -> list[int]:
        """The processes that hold the write end of a pipe `p` reads: what `tee` or a logger copies."""
        if isinstance(p.fds, Unavailable):
            return []
        out: dict[int, None] = {}
        for e in p.fds:
            if e.pipe_inode is not None and e.mode in ("r", "rw"):
                for pid, o in self._fds.pipes.get(e.pipe_inode, []):
                    if pid != p.pid and o.mode in ("w", "rw"):
                        out[pid] = None
        return list(out)

    def kind(self, p: Process) -> WaitKind | None:
        """What the process's main thread waits for; None when it is running or nothing says."""
        return self.task_kind(p, main_task(p))

    def all_tasks(self, p: Process) -> list[Task] | None:
        """Every thread of `p`, or None when the probe's bound left some unread: a thread not listed
        may be the one that acts (what no thread can do is only proven over all of them)."""
        tasks = self.tasks(p)
        return tasks if len(tasks) >= p.threads else None

    def task_kind(self, p: Process, t: Task) -> WaitKind | None:
        """What one thread of `p` waits for; None when it is running or nothing says."""
        if t.state in ("T", "t"):
            return "stopped"
        wchan = t.wchan if isinstance(t.wchan, str) else None
        if t.state == "R" and wait_kind(wchan, None) == "sleep":
            # caught running as it woke, and asleep on a timer when its wait channel was read just
            # after (the kernel names none for a running task): a retry loop between two sleeps,
            # where it spends nearly all its time. The later reading wins
            return "sleep"
        if t.state not in ("S", "D"):
            return None
        kind = wait_kind(wchan, t.syscall if isinstance(t.syscall, Syscall) else None)
        if kind == "other" or (kind == "event-loop" and waited_fd(t.syscall) == 0):
            kind = self._kind_from_fd(p, t) or kind
        if kind == "child" and (t.tid is not None or not any(k.state != "Z" for k in self.tree.kids(p.pid))):
            return "signal"  # a sigsuspend with no live child waits for a signal, not a child
        return kind

    def tasks(self, p: Process) -> list[Task]:
        """The main thread, then the other threads the probe read."""
        return [
            main_task(p),
            *(
                Task(p.pid, t.tid, t.comm, t.state, t.wchan, t.syscall or Unavailable("not read"))
                for t in p.threads_detail
            ),
        ]

    def _kind_from_fd(self, p: Process, t: Task) -> WaitKind | None:
        """A generic wait channel (wait_woken) or none at all: the fd of the system call decides."""
        entry = self.waited_entry(p, t.syscall)
        if entry is None or not isinstance(t.syscall, Syscall):
            return None
        writing = t.syscall.name in ("write", "writev", "sendto", "sendmsg")
        if entry.target.startswith("socket:["):
            return "socket-write" if writing else "socket-read"
        if entry.target.startswith("pipe:["):
            return "pipe-write" if writing else "pipe-read"
        if entry.target.startswith("/dev/pts/") or entry.target.startswith("/dev/tty"):
            # a write blocks on output nobody drains yet (a pty whose master reads slowly, or a terminal
            # held by Ctrl-S), as a full pipe's does, never on input: it was said to wait "for someone to
            # type" (found by a helper)
            return "pipe-write" if writing else "tty"
        return None

    def pty_master_holder(self, p: Process, within: int) -> Process | None:
        """The nearest of `p`'s first `within` ancestors holding a pty's master (/dev/ptmx): tmux's
        server, sshd, a pexpect driver. Which pty each master is only fdinfo's tty-index says: the
        nearest holder stands for it (a terminal write's edge, terminal-prompt's driver)."""
        for a in itertools.islice(self.tree.ancestors(p.pid), within):
            if not isinstance(a.fds, Unavailable) and any(x.path in ("/dev/ptmx", "/dev/pts/ptmx") for x in a.fds):
                return a
        return None

    def waited_entry(self, p: Process, sc: Syscall | Unavailable | None = None) -> FdEntry | None:
        """The fd entry a blocked read/write/... is on, from `sc` (None: the main thread's)."""
        fd = waited_fd(p.syscall if sc is None else sc)
        if fd is None or isinstance(p.fds, Unavailable):
            return None
        return next((e for e in p.fds if e.fd == fd), None)

    def acts_elsewhere(self, pid: int, thread: int | None = None) -> str | None:
        """A thread other than `thread` (the one whose wait is in question; None: the main one) that
        can still act: it can write the pipe or release what the others wait for, so a loop of waits
        through this process proves no deadlock. git's fetch reads index-pack's output while its
        demux thread feeds index-pack from ssh; a program reads gzip's output while a thread that
        sleeps or waits on a queue between chunks feeds it. A stopped thread cannot act, nor one in a
        futex wait without a timeout (it waits for another thread of its own: multiprocessing's main
        thread joining the queue's feeder). Says which thread, in words."""
        p = self.tree.by_pid.get(pid)
        if p is None:
            return None
        others = [t for t in self.tasks(p) if t.tid != thread]
        live = [
            t
            for t in others
            if t.state not in ("T", "t", "Z", "X") and not untimed_futex(t.syscall) and not self.sealed_loop(p, t)
        ]
        # name the thread most likely doing the work: one that runs, then one in a wait of its own,
        # before a server's poll or accept loop (the handler, not the acceptor)
        live.sort(
            key=lambda t: (
                0
                if t.state == "R"
                else 2
                if wait_kind(t.wchan if isinstance(t.wchan, str) else None, None) in ("event-loop", "accept")
                else 1
            )
        )
        for t in live:
            w = t.wchan if isinstance(t.wchan, str) else None
            doing = "runs" if t.state == "R" else f"waits in {w}" if w not in (None, "", "0") else "waits"
            name = (
                f"its thread {t.tid}" + (f" ({t.comm})" if t.comm else "")
                if t.tid is not None
                else f"its main thread ({t.comm})"
            )
            return f"{name} {doing}"
        if p.threads > 1 + len(p.threads_detail):  # past the probe's thread bound: not known to be idle
            return f"{p.threads - 1 - len(p.threads_detail)} other thread(s) not read"
        return None

    def sealed_loop(self, p: Process, t: Task, children: bool = True) -> bool:
        """`t` waits in epoll with no timeout on its own wake-up channels alone (a self-pipe, a
        socketpair, both ends `p`'s): only another thread of `p`, or a signal, can wake it. asyncio's
        loop awaiting `proc.wait()` before reading the child's output watches its self-socket only, the
        pipe the child fills not at all (found by a helper: the deadlock read HEALTHY). `children`: a
        write end its children read counts too (they wake it by closing it)."""
        sc = t.syscall
        if (
            t.state != "S"
            or not isinstance(sc, Syscall)
            or not (sc.name or "").startswith("epoll")
            or not sc.args
            or timed_wait(sc)
            or p.epoll is None
            or isinstance(p.fds, Unavailable)
        ):
            return False
        watched = {w.fd: w.events for w in p.epoll if w.epfd == sc.args[0]}
        by_fd = {e.fd: e for e in p.fds}
        return bool(watched) and all(
            (e := by_fd.get(fd)) is not None
            and (self._own_channel(p, e) or (children and self._closed_by_children(p, e, events)))
            for fd, events in watched.items()
        )

    def epoll_accepts_only(self, p: Process, t: Task) -> bool:
        """`t` waits in epoll on listeners `p` holds and on its own wake-up channels alone: it waits for
        new connections and nothing else. gunicorn's gthread worker watches its listener and its signal
        pipe while its pool threads work; with every one of those locked, curl read HEALTHY (a note)."""
        sc = t.syscall
        if (
            not isinstance(sc, Syscall)
            or not (sc.name or "").startswith("epoll")
            or not sc.args
            or p.epoll is None
            or isinstance(p.fds, Unavailable)
        ):
            return False
        listening = {s.inode for s in self.listeners(p)}
        by_fd = {e.fd: e for e in p.fds}
        watched = [by_fd.get(w.fd) for w in p.epoll if w.epfd == sc.args[0]]
        if not any(e is not None and e.socket_inode in listening for e in watched):
            return False
        return all(e is not None and (e.socket_inode in listening or self._own_channel(p, e)) for e in watched)

    def children_pipe_ends(self, p: Process, t: Task) -> frozenset[str]:
        """The ends ("r", "w") of pipes to or from its children alone that `t`'s epoll watches."""
        sc = t.syscall
        if p.epoll is None or isinstance(p.fds, Unavailable) or not isinstance(sc, Syscall) or not sc.args:
            return frozenset()
        by_fd = {e.fd: e for e in p.fds}
        return frozenset(
            e.mode
            for w in p.epoll
            if w.epfd == sc.args[0] and (e := by_fd.get(w.fd)) is not None and self._closed_by_children(p, e, w.events)
        )

    def _closed_by_children(self, p: Process, e: FdEntry, events: int) -> bool:
        """A pipe to or from `p`'s descendants alone, watched for readability alone: the write end of one
        only they read fires when they close it (asyncio watches a child's stdin so), the read end of one
        only they write when they write or close it (its stdout): a wait for the children, as its child
        watcher's is. `create_subprocess_exec(stdin=PIPE)` never closed, then `await proc.wait()` or
        `await proc.stdout.read()`: cat waits for EOF, the loop for cat, and both read HEALTHY (found by
        helpers)."""
        if e.pipe_inode is None or e.mode not in ("r", "w") or events & EPOLLOUT:
            return False
        other = ("r", "rw") if e.mode == "w" else ("w", "rw")
        ends = {pid for pid, o in self._fds.pipes.get(e.pipe_inode, []) if o.mode in other and pid != p.pid}
        return bool(ends) and ends <= {d.pid for d in self.tree.descendants(p.pid)}

    def _own_channel(self, p: Process, e: FdEntry) -> bool:
        """A pipe or a socketpair whose ends are all `p`'s: a wake-up channel nobody else can write."""
        if e.pipe_inode is not None:
            return self._own_pipe(p, e.pipe_inode)
        sock = self._sockets.get(e.socket_inode) if e.socket_inode is not None else None
        if sock is None or sock.peer_inode is None:
            return False  # an eventfd, a timerfd, a socket to anyone: not known to be its own
        return set(self._fds.sockets.get(sock.inode, [])) == set(self._fds.sockets.get(sock.peer_inode, [])) == {p.pid}

    def _own_pipe(self, p: Process, ino: int) -> bool:
        """Both ends of pipe `ino` are this process's alone: a wake-up pipe (the self-pipe trick)."""
        holders = self._fds.pipes.get(ino, [])
        return {o.mode for pid, o in holders if pid == p.pid} >= {"r", "w"} and all(pid == p.pid for pid, _o in holders)

    def jobs(self, p: Process) -> list[Process]:
        """The children a waiting process waits on: not zombies, and not daemons (a child that
        started a session of its own, like sshd under a container's entrypoint, is no job of it)."""
        return [
            k
            for k in self.tree.kids(p.pid)
            if k.state != "Z" and not (k.session == k.pid and k.session != p.session and k.session > 0)
        ]

    def waits_on_jobs(self, p: Process) -> bool:
        return self.kind(p) == "child" and bool(self.jobs(p))

    def init_like(self, p: Process | None) -> bool:
        """Host PID 1, a PID namespace's init (seen from outside: its last NSpid is 1), or a subreaper."""
        if p is None:
            return False
        return p.pid == 1 or (bool(p.nspid) and p.nspid[-1] == 1) or p.comm in SUBREAPERS

    def orphan(self, p: Process) -> bool:
        """Re-parented to an init: its parent is an init-like process."""
        return self.init_like(self.tree.by_pid.get(p.ppid))

    def _frozen(self, pid: int) -> bool:
        """Stopped, traced or in uninterruptible sleep: it will not move first."""
        q = self.tree.by_pid.get(pid)
        return q is not None and q.state in ("T", "t", "D")

    def handlers_locked(self, pid: int) -> bool:
        """A threaded server whose every thread but its accepting loop waits on a private futex with no
        timeout, the loop waiting for new connections alone (accept(), a poll over no more fds than the
        listeners it holds, or an epoll on those and its own wake-up pipe: gunicorn's gthread worker): no
        request is being worked on, and no thread is left to release the locks but one that only
        accepts. A ThreadingHTTPServer whose handler took its lock twice left curl waiting, HEALTHY, a
        note (found by a helper). Not a loop that polls anything else (an asyncio server awaiting its
        upstream, its idle executor threads on their queue). A pool idle on its queue beside an
        accept() looks the same: only a client waiting on it makes this a stall."""
        p = self.tree.by_pid.get(pid)
        tasks = self.all_tasks(p) if p is not None else None
        if p is None or tasks is None or len(tasks) < 2 or any(t.state != "S" for t in tasks):
            return False
        loops = [t for t in tasks if private_untimed_wait(t.syscall) is None]
        if len(loops) != 1:
            return False
        if self.task_kind(p, loops[0]) == "accept":
            return True
        if self.epoll_accepts_only(p, loops[0]):
            return True
        sc = loops[0].syscall
        if not isinstance(sc, Syscall) or sc.name not in ("poll", "ppoll") or len(sc.args) < 2:
            return False
        return 1 <= sc.args[1] <= len(self.listeners(p))

    def _locked(self, pid: int) -> bool:
        """One thread, asleep on a private futex with no timeout: nothing but a signal wakes it."""
        q = self.tree.by_pid.get(pid)
        return q is not None and q.threads == 1 and q.state == "S" and private_untimed_wait(q.syscall) is not None

    # ------------------------------------------------------------------ words

    def _cmd(self, pid: int) -> tuple[str, ...]:
        p = self.tree.by_pid.get(pid)
        return p.cmdline if p else ()

    def _label(self, pid: int | None) -> str:
        if pid is None:
            return "?"
        p = self.tree.by_pid.get(pid)
        if p is None:
            return f"{pid} (not visible)"
        return f"{pid} ({p.comm}, {p.state} {p.wchan if isinstance(p.wchan, str) else '?'})"
