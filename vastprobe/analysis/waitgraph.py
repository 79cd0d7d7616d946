"""The wait-for graph: what each blocked process waits on, and who holds the other end.

Linux's answer to Windows' Wait Chain Traversal, built once per snapshot from the wait channel,
the system call and its fd argument, the fd tables, /proc/locks, the socket tables and FUSE
mounts. An edge says "P waits on <resource>, which these processes can end": a child's exit,
the write end of a pipe or FIFO, the peer of a socket, the holder of a file lock, a FUSE server.
Chains follow edges from a waiter to the process at the end (the root blocker); a chain that
comes back to itself is a deadlock. Rules read chains; none re-derives them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

from vastprobe.analysis.tree import ProcessTree
from vastprobe.analysis.wchan_families import WaitKind, wait_kind, waited_fd
from vastprobe.model import (
    Evidence,
    FdEntry,
    FileLock,
    FuseMount,
    HostSnapshot,
    Process,
    Socket,
    SocketTable,
    Syscall,
    Unavailable,
)

EdgeKind = Literal["child", "pipe", "fifo", "fifo-open", "unix-socket", "tcp", "file-lock", "fuse", "db-lock"]

#: Processes that adopt orphans besides PID 1: container shims and inits that set
#: PR_SET_CHILD_SUBREAPER (procfs does not show the flag itself).
SUBREAPERS = frozenset(
    {"tini", "dumb-init", "catatonit", "containerd-shim", "containerd-shim-runc-v2", "conmon", "docker-init"}
)
#: SQLite's lock bytes start at 0x40000000 (its PENDING_BYTE): PENDING, RESERVED, then the SHARED range
SQLITE_PENDING, SQLITE_SHARED = "1073741824", "1073741826"  # RESERVED is 1073741825
SQLITE_SIDE_FILES = ("-journal", "-wal", "-shm")
MAX_CHAINS = 32
MAX_DEPTH = 64
#: processes one chain search visits at most (poll edges make the graph dense)
MAX_VISITS = 4096
#: fds of one event loop followed as its waits
MAX_POLL_FDS = 64
#: apt's and dpkg's own processes: they retry the package system's locks in a sleep loop
APT_COMMS = frozenset({"apt", "apt-get", "aptitude", "apt-cache", "dpkg", "unattended-upgr", "packagekitd"})
_PG_CLIENT = re.compile(r" (\[local\]|[0-9a-fA-F.:]+\([0-9]+\)|[A-Za-z0-9.-]+\([0-9]+\)) ", re.ASCII)


def process_title(p: Process) -> str:
    """A title a process wrote over its argv (PostgreSQL's `postgres: user db [local] UPDATE
    waiting`): one argument, the rest of the old argv's space NUL-padded; "" otherwise."""
    args = [a for a in p.cmdline if a]
    return args[0].rstrip() if len(args) == 1 else ""


def _names_mount(argv: tuple[str, ...], mount: FuseMount) -> bool:
    """Whether a FUSE server's arguments name this mount point (as given, or with a trailing /)."""
    point = mount.mount_point.rstrip("/") or "/"
    return any(a.rstrip("/") == point for a in argv[1:])


def _lock_named(path: str) -> bool:
    """A file whose name says it is a lock: `x.lock`, `lock`, `lock-frontend`, `.lck`."""
    base = path.rsplit("/", 1)[-1].lower()
    return path.startswith("/") and ("lock" in base or base.endswith(".lck"))


def _package_lock(path: str) -> bool:
    base = path.rsplit("/", 1)
    return len(base) == 2 and base[1] in ("lock-frontend", "lock") and ("dpkg" in base[0] or "apt" in base[0])


@dataclass(frozen=True)
class WaitEdge:
    waiter: int
    kind: EdgeKind
    holders: tuple[int, ...]  # who can end the wait; () when nobody visible can
    what: str  # the resource, in words
    evidence: tuple[Evidence, ...] = ()
    fd: int | None = None
    path: str | None = None
    socket: Socket | None = None
    peer: Socket | None = None
    lock: FileLock | None = None
    thread: int | None = None  # the thread that waits, when it is not the main one
    inferred: bool = False  # not a blocking wait on this very resource: a poll, a retry loop, a title
    poll: bool = False  # one fd of an event loop over several: the waiter waits on any of them
    retry: Literal["sqlite-busy", "lock-file"] | None = None  # a waiter that sleeps and tries again
    writes: bool = False  # a pipe or FIFO the waiter writes (full), not one it reads (empty)


@dataclass(frozen=True)
class Hop:
    pid: int
    edge: WaitEdge | None  # how this process waits on the next hop; None at the chain's end


@dataclass(frozen=True)
class Chain:
    hops: tuple[Hop, ...]
    cycle: bool = False  # the last edge leads back into the chain: a deadlock
    open_loop: str | None = None  # it leads back, but a member's other thread may still act (which, in words)
    dangling: WaitEdge | None = None  # the end waits on something no visible process holds

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(h.pid for h in self.hops)

    @property
    def waiter(self) -> int:
        return self.hops[0].pid

    @property
    def end(self) -> int:
        return self.hops[-1].pid

    @property
    def edges(self) -> tuple[WaitEdge, ...]:
        return tuple(h.edge for h in self.hops if h.edge is not None)

    def resource_edges(self) -> tuple[WaitEdge, ...]:
        return tuple(e for e in (*self.edges, *([self.dangling] if self.dangling else [])) if e.kind != "child")


def _loop_of(ch: Chain) -> tuple[Hop, ...]:
    """The hops of a chain that leads back into itself, from where it comes back to."""
    return ch.hops[ch.pids.index(ch.hops[-1].pid) :]


def _loop_key(loop: tuple[Hop, ...]) -> tuple[int, ...]:
    """A loop's members from its smallest pid on: the same loop found from any member."""
    pids = [h.pid for h in loop[:-1]]
    i = pids.index(min(pids))
    return tuple(pids[i:] + pids[:i])


@dataclass(frozen=True)
class Task:
    """One thread of a process as a waiter: the main one (tid None) or another, bounded by the probe."""

    pid: int
    tid: int | None
    comm: str
    state: str
    wchan: str | Unavailable | None
    syscall: Syscall | Unavailable

    @property
    def who(self) -> str:
        return f"thread {self.tid} ({self.comm}) of {self.pid}" if self.tid is not None else f"{self.pid} ({self.comm})"


def main_task(p: Process) -> Task:
    return Task(p.pid, None, p.comm, p.state, p.wchan, p.syscall)


def untimed_futex(sc: Syscall | Unavailable) -> bool:
    """A futex wait with no timeout: the thread waits for another thread of its process (a join, a
    lock, a condition without a deadline). Python's Event.wait(5) and a heartbeat's timed wait
    pass a timeout (the 4th argument) and will wake by themselves."""
    return isinstance(sc, Syscall) and sc.name == "futex" and len(sc.args) > 3 and sc.args[3] == 0


@dataclass
class _FdIndex:
    pipes: dict[int, list[tuple[int, FdEntry]]] = field(default_factory=dict)
    sockets: dict[int, list[int]] = field(default_factory=dict)
    paths: dict[str, list[tuple[int, FdEntry]]] = field(default_factory=dict)
    fuse_servers: list[int] = field(default_factory=list)


class WaitGraph:
    def __init__(self, snapshot: HostSnapshot, tree: ProcessTree) -> None:
        self.snapshot = snapshot
        self.tree = tree
        self._edges: dict[int, tuple[WaitEdge, ...]] = {}

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

    def process(self, pid: int) -> Process | None:
        return self.tree.by_pid.get(pid)

    def kind(self, p: Process) -> WaitKind | None:
        """What the process's main thread waits for; None when it is running or nothing says."""
        return self.task_kind(p, main_task(p))

    def task_kind(self, p: Process, t: Task) -> WaitKind | None:
        """What one thread of `p` waits for; None when it is running or nothing says."""
        if t.state in ("T", "t"):
            return "stopped"
        if t.state not in ("S", "D"):
            return None
        wchan = t.wchan if isinstance(t.wchan, str) else None
        kind = wait_kind(wchan, t.syscall if isinstance(t.syscall, Syscall) else None)
        if kind == "other":
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
            return "tty"
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
        live = [t for t in others if t.state not in ("T", "t", "Z", "X") and not untimed_futex(t.syscall)]
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
            name = f"its thread {t.tid} ({t.comm})" if t.tid is not None else f"its main thread ({t.comm})"
            return f"{name} {doing}"
        if p.threads > 1 + len(p.threads_detail):  # past the probe's thread bound: not known to be idle
            return f"{p.threads - 1 - len(p.threads_detail)} other thread(s) not read"
        return None

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

    # ------------------------------------------------------------------ edges

    def edges(self, pid: int) -> tuple[WaitEdge, ...]:
        found = self._edges.get(pid)
        if found is None:
            p = self.tree.by_pid.get(pid)
            found = self._edges[pid] = tuple(self._derive(p)) if p is not None else ()
        return found

    def _derive(self, p: Process) -> Iterator[WaitEdge]:
        main = main_task(p)
        kind = self.kind(p)
        if kind == "child":
            jobs = self.jobs(p)
            if jobs:
                yield WaitEdge(p.pid, "child", tuple(k.pid for k in jobs), "its children's exit")
            return
        found = list(self._task_edges(p, main, kind))
        if kind == "event-loop":
            # one connection and nothing else to wait on: curl, psql (the single edge says more);
            # several pipes and connections: ssh's sshd session, rsync
            polled = list(self._poll_edges(p, main))
            if not found or len(polled) > 1 or (polled and polled[0].socket is None):
                found = polled
        elif kind == "sleep" and not found:
            found = [e for e in (self._sqlite_busy_edge(p), self._app_lock_edge(p)) if e is not None][:1]
        if kind == "event-loop":
            found += [e for e in (self._db_lock_edge(p),) if e is not None]
        yield from found
        if found or kind in ("pipe-read", "pipe-write", "fifo-open", "file-lock", "fuse", "event-loop", "sleep"):
            return  # an event loop or a sleep can act by itself: its threads' waits are not the process's
        if kind == "futex" and isinstance(p.syscall, Syscall) and not untimed_futex(p.syscall):
            return  # a futex wait with a timeout (Event.wait(5), a join with a timeout): it wakes and acts
        # the main thread waits for another thread (a futex with no timeout: a join, a lock) or on
        # nothing we follow: another thread may be held by a full pipe or socket (multiprocessing's queue feeder, a loader thread), a lock or a FUSE
        # server. Threads that wait to read are left out: a result handler waiting for input is how
        # a pool idles, and following it leads round the pool and back
        for t in self.tasks(p)[1:]:
            tk = self.task_kind(p, t)
            if tk in ("pipe-write", "socket-write", "file-lock", "fuse"):
                yield from self._task_edges(p, t, tk)

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

    def _pipe_edges(self, p: Process, kind: WaitKind, t: Task | None = None) -> Iterator[WaitEdge]:
        t = t or main_task(p)
        reading = kind == "pipe-read"
        entry = self.waited_entry(p, t.syscall)
        candidates: list[FdEntry]
        if entry is not None:
            candidates = [entry]
        elif isinstance(p.fds, Unavailable):
            candidates = []
        else:  # no system call to say which fd: every anonymous pipe end it holds that way (a path
            # could be a FIFO, or /dev/null opened read-write as stdio: only the system call tells)
            want = ("r", "rw") if reading else ("w", "rw")
            candidates = [e for e in p.fds if e.mode in want and e.pipe_inode is not None]
        other_modes = ("w", "rw") if reading else ("r", "rw")
        for e in candidates:
            ino = e.pipe_inode
            if ino is not None:
                ends = self._fds.pipes.get(ino, [])
                name, kind_e, path = f"pipe:[{ino}]", "pipe", None
            else:
                ends = self._fds.paths.get(e.path, [])
                name, kind_e, path = f"FIFO {e.path}", "fifo", e.path
            others = sorted({pid for pid, o in ends if o.mode in other_modes and pid != p.pid})
            own = any(pid == p.pid and o.mode in other_modes and o.fd != e.fd for pid, o in ends)
            if not others and own and entry is not None:
                others = [p.pid]  # it holds the other end itself: nobody else can end the wait
            role = "writer" if reading else "reader"
            ev = [Evidence("/proc/fd", f"{t.who} {'reads' if reading else 'writes'} {name} on fd {e.fd}")]
            ev += [Evidence("/proc/fd", f"{name} {role}: {self._label(h)}") for h in others[:8]]
            yield WaitEdge(
                p.pid,
                kind_e,  # type: ignore[arg-type]
                tuple(others),
                f"{name} (fd {e.fd}), {'empty' if reading else 'full'}",
                tuple(ev),
                fd=e.fd,
                path=path,
                thread=t.tid,
                inferred=entry is None and len(candidates) > 1,  # which of its pipes, only the syscall says
                writes=not reading,
            )

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
        head = Evidence("/proc/wchan", f"{t.who} waits in {t.wchan} over its pipes and connections")
        for e in p.fds:
            if len(out) >= MAX_POLL_FDS:
                break
            ino = e.pipe_inode
            if ino is not None and e.mode in ("r", "w"):
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
            if sock is None or sock.state not in ("ESTABLISHED", "CONNECTED"):
                continue
            if sock.proto.startswith("tcp"):
                edge = self._tcp_edge(p, sock, e.fd)
            elif sock.proto == "unix":
                edge = self._unix_edge(p, sock, e.fd)
            else:
                continue
            kept = tuple(h for h in edge.holders if h != p.pid and not self._waits_back_socket(h, edge.peer))
            if edge.holders and not kept:
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
        elif sc.name in ("poll", "ppoll") and len(sc.args) > 1 and sc.args[1] < len(out):
            out = sorted(out, key=lambda e: (e.socket is None, e.fd if e.fd is not None else 1 << 20))[: sc.args[1]]
        # ends that cannot move first, and what it writes to them (a backlog), before the rest: the
        # walk meets them before the other pollers
        out = [replace(e, holders=tuple(sorted(e.holders, key=lambda h: not self._frozen(h)))) for e in out]
        out.sort(key=lambda e: (not any(self._frozen(h) for h in e.holders), not e.writes))
        yield from out

    def _pollable(self, p: Process) -> bool:
        """Not a server: a process holding a listening socket waits for work, not on its clients."""
        for e in p.fds if not isinstance(p.fds, Unavailable) else ():
            sock = self._sockets.get(e.socket_inode) if e.socket_inode is not None else None
            if sock is not None and sock.state == "LISTEN":
                return False
        return True

    def _frozen(self, pid: int) -> bool:
        """Stopped, traced or in uninterruptible sleep: it will not move first."""
        q = self.tree.by_pid.get(pid)
        return q is not None and q.state in ("T", "t", "D")

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

    def _db_lock_edge(self, p: Process) -> WaitEdge | None:
        """A PostgreSQL backend says in its process title that it waits for a lock (`... UPDATE
        waiting`); which session holds it only pg_locks says. The likely holders are the backends of
        the same server idle in a transaction (they hold their locks until they commit), else the
        ones running a statement. Worded as likely, with the titles as evidence."""
        title = process_title(p)
        if not title.startswith("postgres: ") or not title.endswith(" waiting"):
            return None
        siblings = [q for q in self.tree.kids(p.ppid) if q.pid != p.pid and q.state != "Z"]
        title_of = process_title

        idle_tx = [q for q in siblings if " idle in transaction" in title_of(q)]
        active = [
            q
            for q in siblings
            if title_of(q).startswith("postgres: ")
            and _PG_CLIENT.search(title_of(q))
            and not title_of(q).endswith((" idle", " waiting"))
            and " idle in transaction" not in title_of(q)
        ]
        likely = idle_tx or active
        ev = [Evidence("title", f"{p.pid}: {title[:200]}")]
        ev += [Evidence("title", f"{q.pid}: {title_of(q)[:200]}") for q in likely[:8]]
        why = "idle in a transaction" if idle_tx else "running a statement"
        return WaitEdge(
            p.pid,
            "db-lock",
            tuple(q.pid for q in likely),
            f"a PostgreSQL lock; likely held by the session(s) {why}",
            tuple(ev),
            inferred=True,
        )

    def _app_lock_edge(self, p: Process) -> WaitEdge | None:
        """A waiter that retries a lock in a sleep loop holds no lock between attempts and often not
        even the file (apt's DPkg::Lock::Timeout closes it), so no kernel wait names it. The holder
        is a process holding a write lock in /proc/locks while it has open a lock file that the
        sleeper has open too, or, for apt and dpkg, one of the package system's lock files
        (`lock-frontend`, `lock` of dpkg's or apt's directories). Inferred: a retry loop."""
        _waiting, held = self._locks
        if not held or isinstance(p.fds, Unavailable):
            return None
        mine = {e.path for e in p.fds if _lock_named(e.path)}
        apt = p.comm in APT_COMMS
        if not mine and not apt:
            return None
        if any(lk.pid == p.pid for lk in held.values()):
            return None  # it holds a lock itself: not a waiter kept out
        for lk in held.values():
            if lk.access != "WRITE" or lk.pid is None or lk.pid == p.pid:
                continue
            holder = self.tree.by_pid.get(lk.pid)
            if holder is None or isinstance(holder.fds, Unavailable):
                continue
            theirs = {e.path for e in holder.fds if e.path.startswith("/") and not e.deleted}
            path = next(iter(sorted(mine & theirs)), None)
            if path is None and apt:
                path = next((f for f in sorted(theirs) if _package_lock(f)), None)
            if path is None:
                continue
            ev = (
                Evidence("/proc/wchan", f"{p.pid} ({p.comm}) sleeps between attempts ({p.wchan})"),
                Evidence("/proc/locks", f"held: {lk.kind} WRITE by {self._label(holder.pid)}"),
                Evidence("/proc/fd", f"{path} open in {holder.pid} ({holder.comm})"
                         + (" and in the waiter" if path in mine else "")),
            )  # fmt: skip
            return WaitEdge(p.pid, "file-lock", (holder.pid,), f"the lock on {path}", ev, path=path, lock=lk,
                            inferred=True, retry="lock-file")  # fmt: skip
        return None

    def _fifo_open_edge(self, p: Process) -> WaitEdge:
        """open() of a FIFO blocks until the other end is opened: the path is still in the caller's
        memory, so its command line names the candidates."""
        args = [a for a in p.cmdline[1:] if a and not a.startswith("-")][:4]
        what = "a FIFO nobody has opened from the other end" + (f" (its arguments: {', '.join(args)})" if args else "")
        ev = (Evidence("/proc/wchan", f"{p.pid} ({p.comm}) blocked in {p.wchan} (open of a FIFO)"),)
        return WaitEdge(p.pid, "fifo-open", (), what, ev)

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
        if sock is None:
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
        if isinstance(p.fds, Unavailable):
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
                if sock.state in ("ESTABLISHED", "CONNECTED") and sock.proto in ("tcp", "tcp6", "unix"):
                    if sock.peer_inode is not None and set(self._fds.sockets.get(sock.peer_inode, [])) <= {p.pid}:
                        continue  # a socketpair with itself: curl's and libuv's wake-up channel
                    conn.append((sock, e.fd))
        if len(conn) > 1:  # a wake-up pair whose peer ss could not name: the one TCP connection decides
            conn = [c for c in conn if c[0].proto != "unix"]
        if len(conn) != 1:
            return None
        sock, fd = conn[0]
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
            inferred=True,
        )

    def _tcp_edge(self, p: Process, sock: Socket, fd: int) -> WaitEdge:
        peers = [s for s in self._tcp_peers.get((sock.remote, sock.local), []) if s.inode != sock.inode]
        same_ns = [s for s in peers if s.netns == sock.netns] or peers
        peer = same_ns[0] if same_ns else None
        holders = tuple(sorted(set(self._fds.sockets.get(peer.inode, [])) - {p.pid})) if peer else ()
        if peer is not None and not holders and p.pid in self._fds.sockets.get(peer.inode, []):
            holders = (p.pid,)  # it holds the other end itself: a server in another of its threads
        conn = f"{sock.local} -> {sock.remote}"
        ev = [Evidence("/proc/net/tcp", f"fd {fd}: {conn} {sock.state}, unread here {sock.recv_queue} B")]
        # no peer socket at all: a connection the kernel accepted that no server has accepted yet sits in
        # the listener's queue; a peer socket whose holder is not visible (another PID namespace, a
        # host outside this container) is no queued connection
        listener = self._listener(sock.remote, sock.netns) if not holders and peer is None else None
        if listener is not None:
            # accepted by the kernel, not yet by the server: it sits in the listener's queue
            holders = tuple(sorted(set(self._fds.sockets.get(listener.inode, [])) - {p.pid}))
            ev.append(
                Evidence(
                    "/proc/net/tcp",
                    f"not accepted yet: {listener.local} LISTEN has {listener.recv_queue} connection(s) queued",
                )
            )
            ev += [
                Evidence("/proc/fd", f"listening socket:[{listener.inode}] held by {self._label(h)}")
                for h in holders[:8]
            ]
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
        return WaitEdge(p.pid, "tcp", holders, f"TCP {conn}", tuple(ev), fd=fd, socket=sock, peer=peer)

    @cached_property
    def _local_ips(self) -> frozenset[str]:
        return frozenset(s.local.rsplit(":", 1)[0] for s in self._sockets.values() if s.proto.startswith("tcp"))

    def _listener(self, address: str, netns: int | None) -> Socket | None:
        """The listening socket a connection to `address` lands on, when that address is this host's."""
        ip, _, port = address.rpartition(":")
        local = ip.startswith("127.") or ip == "[::1]" or ip in self._local_ips
        for s in self._sockets.values():
            if s.state != "LISTEN" or not s.proto.startswith("tcp") or (s.netns != netns and netns is not None):
                continue
            lip, _, lport = s.local.rpartition(":")
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
        if sock.peer_inode:
            ev.append(
                Evidence("ss", f"peer socket:[{sock.peer_inode}]" + (f" {peer.local}" if peer and peer.local else ""))
            )
            ev += [Evidence("/proc/fd", f"peer held by {self._label(h)}") for h in holders[:8]]
        elif isinstance(self.snapshot.sockets, SocketTable) and not self.snapshot.sockets.unix_peers_known:
            ev.append(Evidence("ss", "not on the target: a Unix socket's peer is unknown"))
        return WaitEdge(p.pid, "unix-socket", holders, name, tuple(ev), fd=fd, socket=sock, peer=peer)

    def _lock_edges(self, p: Process, t: Task | None = None) -> Iterator[WaitEdge]:
        t = t or main_task(p)
        waiting, held = self._locks
        entry = self.waited_entry(p, t.syscall)
        path = entry.path if entry is not None and entry.target.startswith("/") else None
        requests = waiting.get(p.pid, [])
        if not requests:
            yield WaitEdge(p.pid, "file-lock", (), f"a file lock{f' on {path}' if path else ''} (not in /proc/locks)")
            return
        for req in requests[:4]:
            lk = held.get(req.number)
            holders: tuple[int, ...] = ()
            if lk is not None and lk.pid is not None and lk.pid in self.tree.by_pid:
                holders = (lk.pid,)
            elif path is not None:  # the locker is gone or not visible: who still has the file open
                holders = tuple(sorted({pid for pid, _e in self._fds.paths.get(path, []) if pid != p.pid}))
            where = path or f"inode {req.inode} on device {req.device}"
            ev = [Evidence("/proc/locks", f"{p.pid} ({p.comm}) waits: {req.kind} {req.access} on {where}")]
            if lk is not None:
                who = self._label(lk.pid) if lk.pid is not None else "a process not visible here"
                ev.append(Evidence("/proc/locks", f"held: {lk.kind} {lk.access} by {who}"))
            yield WaitEdge(
                p.pid,
                "file-lock",
                holders,
                f"{req.kind} {req.access} lock on {where}",
                tuple(ev),
                path=path,
                lock=lk,
                thread=t.tid,
            )

    def _sqlite_busy_edge(self, p: Process) -> WaitEdge | None:
        """SQLite's busy handler sleeps between attempts, so no kernel wait names the lock; its lock
        bytes in /proc/locks (from offset 0x40000000) say who waits on whom. A sleeper that holds
        PENDING but not EXCLUSIVE is a writer waiting for the connections that hold SHARED (an open
        read cursor or transaction) to let go. A sleeper that holds no lock of the database is kept
        out by another's PENDING or EXCLUSIVE; SQLite does not retry a connection that holds SHARED,
        and whether a lockless sleeper wants to write (RESERVED would stop it) nothing says."""
        by_pid, keeping_out = self._sqlite_locks
        if not by_pid or isinstance(p.fds, Unavailable):
            return None
        mine = by_pid.get(p.pid, [])
        for own in mine:
            if own.access != "WRITE" or own.start != SQLITE_PENDING:
                continue
            key = (own.device, own.inode)
            if any(lk.access == "WRITE" and lk.start == SQLITE_SHARED and (lk.device, lk.inode) == key for lk in mine):
                return None  # it has EXCLUSIVE: it is writing, not waiting
            readers = sorted(
                {
                    pid
                    for pid, locks in by_pid.items()
                    if pid != p.pid and any((lk.device, lk.inode) == key and lk.start == SQLITE_SHARED for lk in locks)
                }
            )
            if not readers:
                return None
            db = self._sqlite_database(p.pid) or f"inode {own.inode}"
            ev = (
                Evidence("/proc/wchan", f"{p.pid} ({p.comm}) sleeps between attempts ({p.wchan})"),
                Evidence("/proc/locks", f"{p.pid} holds SQLite's PENDING lock ({own.start}): it waits to write"),
                *(Evidence("/proc/locks", f"SHARED (a reader) held by {self._label(r)}") for r in readers[:8]),
            )
            return WaitEdge(p.pid, "file-lock", tuple(readers), f"the readers of {db} (SQLite's SHARED locks)", ev,
                            path=db if db.startswith("/") else None, lock=own, inferred=True,
                            retry="sqlite-busy")  # fmt: skip
        if mine:
            return None  # it holds SHARED (never retried), RESERVED or more: not kept out
        opened = self._readable_files(p)
        for holder, lk, held_db in keeping_out:
            if held_db not in opened:
                continue  # the lock's file is the holder's database: only that one keeps this sleeper out
            ev = (
                Evidence("/proc/wchan", f"{p.pid} ({p.comm}) sleeps between attempts ({p.wchan})"),
                Evidence(
                    "/proc/locks",
                    f"held: {lk.kind} WRITE {lk.start}-{lk.end} by {self._label(holder)}: SQLite's lock bytes",
                ),
                Evidence("/proc/fd", f"{held_db} open in both"),
            )
            return WaitEdge(p.pid, "file-lock", (holder,), f"SQLite's write lock on {held_db}", ev, path=held_db, lock=lk,
                            inferred=True, retry="sqlite-busy")  # fmt: skip
        return None

    @cached_property
    def _sqlite_locks(self) -> tuple[dict[int, list[FileLock]], list[tuple[int, FileLock, str]]]:
        """Held locks by visible holder, and the PENDING or EXCLUSIVE write locks that keep other
        connections out, each with its holder's database: built once, not once per sleeper."""
        _waiting, held = self._locks
        by_pid: dict[int, list[FileLock]] = {}
        for lk in held.values():
            if lk.pid is not None and lk.pid in self.tree.by_pid:
                by_pid.setdefault(lk.pid, []).append(lk)
        keeping_out = []
        for pid, locks in by_pid.items():
            for lk in locks:
                if lk.access == "WRITE" and lk.start in (SQLITE_PENDING, SQLITE_SHARED):
                    db = self._sqlite_database(pid)
                    if db is not None:
                        keeping_out.append((pid, lk, db))
        return by_pid, keeping_out

    def _readable_files(self, p: Process) -> set[str]:
        """Files a process has open to read (a database is, never write-only like a log): not a
        device, not deleted, not SQLite's journal, WAL or shm."""
        if isinstance(p.fds, Unavailable):
            return set()
        return {
            e.path
            for e in p.fds
            if e.mode in ("r", "rw")
            and not e.deleted
            and e.path.startswith("/")
            and not e.path.startswith(("/dev/", "/proc/", "/sys/"))
            and not e.path.endswith(SQLITE_SIDE_FILES)
        }

    def _sqlite_database(self, pid: int) -> str | None:
        """Which database a lock holder's lock is on, without its inode: the file it holds open
        with its rollback journal, else the only file it has open to read; None when that is not
        one file (an app with two databases open)."""
        p = self.tree.by_pid.get(pid)
        if p is None or isinstance(p.fds, Unavailable):
            return None
        files = self._readable_files(p)
        journaled = sorted(f for f in files if any(e.path == f + "-journal" for e in p.fds))
        if len(journaled) == 1:
            return journaled[0]
        return next(iter(files)) if len(files) == 1 else None

    def _fuse_edge(self, p: Process, thread: int | None) -> WaitEdge:
        """The server of the mount the waiter is on: the mount from the waited fd's path, else the
        one its open files or its arguments are under (`cat /mnt/a/x` blocks in open(), before any
        fd), else the only one. Its server is the /dev/fuse holder whose arguments name that mount
        point (sshfs, s3fs, rclone and gcsfuse all take it as an argument); failing that, the
        holders that name no other FUSE mount. Never another mount's server."""
        servers = self._fds.fuse_servers
        mounts = self.snapshot.fuse_mounts if isinstance(self.snapshot.fuse_mounts, tuple) else ()
        task = next((t for t in self.tasks(p) if t.tid == thread), main_task(p))
        mount = self._fuse_mount_of(p, self.waited_entry(p, task.syscall), mounts)
        chosen = servers
        if mount is not None:
            named = [s for s in servers if _names_mount(self._cmd(s), mount)]
            elsewhere = {s for s in servers for m in mounts if m != mount and _names_mount(self._cmd(s), m)}
            chosen = named or [s for s in servers if s not in elsewhere]
        where = f"FUSE mount {mount.mount_point} ({mount.fstype})" if mount else "a FUSE mount"
        who = f"thread {thread} of " if thread else ""
        ev = [Evidence("/proc/wchan", f"{who}{p.pid} ({p.comm}) waits for an answer from {where}")]
        if mount is not None and ":" in mount.device:
            conn = mount.device.split(":", 1)[1]
            ev.append(Evidence("mountinfo", f"{mount.mount_point} is FUSE connection {conn} "
                                            f"(/sys/fs/fuse/connections/{conn})"))  # fmt: skip
        ev += [Evidence("/proc/fd", f"/dev/fuse held by {self._label(s)}") for s in chosen[:8]]
        if not servers:
            ev.append(Evidence("/proc/fd", "no process holds /dev/fuse: the server is gone"))
        elif not chosen:
            ev.append(Evidence("/proc/fd", "no /dev/fuse holder names this mount, and every one names another"))
        return WaitEdge(p.pid, "fuse", tuple(sorted(set(chosen) - {p.pid})), where, tuple(ev), thread=thread,
                        path=mount.mount_point if mount else None)  # fmt: skip

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
                holders: set[int] = set()
                for peer in self._tcp_peers.get((sock.remote, sock.local), []):
                    if peer.inode != sock.inode:
                        holders.update(self._fds.sockets.get(peer.inode, []))
                out |= holders
                unseen += not holders
            elif sock.peer_inode:
                out.update(self._fds.sockets.get(sock.peer_inode, []))
        return out - {pid}, unseen

    @property
    def fuse_servers(self) -> tuple[int, ...]:
        """The processes holding /dev/fuse: every FUSE server on the host."""
        return tuple(self._fds.fuse_servers)

    def _fuse_mount_of(self, p: Process, entry: FdEntry | None, mounts: tuple[FuseMount, ...]) -> FuseMount | None:
        def under(path: str) -> list[FuseMount]:
            return [m for m in mounts if path == m.mount_point or path.startswith(m.mount_point.rstrip("/") + "/")]

        if entry is not None and (found := under(entry.path)):
            return max(found, key=lambda m: len(m.mount_point))
        for paths in (
            [e.path for e in p.fds] if not isinstance(p.fds, Unavailable) else [],
            [a for a in p.cmdline[1:] if a.startswith("/")],
        ):
            hit = {m for path in paths for m in under(path)}
            if len(hit) == 1:
                return hit.pop()
        if len(mounts) == 1:
            return mounts[0]
        # a file opened by a name from the environment or a config (no fd yet, no argument): the
        # only mount with requests waiting for its server is the one this waiter's request is on
        waiting = [m for m in mounts if m.waiting]
        if len(waiting) == 1:
            return waiting[0]
        # no counter (fusectl is not mounted everywhere): a mount no process serves cannot keep a
        # request waiting (its connection ends with its server's /dev/fuse), so when every server
        # names its mount point, the waiter is on a served one
        named = [{m for m in mounts if _names_mount(self._cmd(s), m)} for s in self._fds.fuse_servers]
        if named and all(named) and len(served := set().union(*named)) == 1:
            return served.pop()
        return None

    # ------------------------------------------------------------------ chains

    def chains(self, start: int, limit: int = MAX_CHAINS) -> list[Chain]:
        """Every path from `start` along its wait edges to a process that waits on nothing we can
        follow (the root blocker), or back into the path (a cycle). A path back through an inferred
        edge (a poll, a retry loop) is a ring, not a cycle: it is not followed, and the search goes
        on along the other edges (ssh and sshd poll each other; what stops them is further on)."""
        out: list[Chain] = []
        budget = [MAX_VISITS]

        def walk(pid: int, path: tuple[Hop, ...], on_path: frozenset[int]) -> None:
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
                    walk(h, (*path, hop), on_path | {h})
                    followed = True
            if not followed:
                dangling = next((e for e in edges if not e.holders), None)
                out.append(Chain((*path, Hop(pid, None)), dangling=dangling))

        walk(start, (), frozenset({start}))
        return out

    def settle(self, chain: Chain) -> Chain | None:
        """A chain through an event loop's edges (`poll`) counts only as far as it is sure: to its end
        where that end cannot move first (stopped, traced, in D state) or waits on something nobody
        here holds (a remote peer, a gone server); otherwise up to the last edge that was not a poll's.
        None: nothing of it is sure (a poller among pollers)."""
        edges = chain.edges
        if not any(e.poll for e in edges):
            return chain
        if self._frozen(chain.end) or chain.dangling is not None or chain.cycle:
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
