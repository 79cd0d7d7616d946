"""/proc/PID/syscall: `NR ARG1..ARG6 SP PC` while blocked in a system call, `-1 SP PC` while
blocked outside one, `running` otherwise. Reading it needs PTRACE_MODE_ATTACH (root, in practice).

    /proc/16196/syscall:73 0x3 0x2 0x0 0x1b6 0x7ffe558ab3f0 0x0 0x7ffe558ab3b8 0x7f3c66194897
"""

from __future__ import annotations

from dataclasses import replace

from vastprobe.model import Syscall
from vastprobe.parsers.procfs_lines import group_by_pid
from vastprobe.parsers.wchan import wchan_family
from vastprobe.untrusted.numbers import read_hex, read_int

#: The system calls a wait can sit in, by architecture. aarch64 uses the generic table (no poll,
#: select or plain open: ppoll, pselect6, openat). Numbers from the kernels' syscall tables.
SYSCALL_NAMES: dict[str, dict[int, str]] = {
    "x86_64": {
        0: "read",
        1: "write",
        2: "open",
        7: "poll",
        16: "ioctl",
        17: "pread64",
        19: "readv",
        20: "writev",
        23: "select",
        34: "pause",
        35: "nanosleep",
        42: "connect",
        43: "accept",
        44: "sendto",
        45: "recvfrom",
        46: "sendmsg",
        47: "recvmsg",
        61: "wait4",
        72: "fcntl",
        73: "flock",
        128: "rt_sigtimedwait",
        130: "rt_sigsuspend",
        202: "futex",
        219: "restart_syscall",
        230: "clock_nanosleep",
        232: "epoll_wait",
        247: "waitid",
        257: "openat",
        270: "pselect6",
        271: "ppoll",
        281: "epoll_pwait",
        288: "accept4",
        437: "openat2",
        441: "epoll_pwait2",
    },
    "aarch64": {
        22: "epoll_pwait",
        25: "fcntl",
        29: "ioctl",
        32: "flock",
        56: "openat",
        63: "read",
        64: "write",
        65: "readv",
        66: "writev",
        67: "pread64",
        72: "pselect6",
        73: "ppoll",
        95: "waitid",
        98: "futex",
        101: "nanosleep",
        115: "clock_nanosleep",
        128: "restart_syscall",
        133: "rt_sigsuspend",
        137: "rt_sigtimedwait",
        202: "accept",
        203: "connect",
        206: "sendto",
        207: "recvfrom",
        211: "sendmsg",
        212: "recvmsg",
        242: "accept4",
        260: "wait4",
        437: "openat2",
        441: "epoll_pwait2",
    },
}


def parse_syscall(line: str, arch: str) -> Syscall | None:
    text = line.strip()
    if text == "running":
        return Syscall(number=None, args=(), name=None)
    f = text.split()
    nr = read_int(f[0], 5, signed=True) if f else None
    if nr is None:
        return None
    if nr == -1:
        return Syscall(number=-1, args=(), name=None)
    args = tuple(a for a in (read_hex(x) for x in f[1:7]) if a is not None)
    return Syscall(number=nr, args=args, name=SYSCALL_NAMES.get(arch, {}).get(nr))


#: The call restart_syscall resumes, by the family of its wait channel. The kernel resumes a timed wait
#: that a stop and continue, or a ptrace attach (`strace -p`, `gdb -p`), interrupted through it, with
#: the registers (the arguments) of the call it resumes: a relative nanosleep (its wait channel then
#: do_syscall_64), a futex wait with a timeout (one with none is restarted as a futex call), a poll.
_RESUMED_BY_WCHAN = {
    **dict.fromkeys(("do_syscall_64", "hrtimer_nanosleep", "do_nanosleep", "hrtimer_nanosleep_restart"), "nanosleep"),
    **dict.fromkeys(("poll_schedule_timeout", "do_sys_poll", "do_restart_poll"), "poll"),
}


def resumed(sc: Syscall | None, wchan: str | None) -> Syscall | None:
    """restart_syscall named as the call it resumes. A `sleep 300`, an `Event.wait(400)` that someone
    stopped and continued, or ran `gdb -p` on (as vastprobe's own hints say to), read as a wait with no
    deadline, and its job STALLED, exit 1 (found by a helper)."""
    if sc is None or sc.name != "restart_syscall" or not wchan:
        return sc
    family = wchan_family(wchan.strip()).lstrip("_")
    name = "futex" if family.startswith("futex_") else _RESUMED_BY_WCHAN.get(family)
    return replace(sc, name=name) if name is not None else sc


def parse_syscall_section(text: str, arch: str) -> tuple[dict[int, Syscall], dict[int, str]]:
    """PID -> its system call, and PID -> why it could not be read (not root: "Operation not permitted")."""
    grouped = group_by_pid(text, "syscall")
    out: dict[int, Syscall] = {}
    for pid, lines in grouped.lines.items():
        sc = parse_syscall(lines[0], arch) if lines else None
        if sc is not None:
            out[pid] = sc
    return out, grouped.errors


def parse_task_syscalls(text: str, arch: str) -> dict[int, Syscall]:
    """Thread id -> its system call (/proc/PID/task/TID/syscall lines of the same section)."""
    out: dict[int, Syscall] = {}
    for tid, lines in group_by_pid(text, "task/syscall").lines.items():
        sc = parse_syscall(lines[0], arch) if lines else None
        if sc is not None:
            out[tid] = sc
    return out
