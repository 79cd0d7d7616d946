"""/proc/PID/sched's `se.exec_start`: when a task last ran, by the scheduler's clock (ms). For a
zombie that is when it exited, which no other /proc file says; the probe reads it for zombies and
for its own shell, whose last run is that clock's "now" (the file exists with CONFIG_SCHED_DEBUG)."""

from __future__ import annotations

import re

from vastprobe.parsers.procfs_lines import group_by_pid
from vastprobe.untrusted.numbers import read_float

#: The whole line, strictly: the file's first line is "comm (pid, #threads: n)", and a comm is
#: whatever a process named itself
_EXEC_START = re.compile(r"se\.exec_start {1,64}: {1,64}([0-9]{1,15}\.[0-9]{1,9})", re.ASCII)


def parse_last_ran(text: str) -> dict[int, float]:
    """PID -> se.exec_start in ms, from the sched lines of a `grep -H` section."""
    out: dict[int, float] = {}
    for pid, lines in group_by_pid(text, "sched").lines.items():
        for line in lines:
            m = _EXEC_START.fullmatch(line)
            value = read_float(m.group(1)) if m else None
            if value is not None:
                out[pid] = value
                break
    return out


def exited_ago(last_ran: dict[int, float], zombies: list[int], shell_pid: int | None) -> dict[int, float]:
    """Seconds since each zombie exited: the probe shell's last run minus the zombie's."""
    now = last_ran.get(shell_pid) if shell_pid is not None else None
    if now is None:
        return {}
    return {pid: max(0.0, (now - last_ran[pid]) / 1000) for pid in zombies if pid in last_ran}
