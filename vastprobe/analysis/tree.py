"""The process tree by PPid (the same tree task/*/children gives, without its per-thread gaps)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

from vastprobe.model import HostSnapshot, Process


class ProcessTree:
    def __init__(self, snapshot: HostSnapshot) -> None:
        self.by_pid: dict[int, Process] = {p.pid: p for p in snapshot.processes}

    @cached_property
    def children(self) -> dict[int, list[Process]]:
        out: dict[int, list[Process]] = {}
        for p in self.by_pid.values():
            out.setdefault(p.ppid, []).append(p)
        return out

    def kids(self, pid: int) -> list[Process]:
        return self.children.get(pid, [])

    def descendants(self, pid: int) -> Iterator[Process]:
        stack = list(self.kids(pid))
        seen: set[int] = set()
        while stack:
            p = stack.pop()
            if p.pid in seen:
                continue
            seen.add(p.pid)
            yield p
            stack.extend(self.kids(p.pid))

    def ancestors(self, pid: int) -> Iterator[Process]:
        seen = {pid}
        p = self.by_pid.get(pid)
        while p is not None and p.ppid not in seen:
            seen.add(p.ppid)
            parent = self.by_pid.get(p.ppid)
            if parent is None:
                return
            yield parent
            p = parent

    def in_subtree(self, pid: int, root: int) -> bool:
        return pid == root or any(a.pid == root for a in self.ancestors(pid))
