"""Threads of multi-threaded processes: their wait channels from the same grep as the processes'
own files, and the stat (name and state) of those that wait on something else than a futex or run,
from the system-call section (probe format 5; older probes read every thread's stat with its wchan):

    /proc/1/task/59/wchan:0                                  (the process section)
    /proc/1/task/59/stat:59 (vsock-console) S 1 ...          (the syscall section)
At most 64 threads of each of the newest 192 multi-threaded processes, 2048 in all (the main thread
is the process itself); the system call of those whose wait needs it comes from the syscall section.
A thread in a futex wait whose stat was not read is asleep (S) under no name the probe read: its
`comm` is empty. The stat is what the probe skips for the idle threads of a busy host (half of what
reading threads cost).
"""

from __future__ import annotations

import re

from vastprobe.model import Syscall, ThreadState
from vastprobe.parsers.proc_stat import parse_stat_head
from vastprobe.parsers.procfs_lines import group_by_pid
from vastprobe.parsers.syscall import resumed

#: the wait channels the probe reads no stat for (script.sh, FUTEX_WAIT in the s0 awk)
_FUTEX_WAIT = re.compile(r"_*futex_")


def parse_threads_section(
    text: str, syscalls: dict[int, Syscall] | None = None, syscall_text: str = ""
) -> dict[int, tuple[ThreadState, ...]]:
    """PID -> its other threads, in thread-id order."""
    wchans = group_by_pid(text, "task/wchan")
    heads: dict[int, tuple[int, str, str]] = {}
    for section in (text, syscall_text):
        stats = group_by_pid(section, "task/stat")
        for tid, lines in stats.lines.items():
            try:
                _tid, comm, state = parse_stat_head("\n".join(lines))
            except ValueError:
                continue
            heads[tid] = (stats.owner[tid], comm, state)
    owners = {**wchans.owner, **{tid: h[0] for tid, h in heads.items()}}
    out: dict[int, list[ThreadState]] = {}
    for tid in sorted(owners):
        w = wchans.lines.get(tid)
        wchan = w[0].strip()[:128] if w else None
        head = heads.get(tid)
        if head is not None:
            comm, state = head[1], head[2]
        elif wchan is not None and _FUTEX_WAIT.match(wchan):
            comm, state = "", "S"
        else:
            continue  # gone between the reads, or past a cut: nothing known of it
        out.setdefault(owners[tid], []).append(
            ThreadState(tid=tid, comm=comm, state=state, wchan=wchan, syscall=resumed((syscalls or {}).get(tid), wchan))
        )
    return {pid: tuple(ts) for pid, ts in out.items()}
