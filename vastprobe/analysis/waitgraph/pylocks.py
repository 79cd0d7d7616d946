"""Edges of Python programs that wait for a lock by trying it and sleeping between tries (with
--py-spy only). py-filelock closes its lock file between attempts and torch's FileBaton never opens
it (it waits for the file to be gone), so nothing in /proc links such a waiter to the holder: only
the waiter's Python stack says it waits, and the arguments and locals py-spy reads (`--locals`,
allow-listed on the target: parsers/pystack.ALLOWED_LOCALS) say on which file. The holder is then
found as for apt's lock files: the process holding a write lock in /proc/locks while it has that
file open; for a lock that is the file itself (FileBaton, filelock's SoftFileLock: created with
O_EXCL and held open until released), the process that has it open, and nobody at all is a lock file
left behind. Inferred, like every retry loop."""

from __future__ import annotations

from dataclasses import dataclass

from vastprobe.analysis.waitgraph.edges import Task, WaitEdge
from vastprobe.analysis.waitgraph.index import WaitIndex
from vastprobe.model import Evidence, FileLock, FrameLocal, Process, PyThread


@dataclass(frozen=True)
class PollingLock:
    """A library's lock wait: the frame a waiter sleeps in between attempts (its innermost Python
    frame: the sleep itself is C), and where the lock file's path is among the frame's and its
    callers' allow-listed arguments and locals."""

    library: str  # in words: "py-filelock", "torch's FileBaton"
    function: str  # py-spy's name of the frame: "LockAcquisition._poll_until_acquired"
    file: str  # the frame's file is this, or ends with "/" + this
    paths: tuple[tuple[str, str], ...]  # (local name, what to append), first found wins, nearest frame first
    callers: int  # how many frames out from the polling frame the path may be found
    exclusive: bool  # the lock is the file's existence (O_CREAT|O_EXCL, held open), not a flock on it


#: The polling lock waits, declared once. py-filelock 4.x sleeps in _poll_until_acquired
#: (`lock_filename`), 3.x in BaseFileLock.acquire (`lock_filename`); both have the path as
#: `canonical_path` (4.x) a frame or two out. FileBaton.wait loops on os.path.exists(lock_file_path)
#: with only `self` as a local: its caller in torch.utils.cpp_extension (_jit_compile) has
#: `build_directory`, and the lock is `build_directory/lock`.
POLLING_LOCKS = (
    PollingLock("py-filelock", "LockAcquisition._poll_until_acquired", "filelock/_core/_acquire.py",
                (("lock_filename", ""), ("canonical_path", "")), 2, False),
    PollingLock("py-filelock", "BaseFileLock.acquire", "filelock/_core/_lock.py",
                (("canonical_path", ""), ("lock_filename", "")), 0, False),
    PollingLock("py-filelock", "BaseFileLock.acquire", "filelock/_api.py",
                (("lock_filename", ""), ("lock_file", "")), 0, False),
    PollingLock("torch's FileBaton", "FileBaton.wait", "file_baton.py",
                (("lock_file_path", ""), ("build_directory", "/lock")), 2, True),
)  # fmt: skip
#: filelock's locks that are the file itself (O_EXCL), by the type py-spy shows for `self`
EXCLUSIVE_TYPES = frozenset({"SoftFileLock", "AsyncSoftFileLock"})


def _split(frame: str) -> tuple[str, str]:
    """py-spy's "function (file:line)" as (function, file)."""
    name, _, where = frame.rpartition(" (")
    return name, where.rstrip(")").rsplit(":", 1)[0]


