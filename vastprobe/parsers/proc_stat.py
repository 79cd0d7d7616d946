"""/proc/PID/stat records.

Input (one record; comm may hold spaces, parentheses and newlines, so it is cut at the *last* ')'):
    2115 (python3) S 2110 2115 2110 0 -1 4194304 ... 14:utime 15:stime ... 20:threads ... 22:starttime
"""

from __future__ import annotations

from dataclasses import dataclass

from vastprobe.parsers.procfs_lines import group_by_pid
from vastprobe.untrusted.numbers import read_int, read_signed_ints

STATES = frozenset("RSDTtZXIWxKP")


@dataclass(frozen=True)
class StatRecord:
    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int
    session: int
    tty_nr: int
    tpgid: int
    flags: int
    utime: int
    stime: int
    num_threads: int
    starttime: int
    vsize: int
    rss_pages: int


PF_KTHREAD = 0x00200000


def parse_stat(record: str) -> StatRecord:
    """Raises ValueError on anything that is not a stat record."""
    open_ = record.index("(")
    close = record.rindex(")")
    if close < open_:
        raise ValueError("stat: parentheses out of order")
    pid = read_int(record[:open_])
    if pid is None:
        raise ValueError("stat: no pid")
    comm = record[open_ + 1 : close]
    f = record[close + 2 :].split()
    if len(f) < 22:
        raise ValueError(f"stat: {len(f)} fields after comm, need 22")
    state = f[0]
    if state not in STATES:
        raise ValueError(f"stat: unknown state {state!r}")
    nums = read_signed_ints(f[1:22])
    if nums is None:
        raise ValueError("stat: a field is not a number")
    # f[N-3] is field N of proc(5)
    return StatRecord(
        pid=pid,
        comm=comm,
        state=state,
        ppid=nums[0],
        pgrp=nums[1],
        session=nums[2],
        tty_nr=nums[3],
        tpgid=nums[4],
        flags=nums[5],
        utime=nums[10],
        stime=nums[11],
        num_threads=nums[16],
        starttime=nums[18],
        vsize=nums[19],
        rss_pages=nums[20],
    )


def parse_stat_head(record: str) -> tuple[int, str, str]:
    """pid, comm and state: all a thread's record holds (the probe cuts it after the state; a
    whole record reads the same). Raises ValueError on anything else."""
    open_ = record.index("(")
    close = record.rindex(")")
    pid = read_int(record[:open_])
    state = record[close + 2 : close + 3]
    if close < open_ or pid is None or state not in STATES:
        raise ValueError("stat: not a record")
    return pid, record[open_ + 1 : close], state


def parse_stat_section(text: str) -> tuple[dict[int, StatRecord], dict[int, str]]:
    """PID -> record, and PID -> reason for records that could not be read or parsed."""
    grouped = group_by_pid(text, "stat")
    records: dict[int, StatRecord] = {}
    errors = dict(grouped.errors)
    for pid, lines in grouped.lines.items():
        try:
            rec = parse_stat("\n".join(lines))
        except ValueError as exc:
            errors[pid] = f"unparsable stat: {exc}"
            continue
        if rec.pid != pid:
            errors[pid] = f"stat names pid {rec.pid}"
            continue
        records[pid] = rec
    return records, errors
