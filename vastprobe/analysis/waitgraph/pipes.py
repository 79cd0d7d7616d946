"""Edges of a blocked read or write on a pipe or FIFO (the other end's holders), and of an open()
of a FIFO that waits for its other end to be opened."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.waitgraph.edges import Task, WaitEdge, main_task, opens_for_reading
from vastprobe.analysis.waitgraph.index import WaitIndex
from vastprobe.analysis.wchan_families import WaitKind
from vastprobe.model import Evidence, FdEntry, Process, Unavailable


class PipeEdges(WaitIndex):
    """What a reader of an empty pipe or a writer of a full one waits on."""

    def _pipe_edges(self, p: Process, kind: WaitKind, t: Task | None = None) -> Iterator[WaitEdge]:
        t = t or main_task(p)
        reading = kind == "pipe-read"
        entry = self.waited_entry(p, t.syscall)
        candidates: list[FdEntry]
        if entry is not None:
            candidates = [entry]
        elif isinstance(p.fds, Unavailable):
            candidates = []
        else:  # no system call to say which fd: every anonymous pipe end it holds that way (a path
            # could be a FIFO, or /dev/null opened read-write as stdio: only the system call tells)
            want = ("r", "rw") if reading else ("w", "rw")
            candidates = [e for e in p.fds if e.mode in want and e.pipe_inode is not None]
        other_modes = ("w", "rw") if reading else ("r", "rw")
        if not reading and entry is not None and entry.path.startswith(("/dev/pts/", "/dev/tty")):
            yield self._terminal_write_edge(p, t, entry)
            return
        for e in candidates:
            ino = e.pipe_inode
            if ino is not None:
                ends = self._fds.pipes.get(ino, [])
                name, kind_e, path = f"pipe:[{ino}]", "pipe", None
            else:
                ends = self._fds.paths.get(e.path, [])
                name, kind_e, path = f"FIFO {e.path}", "fifo", e.path
            others = sorted({pid for pid, o in ends if o.mode in other_modes and pid != p.pid})
            own = any(pid == p.pid and o.mode in other_modes and o.fd != e.fd for pid, o in ends)
            if not others and own and entry is not None:
                others = [p.pid]  # it holds the other end itself: nobody else can end the wait
            role = "writer" if reading else "reader"
            ev = [Evidence("/proc/fd", f"{t.who} {'reads' if reading else 'writes'} {name} on fd {e.fd}")]
            ev += [Evidence("/proc/fd", f"{name} {role}: {self._label(h)}") for h in others[:8]]
            yield WaitEdge(
                p.pid,
                kind_e,  # type: ignore[arg-type]
                tuple(others),
                f"{name} (fd {e.fd}), {'empty' if reading else 'full'}",
                tuple(ev),
                fd=e.fd,
                path=path,
                thread=t.tid,
                inferred=entry is None and len(candidates) > 1,  # which of its pipes, only the syscall says
                writes=not reading,
            )

    def _terminal_write_edge(self, p: Process, t: Task, e: FdEntry) -> WaitEdge:
        """A write to a terminal blocks until its master drains it, as a full pipe's does until its reader
        reads: the master's holder is the nearest ancestor holding /dev/ptmx (tmux's server, sshd, a
        pexpect driver; which pty each master is, only fdinfo's tty-index says). A pane's job blocked
        writing behind a stopped tmux server read STALLED as a prompt, "waits for someone to type"
        (found by a helper)."""
        master = self.pty_master_holder(p, within=8)
        holder = master.pid if master is not None else None
        ev = [Evidence("/proc/fd", f"{t.who} writes the terminal {e.path} on fd {e.fd}")]
        if holder is not None:
            ev.append(
                Evidence("/proc/fd", f"its master (/dev/ptmx) held by {self._label(holder)}, its nearest such ancestor")
            )
        return WaitEdge(
            p.pid,
            "pipe",
            (holder,) if holder is not None else (),
            f"the terminal {e.path} (fd {e.fd}), its output undrained",
            tuple(ev),
            fd=e.fd,
            thread=t.tid,
            inferred=True,
            writes=True,
        )

    def _fifo_open_edge(self, p: Process) -> WaitEdge:
        """open() of a FIFO blocks until the other end is opened: the path is still in the caller's
        memory, so its command line names the candidates."""
        args = [a for a in p.cmdline[1:] if a and not a.startswith("-")][:4]
        reading = opens_for_reading(p.syscall)
        side = " for reading" if reading else " for writing" if reading is False else ""
        what = f"a FIFO{side} nobody has opened from the other end" + (
            f" (its arguments: {', '.join(args)})" if args else ""
        )
        ev = (Evidence("/proc/wchan", f"{p.pid} ({p.comm}) blocked in {p.wchan} (open of a FIFO)"),)
        return WaitEdge(p.pid, "fifo-open", (), what, ev)
