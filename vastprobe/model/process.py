"""One process as the probe saw it: its fds, threads, system call and wait channel, I/O counters
and the samples taken of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vastprobe.model.unavailable import Unavailable
from vastprobe.untrusted.numbers import read_int

FdMode = Literal["r", "w", "rw", "?"]


@dataclass(frozen=True)
class FdEntry:
    fd: int
    target: str
    mode: FdMode

    @property
    def deleted(self) -> bool:
        return self.target.endswith(" (deleted)")

    @property
    def path(self) -> str:
        return self.target[: -len(" (deleted)")] if self.deleted else self.target

    @property
    def pipe_inode(self) -> int | None:
        return self._inode("pipe:[")

    @property
    def socket_inode(self) -> int | None:
        return self._inode("socket:[")

    def _inode(self, prefix: str) -> int | None:
        """`pipe:[N]`, `socket:[N]`: N, read as numbers.py reads every number (None when garbled)."""
        if self.target.startswith(prefix) and self.target.endswith("]"):
            return read_int(self.target[len(prefix) : -1])
        return None

    @property
    def is_gpu_device(self) -> bool:
        return self.target.startswith("/dev/nvidia")


@dataclass(frozen=True)
class EpollWatch:
    """One fd in an epoll instance's interest list (/proc/PID/fdinfo/EPFD `tfd:` lines)."""

    epfd: int
    fd: int
    events: int  # EPOLLIN 0x1, EPOLLOUT 0x4, ...


@dataclass(frozen=True)
class ProcIO:
    rchar: int
    wchar: int
    read_bytes: int | None
    write_bytes: int | None


@dataclass(frozen=True)
class Syscall:
    """/proc/PID/syscall: what a blocked process is doing in the kernel. `number` None: running."""

    number: int | None  # -1: blocked outside a system call (a page fault, a stop)
    args: tuple[int, ...]  # the six arguments (an fd is often the first)
    name: str | None  # from the architecture's table, when known

    @property
    def running(self) -> bool:
        return self.number is None


@dataclass(frozen=True)
class ThreadState:
    """A thread other than the main one (/proc/PID/task/TID)."""

    tid: int
    comm: str
    state: str
    wchan: str | None
    syscall: Syscall | None = None  # read for waits that leave the fd open, polls and futexes (root)


@dataclass(frozen=True)
class ProcSample:
    """The volatile part of a process, read once per sample."""

    state: str
    utime: int  # clock ticks
    stime: int
    io: ProcIO | Unavailable
    voluntary_ctxt: int | None
    nonvoluntary_ctxt: int | None

    @property
    def cpu_ticks(self) -> int:
        return self.utime + self.stime


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    comm: str
    state: str  # first sample's state letter
    pgrp: int
    session: int
    tty_nr: int
    starttime: int  # ticks since boot
    threads: int
    rss_kb: int | None
    hwm_kb: int | None
    uid: int | None
    tracer_pid: int | None
    nspid: tuple[int, ...]
    sig_ign: int | None
    sig_cgt: int | None
    cmdline: tuple[str, ...]
    wchan: str | Unavailable  # "0" = running or not blocked
    fds: tuple[FdEntry, ...] | Unavailable
    fds_truncated: bool
    memory_cgroup: str | None
    cgroup_v2: str | None
    samples: tuple[ProcSample, ...]  # one per probe sample, in order; may be 1
    kernel_thread: bool
    syscall: Syscall | Unavailable = Unavailable("not read by this probe version")
    threads_detail: tuple[ThreadState, ...] = ()  # other threads' states, bounded; () when not read
    exited_ago: float | None = None  # a zombie: seconds since it exited (scheduler clock); None: not known
    tpgid: int | None = None  # the foreground process group of its controlling terminal (-1: none)
    epoll: tuple[EpollWatch, ...] | None = None  # an epoll waiter's interest lists; None: not read
    env: tuple[tuple[str, str], ...] = ()  # distributed-training variables only (parsers/environ.ALLOWED)

    def env_value(self, name: str) -> str | None:
        return next((v for k, v in self.env if k == name), None)

    @property
    def command(self) -> str:
        return " ".join(self.cmdline) if self.cmdline else f"[{self.comm}]"

    @property
    def first(self) -> ProcSample:
        return self.samples[0]

    @property
    def last(self) -> ProcSample:
        return self.samples[-1]
