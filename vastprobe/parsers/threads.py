"""Threads of multi-threaded processes, from the same grep as the processes' own files:

    /proc/1/task/59/stat:59 (vsock-console) S          (cut after the state; older probes: whole)
    /proc/1/task/59/wchan:0
At most 64 threads of each of the newest 192 multi-threaded processes, 2048 in all (the main thread
is the process itself); the system call of those whose wait needs it comes from the syscall section.
"""

from __future__ import annotations

from vastprobe.model import Syscall, ThreadState
from vastprobe.parsers.proc_stat import parse_stat_head
from vastprobe.parsers.procfs_lines import group_by_pid


def parse_threads_section(text: str, syscalls: dict[int, Syscall] | None = None) -> dict[int, tuple[ThreadState, ...]]:
    """PID -> its other threads, in thread-id order."""
    stats = group_by_pid(text, "task/stat")
    wchans = group_by_pid(text, "task/wchan")
    out: dict[int, list[ThreadState]] = {}
    for tid, lines in sorted(stats.lines.items()):
        try:
            _tid, comm, state = parse_stat_head("\n".join(lines))
        except ValueError:
            continue
        w = wchans.lines.get(tid)
        out.setdefault(stats.owner[tid], []).append(
            ThreadState(
                tid=tid,
                comm=comm,
                state=state,
                wchan=w[0].strip()[:128] if w else None,
                syscall=(syscalls or {}).get(tid),
            )
        )
    return {pid: tuple(ts) for pid, ts in out.items()}
