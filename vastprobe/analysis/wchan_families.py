"""Wait-channel families. Kernel symbol names change between releases (`pipe_read` became
`anon_pipe_read`; dash's wait sleeps in `sigsuspend.isra.0`), so rules match families."""

from __future__ import annotations

from vastprobe.parsers.wchan import wchan_family

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
PIPE_READ = frozenset({"pipe_read", "anon_pipe_read", "pipe_wait_readable"})
NVIDIA_PREFIXES = ("uvm_", "nvidia_", "nv_", "os_")


def family(wchan: str) -> str:
    return wchan_family(wchan).lstrip("_")


def is_child_wait(wchan: str) -> bool:
    return family(wchan) in WAIT_CHILD


def is_pipe_read(wchan: str) -> bool:
    return family(wchan) in PIPE_READ
