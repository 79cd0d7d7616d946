"""What the wait-for graph is made of: an edge (a waiter, the resource it waits on, who can end
the wait), a hop and a chain of them, and a task (one thread of a process as a waiter). Plain values
every other module of the graph, and the analyses and rules that read chains, share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vastprobe.model import Evidence, FileLock, Process, Socket, Syscall, Unavailable

EdgeKind = Literal["child", "pipe", "fifo", "fifo-open", "unix-socket", "tcp", "file-lock", "fuse", "db-lock"]


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
    #: a TCP connection the kernel accepted and no server has: the listening socket whose queue holds it
    listener: Socket | None = None
    lock: FileLock | None = None
    thread: int | None = None  # the thread that waits, when it is not the main one
    inferred: bool = False  # not a blocking wait on this very resource: a poll, a retry loop, a title
    poll: bool = False  # one fd of an event loop over several: the waiter waits on any of them
    #: a waiter that sleeps and tries again: SQLite's busy handler, a lock file (apt), a Python polling
    #: lock on a flock (py-filelock), or one that is the lock file's existence (torch's FileBaton)
    retry: Literal["sqlite-busy", "sqlite-wal", "lock-file", "py-lock", "lock-exists"] | None = None
    writes: bool = False  # a pipe or FIFO the waiter writes (full), not one it reads (empty)
    #: the waiter was running at the first read and asleep at the last: its own movement over the window
    #: says nothing of the wait, which only the holder's stillness can prove (graph._caught_awake_on)
    caught_awake: bool = False


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
        if self.tid is None:
            return f"{self.pid} ({self.comm})"
        return f"thread {self.tid}" + (f" ({self.comm})" if self.comm else "") + f" of {self.pid}"


def main_task(p: Process) -> Task:
    return Task(p.pid, None, p.comm, p.state, p.wchan, p.syscall)


def untimed_futex(sc: Syscall | Unavailable) -> bool:
    """A futex wait with no timeout: the thread waits for another thread of its process (a join, a
    lock, a condition without a deadline). Python's Event.wait(5) and a heartbeat's timed wait
    pass a timeout (the 4th argument) and will wake by themselves."""
    return isinstance(sc, Syscall) and sc.name == "futex" and len(sc.args) > 3 and sc.args[3] == 0


def joined_tid(sc: Syscall | Unavailable) -> int | None:
    """The thread a futex wait joins: pthread_join waits on the thread's tid word for it to clear, so
    the value it expects there is that tid (shared, no timeout); None for any other wait."""
    if not untimed_futex(sc) or not isinstance(sc, Syscall) or sc.args[1] & FUTEX_PRIVATE_FLAG:
        return None
    return sc.args[2] if 0 < sc.args[2] < 1 << 22 else None


def opens_for_reading(sc: Syscall | Unavailable | None) -> bool | None:
    """Whether a blocked open() asks for reading (True), for writing (False), or unknown (None): its
    flags' access mode. A FIFO's reader waits for a writer to come; a writer, for its consumer."""
    if not isinstance(sc, Syscall):
        return None
    at = {"open": 1, "openat": 2}.get(sc.name or "")
    if at is None or len(sc.args) <= at:
        return None
    return {0: True, 1: False}.get(sc.args[at] & 3)


FUTEX_PRIVATE_FLAG = 128
FUTEX_CLOCK_REALTIME = 256
#: futex ops that wait: FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2
WAIT_OPS = {
    0: "FUTEX_WAIT",
    6: "FUTEX_LOCK_PI",
    9: "FUTEX_WAIT_BITSET",
    11: "FUTEX_WAIT_REQUEUE_PI",
    13: "FUTEX_LOCK_PI2",
}


def mutex_wait(sc: Syscall | Unavailable) -> bool:
    """A wait for a contended mutex with no timeout: glibc's lock waits in FUTEX_WAIT for the value 2
    ("locked, with waiters"), a priority-inheriting one in FUTEX_LOCK_PI. A thread pool idle for work
    waits on a condition (FUTEX_WAIT_BITSET) instead, so this one may be a deadlock."""
    if not isinstance(sc, Syscall) or not untimed_futex(sc):
        return False
    base = sc.args[1] & ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)
    return (base == 0 and sc.args[2] == 2) or base in (6, 13)


def _untimed_wait_words(sc: Syscall | Unavailable, private: bool) -> str | None:
    """The futex op of an untimed wait, in words, when its futex is private (`private`) or shared as
    asked; else None."""
    if not isinstance(sc, Syscall) or not untimed_futex(sc):
        return None
    op = sc.args[1]
    base = op & ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)
    if bool(op & FUTEX_PRIVATE_FLAG) != private or base not in WAIT_OPS:
        return None
    if private:
        return f"futex({sc.args[0]:#x}, {WAIT_OPS[base]}|FUTEX_PRIVATE_FLAG, no timeout)"
    return f"futex({sc.args[0]:#x}, {WAIT_OPS[base]}, no timeout): shared with other processes"


def shared_untimed_wait(sc: Syscall | Unavailable) -> str | None:
    """The futex op, in words, when `sc` is an untimed wait on a shared futex (one another process
    that maps the same memory can wake: a `multiprocessing` lock or semaphore) and no thread join;
    else None."""
    return None if joined_tid(sc) is not None else _untimed_wait_words(sc, private=False)


def private_untimed_wait(sc: Syscall | Unavailable) -> str | None:
    """The futex op, in words, when `sc` is an untimed wait on a private futex (one no other process
    can wake: only a thread of the waiter's own); else None."""
    return _untimed_wait_words(sc, private=True)
