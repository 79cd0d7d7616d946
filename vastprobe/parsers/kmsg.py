"""Kernel-log lines about OOM kills, NVIDIA Xid errors and hung tasks.

The probe keeps only matching lines (plus `@@source`, `@@err`, `@@lines` markers). Formats
covered, oldest to newest (see docs/rules/oom-killed-child.md):
    [ 1002.44] Memory cgroup out of memory: Killed process 2115 (python3) total-vm:221368kB, anon-rss:40576kB, file-rss:2576kB, shmem-rss:0kB, UID:0 pgtables:148kB oom_score_adj:0
    [ 1002.44] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/vpt,task_memcg=/vpt,task=python3,pid=2115,uid=0
    [  99.1] Out of memory: Kill process 35389 (abuse) score 912 or sacrifice child       (<= 4.18, context only)
    [  99.1] Killed process 35389 (abuse) total-vm:123kB, anon-rss:1kB, file-rss:0kB      (<= 4.18)
    [  99.1] Task in /a killed as a result of limit of /b                                  (<= 4.18)
    [ 5.0] NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
"""

from __future__ import annotations

import dataclasses
import re

from vastprobe.model import KernelEvent, KernelLog

_STAMP = re.compile(r"\[\s*(\d+\.\d+)\]")
_KILLED = re.compile(
    r"Killed process (\d+) \((.*?)\)(?: total-vm:(\d+)kB, anon-rss:(\d+)kB, file-rss:(\d+)kB)?(?:.*?UID:(\d+))?"
)
_SUMMARY = re.compile(
    r"oom-kill:constraint=([^,]*),.*?(?:oom_memcg=([^,]*),)?(?:task_memcg=([^,]*),)?task=(.*?),pid=\s*(\d+),uid=\s*(\d+)"
)
_OLD_TASK_IN = re.compile(r"Task in (\S+) killed as a result of limit of (\S+)")
_INVOKED = re.compile(r"(\S+) invoked oom-killer:")
_USAGE = re.compile(r"memory: usage (\d+)kB, limit (\d+)kB")
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\): (\d+),(?: pid=([^,]*), name=(.*?),)? ?(.*)"
)
_HUNG = re.compile(r"INFO: task (.*):(\d+) blocked for more than (\d+) seconds")
_LOST = re.compile(r"(GPU at PCI:\S+ has fallen off the bus|GPU is lost)")
_ERR_WORDS = re.compile(r"not permitted|denied|failed|No journal files|No entries", re.I)


def _wall(uptime: float | None, btime: int | None) -> float | None:
    return None if uptime is None or btime is None else btime + uptime


def parse_line(line: str, btime: int | None = None) -> KernelEvent | None:
    m = _STAMP.search(line)
    up = float(m.group(1)) if m else None
    wall = _wall(up, btime)
    base = {"line": line, "uptime": up, "wall_time": wall}
    if k := _KILLED.search(line):
        return KernelEvent(
            kind="oom-kill",
            pid=int(k.group(1)),
            comm=k.group(2),
            total_vm_kb=int(k.group(3)) if k.group(3) else None,
            anon_rss_kb=int(k.group(4)) if k.group(4) else None,
            file_rss_kb=int(k.group(5)) if k.group(5) else None,
            uid=int(k.group(6)) if k.group(6) else None,
            detail="memcg" if "Memory cgroup" in line else "global",
            **base,  # type: ignore[arg-type]
        )
    if s := _SUMMARY.search(line):
        return KernelEvent(
            kind="oom-summary",
            constraint=s.group(1),
            memcg=s.group(2),
            task_memcg=s.group(3),
            comm=s.group(4),
            pid=int(s.group(5)),
            uid=int(s.group(6)),
            **base,  # type: ignore[arg-type]
        )
    if t := _OLD_TASK_IN.search(line):
        return KernelEvent(kind="oom-summary", task_memcg=t.group(1), memcg=t.group(2), **base)  # type: ignore[arg-type]
    if u := _USAGE.search(line):
        return KernelEvent(kind="memcg-usage", usage_kb=int(u.group(1)), limit_kb=int(u.group(2)), **base)  # type: ignore[arg-type]
    if i := _INVOKED.search(line):
        return KernelEvent(kind="oom-invoked", comm=i.group(1), **base)  # type: ignore[arg-type]
    if x := _XID.search(line):
        pid = x.group(3)
        return KernelEvent(
            kind="xid",
            pci=x.group(1).lower(),
            xid=int(x.group(2)),
            pid=int(pid) if pid and pid.isdigit() else None,
            comm=x.group(4),
            detail=x.group(5).strip(),
            **base,  # type: ignore[arg-type]
        )
    if h := _HUNG.search(line):
        return KernelEvent(kind="hung-task", comm=h.group(1), pid=int(h.group(2)), detail=h.group(3), **base)  # type: ignore[arg-type]
    if g := _LOST.search(line):
        return KernelEvent(kind="gpu-lost", detail=g.group(1), **base)  # type: ignore[arg-type]
    return None


def _enrich(events: list[KernelEvent]) -> list[KernelEvent]:
    """Fold the summary and memcg usage lines into the kill they introduce."""
    out: list[KernelEvent] = []
    summary: KernelEvent | None = None
    usage: KernelEvent | None = None
    for ev in events:
        if ev.kind == "oom-summary":
            summary = ev
        elif ev.kind == "memcg-usage":
            usage = ev
        elif ev.kind == "oom-kill":
            extra: dict[str, object] = {}
            if summary is not None and (summary.pid in (None, ev.pid)):
                extra.update(constraint=summary.constraint, memcg=summary.memcg, task_memcg=summary.task_memcg)
            if usage is not None:
                extra.update(usage_kb=usage.usage_kb, limit_kb=usage.limit_kb)
            ev = dataclasses.replace(ev, **extra)  # type: ignore[arg-type]
            summary = usage = None
        out.append(ev)
    return out


def parse_kmsg_sections(primary: str | None, fallback: str | None, btime: int | None) -> KernelLog:
    """The kernel log as the probe saw it; a log that could not be read says so."""
    chunks: list[tuple[str, list[str], str | None, int]] = []
    for text in (primary, fallback):
        if not text:
            continue
        source, err, total = "dmesg", None, 0
        lines: list[str] = []
        for line in text.split("\n"):
            if line.startswith("@@source "):
                if lines or err or total:
                    chunks.append((source, lines, err, total))
                source, lines, err, total = line[9:], [], None, 0
            elif line.startswith("@@err "):
                err = line[6:]
            elif line.startswith("@@lines "):
                total = int(line[8:]) if line[8:].isdigit() else 0
            elif line:
                lines.append(line)
        chunks.append((source, lines, err, total))
    if not chunks:
        return KernelLog(
            readable=False, source="none", reason="the probe did not read the kernel log", total_lines=0, events=()
        )
    reasons = []
    for source, lines, err, total in chunks:
        if err and total <= 3 and _ERR_WORDS.search(err):
            reasons.append(f"{source}: {err}")
            continue
        if total == 0:
            reasons.append(f"{source}: empty (cleared, or not readable in this container)")
            continue
        events = [e for e in (parse_line(line, btime) for line in lines) if e is not None]
        return KernelLog(readable=True, source=source, reason=None, total_lines=total, events=tuple(_enrich(events)))
    return KernelLog(readable=False, source=chunks[0][0], reason="; ".join(reasons), total_lines=0, events=())
