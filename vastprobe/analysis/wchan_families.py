"""What a blocked task waits for, from its wait channel and system call.

Kernel symbol names change between releases (`pipe_read` became `anon_pipe_read`; dash's wait
sleeps in `sigsuspend.isra.0`; `futex_wait_queue_me` became `futex_do_wait`), so rules match
families, and the system call decides where the wait channel says nothing (`0` on kernels whose
unwinder could not name it, or a generic `wait_woken`).
"""

from __future__ import annotations

from typing import Literal

from vastprobe.model import Syscall, Unavailable
from vastprobe.parsers.wchan import wchan_family

WaitKind = Literal[
    "child",  # wait4/waitid, or a shell's sigsuspend while it has children
    "pipe-read",  # an empty pipe or FIFO
    "pipe-write",  # a full pipe or FIFO
    "fifo-open",  # open() of a FIFO whose other end nobody opened
    "socket-read",  # recv on a connected socket
    "socket-write",  # send on a socket whose peer does not drain
    "socket-connect",  # connect() not answered
    "accept",  # a server waiting for a client (or a FUSE server for a request): idle by design
    "file-lock",  # flock/fcntl lock held by another
    "fuse",  # a request to a FUSE server
    "nfs",  # an NFS/RPC call
    "event-loop",  # poll/select/epoll: many fds, idle by design
    "futex",  # a user-space lock or condition variable
    "sleep",  # a timer
    "signal",  # pause, sigtimedwait
    "stopped",  # SIGSTOP or a tracer
    "nvidia",  # inside the NVIDIA driver
    "tty",  # a terminal read
    "other",
]

WAIT_CHILD = frozenset(
    {
        "do_wait",
        "kernel_wait4",
        "do_sys_wait4",
        "kernel_waitid",
        "do_sys_waitid",
        "sigsuspend",
        "do_sigsuspend",
        "sys_rt_sigsuspend",
        "do_sys_rt_sigsuspend",
    }
)
PIPE_READ = frozenset({"pipe_read", "anon_pipe_read", "fifo_pipe_read", "pipe_wait_readable"})
PIPE_WRITE = frozenset({"pipe_write", "anon_pipe_write", "fifo_pipe_write", "pipe_wait_writable"})
NVIDIA_PREFIXES = ("uvm_", "nvidia_", "nv_", "os_")

_BY_WCHAN: dict[str, WaitKind] = {
    **dict.fromkeys(PIPE_READ, "pipe-read"),
    **dict.fromkeys(PIPE_WRITE, "pipe-write"),
    **dict.fromkeys(("wait_for_partner", "fifo_open"), "fifo-open"),
    **dict.fromkeys(
        (
            "sk_wait_data",
            "unix_stream_read_generic",
            "unix_stream_data_wait",
            "skb_wait_for_more_packets",
            "tcp_recvmsg",
            "tcp_recvmsg_locked",
            "unix_dgram_recvmsg",
        ),
        "socket-read",
    ),
    **dict.fromkeys(("sk_stream_wait_memory", "sock_alloc_send_pskb", "unix_wait_for_peer"), "socket-write"),
    **dict.fromkeys(("inet_wait_for_connect", "__inet_stream_connect"), "socket-connect"),
    **dict.fromkeys(
        ("inet_csk_accept", "unix_accept", "inet_csk_wait_for_connect", "fuse_dev_do_read", "fuse_dev_read"), "accept"
    ),
    **dict.fromkeys(
        (
            "locks_lock_inode_wait",
            "flock_lock_inode_wait",
            "posix_lock_inode_wait",
            "locks_lock_file_wait",
            "fcntl_setlk",
            "break_lease",
        ),
        "file-lock",
    ),
    **dict.fromkeys(("request_wait_answer", "fuse_wait_on_page_writeback", "fuse_simple_request"), "fuse"),
    **dict.fromkeys(("rpc_wait_bit_killable", "nfs_wait_bit_killable", "rpc_wait_for_completion_task"), "nfs"),
    **dict.fromkeys(
        ("poll_schedule_timeout", "do_sys_poll", "do_select", "core_sys_select", "ep_poll", "do_epoll_wait"),
        "event-loop",
    ),
    **dict.fromkeys(("futex_wait_queue_me", "futex_wait_queue", "futex_do_wait", "futex_wait"), "futex"),
    **dict.fromkeys(("hrtimer_nanosleep", "do_nanosleep", "schedule_hrtimeout_range"), "sleep"),
    **dict.fromkeys(("do_sigtimedwait", "sys_pause", "do_sys_pause", "sigtimedwait"), "signal"),
    **dict.fromkeys(("do_signal_stop", "ptrace_stop"), "stopped"),
    **dict.fromkeys(("n_tty_read", "tty_read"), "tty"),
}

