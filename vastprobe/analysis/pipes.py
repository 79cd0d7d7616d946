"""Pipe peers across the whole process table: who holds the other end of `pipe:[N]`."""

from __future__ import annotations

from dataclasses import dataclass

from vastprobe.model import HostSnapshot, Unavailable


@dataclass(frozen=True)
class PipeEnd:
    pid: int
    fd: int
    mode: str  # r, w, rw, ?


class PipeTable:
    def __init__(self, snapshot: HostSnapshot) -> None:
        self.ends: dict[int, list[PipeEnd]] = {}
        for p in snapshot.processes:
            if isinstance(p.fds, Unavailable):
                continue
            for e in p.fds:
                ino = e.pipe_inode
                if ino is not None:
                    self.ends.setdefault(ino, []).append(PipeEnd(p.pid, e.fd, e.mode))

    def writers(self, inode: int, besides: int | None = None) -> list[PipeEnd]:
        return [e for e in self.ends.get(inode, []) if e.mode in ("w", "rw") and e.pid != besides]