def polling_lock(thread: PyThread) -> tuple[PollingLock, FrameLocal, str, bool] | None:
    """The polling lock a thread waits in (its innermost frame), the local that names the lock file,
    the file's path, and whether the lock is the file's existence; None when it waits in none, or
    no allow-listed local names its file."""
    if not thread.frames:
        return None
    function, file = _split(thread.frames[0])
    for decl in POLLING_LOCKS:
        if function != decl.function or not (file == decl.file or file.endswith("/" + decl.file)):
            continue
        frames = [thread.locals_of(i) for i in range(min(len(thread.frames), decl.callers + 1))]
        exclusive = decl.exclusive or any(v.name == "self" and v.type_name in EXCLUSIVE_TYPES for v in frames[0])
        for name, suffix in decl.paths:
            for local_vars in frames:
                v = next((v for v in local_vars if v.name == name and v.text), None)
                if v is not None and v.text is not None:
                    return decl, v, v.text.rstrip("/") + suffix if suffix else v.text, exclusive
        return None
    return None


class PyLockEdges(WaitIndex):
    """Who holds the lock a sleeping Python program keeps trying (--py-spy)."""

    def _py_lock_edge(self, p: Process, t: Task) -> WaitEdge | None:
        stack = self.snapshot.python_stack(p.pid)
        if stack is None:
            return None
        for thread in stack.threads:
            if self._py_thread_is(p, thread, t):
                found = polling_lock(thread)
                return self._py_lock_holder(p, t, thread, *found) if found is not None else None
        return None

    def _py_thread_is(self, p: Process, thread: PyThread, t: Task) -> bool:
        """Whether py-spy's thread is this task: by its native thread id (the process's own PID
        namespace's: a container's program seen from the host), or the main thread by its name."""
        if t.tid is not None:
            return thread.tid == str(t.tid)
        own = {str(p.pid), *(str(n) for n in p.nspid[-1:])}
        return thread.tid in own or (thread.name == "MainThread" and not thread.tid.isdigit())

    def _py_lock_holder(
        self, p: Process, t: Task, thread: PyThread, decl: PollingLock, named: FrameLocal, path: str, exclusive: bool
    ) -> WaitEdge | None:
        relative = not path.startswith("/")
        opened = [
            (pid, e)
            for f, entries in self._fds.paths.items()
            if (f.endswith("/" + path) if relative else f == path)
            for pid, e in entries
            if pid != p.pid and not e.deleted
        ]
        ev = [
            Evidence("py-spy", f"{t.who} sleeps between attempts in {thread.frames[0]}: {decl.library}"),
            Evidence("py-spy", f"its lock file: {named.name} = {named.repr}"
                     + (f" (+ {path.rsplit('/', 1)[-1]})" if path != named.text else "")
                     + (" (relative to its working directory)" if relative else "")),
        ]  # fmt: skip
        if not exclusive:
            _waiting, held = self._locks
            writers = {lk.pid: lk for lk in held.values() if lk.access == "WRITE" and lk.pid is not None}
            holder = next(((pid, e) for pid, e in opened if pid in writers and pid in self.tree.by_pid), None)
            if holder is None:
                return None  # free now (it gets it at its next attempt), or held out of sight
            pid, e = holder
            lk: FileLock = writers[pid]
            ev += [
                Evidence("/proc/locks", f"held: {lk.kind} WRITE by {self._label(pid)}"),
                Evidence("/proc/fd", f"{e.path} open in {pid} ({self.tree.by_pid[pid].comm})"),
            ]
            return WaitEdge(p.pid, "file-lock", (pid,), f"the lock on {e.path}", tuple(ev), path=e.path, lock=lk,
                            thread=t.tid, inferred=True, retry="py-lock")  # fmt: skip
        holders = tuple(sorted({pid for pid, _e in opened if pid in self.tree.by_pid}))
        shown = opened[0][1].path if opened else path
        if holders:
            ev += [Evidence("/proc/fd", f"{shown} open in {', '.join(self._label(h) for h in holders[:4])}")]
        else:
            ev += [Evidence("/proc/fd", f"no process here has {shown} open")]
        return WaitEdge(p.pid, "file-lock", holders, f"the lock file {shown}", tuple(ev), path=shown, thread=t.tid,
                        inferred=True, retry="lock-exists")  # fmt: skip