_BY_SYSCALL: dict[str, WaitKind] = {
    "wait4": "child",
    "waitid": "child",
    "flock": "file-lock",
    "accept": "accept",
    "accept4": "accept",
    "connect": "socket-connect",
    "poll": "event-loop",
    "ppoll": "event-loop",
    "select": "event-loop",
    "pselect6": "event-loop",
    "epoll_wait": "event-loop",
    "epoll_pwait": "event-loop",
    "epoll_pwait2": "event-loop",
    "futex": "futex",
    "nanosleep": "sleep",
    "clock_nanosleep": "sleep",
    "pause": "signal",
    "rt_sigtimedwait": "signal",
}
#: System calls whose first argument is the file descriptor the wait is on.
FD_SYSCALLS = frozenset(
    {"read", "readv", "pread64", "write", "writev", "recvfrom", "recvmsg", "sendto", "sendmsg", "flock", "fcntl"}
    | {"accept", "accept4", "connect"}
)


def family(wchan: str) -> str:
    return wchan_family(wchan).lstrip("_")


def wait_kind(wchan: str | Unavailable | None, syscall: Syscall | Unavailable | None) -> WaitKind | None:
    """The kind of wait, or None when nothing says (running, or neither source readable)."""
    w = family(wchan) if isinstance(wchan, str) and wchan not in ("", "0") else ""
    if w:
        if w in WAIT_CHILD:
            return "child"
        kind = _BY_WCHAN.get(w)
        if kind == "socket-read" and isinstance(syscall, Syscall) and syscall.name in ("accept", "accept4"):
            # a Unix socket's accept() sleeps in a datagram wait, as a read does: it waits for clients. A
            # multiprocessing Manager's accepting thread so read as a read, and a client of its locked
            # handler DEGRADED, "does not answer", not the locked server it is (found by a helper)
            return "accept"
        if kind is not None:
            return kind
        if w.startswith(NVIDIA_PREFIXES):
            return "nvidia"
        if w.startswith("fuse_") and not w.startswith("fuse_dev_"):
            return "fuse"
    sc = syscall if isinstance(syscall, Syscall) else None
    if sc is not None and sc.name:
        kind = _BY_SYSCALL.get(sc.name)
        if kind is not None:
            return kind
        if sc.name == "rt_sigsuspend":
            return "child"
        return "other"
    return "other" if w else None


#: Where a blocking call takes its deadline: (argument index, given by address). By address, NULL
#: waits for ever; in milliseconds, a negative one does
_TIMEOUT_ARG = {
    "futex": (3, True),
    "epoll_wait": (3, False),
    "epoll_pwait": (3, False),
    "epoll_pwait2": (3, True),
    "poll": (2, False),
    "ppoll": (2, True),
    "select": (4, True),
    "pselect6": (4, True),
    "rt_sigtimedwait": (2, True),
}


def timed_wait(sc: Syscall | Unavailable) -> bool:
    """A blocking call with a deadline, which returns by itself when its time is up: a futex wait with
    a timeout (`Event.wait(30)`, Java's `Thread.sleep`, a scheduler's next run), an event loop's wait
    for its next timer (`asyncio.sleep`, libuv's `setInterval`), `select`/`poll` with a timeout. Only
    nanosleep was read as a timer, and a scheduler between hourly runs read STALLED (found by a helper)."""
    if not isinstance(sc, Syscall) or sc.name not in _TIMEOUT_ARG:
        return False
    i, by_address = _TIMEOUT_ARG[sc.name]
    if len(sc.args) <= i:
        return False
    return sc.args[i] != 0 if by_address else (sc.args[i] & 0xFFFFFFFF) < 0x80000000


def waited_fd(syscall: Syscall | Unavailable | None) -> int | None:
    """The fd a blocked read/write/recv/send/flock/fcntl/accept/connect is on (its first argument), or
    0 for a select() of fd 0 alone."""
    if isinstance(syscall, Syscall) and syscall.name in FD_SYSCALLS and syscall.args:
        fd = syscall.args[0]
        return fd if 0 <= fd < 1 << 20 else None
    if (
        isinstance(syscall, Syscall)
        and syscall.name in ("select", "pselect6")
        and syscall.args[:1] == (1,)
        and not timed_wait(syscall)
    ):
        # select's first argument is the highest fd watched plus one: fd 0 alone (a REPL's prompt), with
        # no timeout; with one, a pause (`pv -L` between its writes read as a cycle with its reader, a
        # warning "deadlock" at one sample; found by a helper)
        return 0
    return None


#: Waits for a block device to finish a request (direct I/O, a page under I/O, writeback, the journal):
#: a device slower than one request per window (a throttled or saturated disk) keeps its writer in D
#: over the window with no byte counted, and a 1 s window proved no hang (found by a helper: `dd
#: oflag=direct` at 256 KiB/s read STALLED 6 probes of 9)
BLOCK_IO_WAITS = frozenset({
    "iomap_dio_rw", "__iomap_dio_rw", "io_schedule", "io_schedule_timeout", "blkdev_direct_IO",
    "__blkdev_direct_IO", "__blkdev_direct_IO_simple", "submit_bio_wait", "blk_mq_get_tag", "rq_qos_wait",
    "wbt_wait", "bit_wait_io", "folio_wait_bit_common", "folio_wait_writeback", "wait_on_page_bit_common",
    "wait_on_page_writeback", "__folio_lock", "__lock_page", "__wait_on_buffer", "wait_on_buffer",
    "balance_dirty_pages", "jbd2_log_wait_commit", "do_get_write_access", "filemap_fdatawait_range",
    "file_write_and_wait_range", "blkdev_issue_flush",
})  # fmt: skip
