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
from vastprobe.untrusted.numbers import read_int


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
                (("lock_file_path", ""), ("build_directory", "/lock")), 1, True),
)  # fmt: skip
#: filelock's locks that are the file itself (O_EXCL), by the type py-spy shows for `self`
EXCLUSIVE_TYPES = frozenset({"SoftFileLock", "AsyncSoftFileLock"})
#: how many frames inside the polling frame a dump may catch (an attempt in progress), and the
#: standard library's files such an attempt passes through (os.path.exists, Path.mkdir)
INNER = 3
STDLIB_INSIDE = frozenset({"genericpath.py", "posixpath.py", "os.py", "pathlib.py", "contextlib.py", "threading.py"})


def _split(frame: str) -> tuple[str, str]:
    """py-spy's "function (file:line)" as (function, file)."""
    name, _, where = frame.rpartition(" (")
    return name, where.rstrip(")").rsplit(":", 1)[0]


def _is(file: str, decl: str) -> bool:
    return file == decl or file.endswith("/" + decl)


@dataclass(frozen=True)
class Polling:
    """A thread waiting in a polling lock, and the lock file its locals name."""

    lock: PollingLock
    frame: str  # py-spy's line of the polling frame
    named: FrameLocal  # the argument or local that names the file
    path: str
    exclusive: bool  # the lock is the file's existence (FileBaton, SoftFileLock)


def polling_lock(thread: PyThread) -> Polling | None:
    """The polling lock a thread waits in, and the file the allow-listed locals of that frame and its
    callers name; None when it waits in none, or no allow-listed local names its file. The polling frame is the innermost one, or within INNER of it when py-spy caught
    the thread inside an attempt: then every frame inside it is the same package's or one of
    STDLIB_INSIDE (genericpath.py of os.path.exists)."""
    for depth, frame in enumerate(thread.frames[: INNER + 1]):
        function, file = _split(frame)
        decl = next((d for d in POLLING_LOCKS if d.function == function and _is(file, d.file)), None)
        if decl is None:
            continue
        package = decl.file.split("/", 1)[0]
        inside = [_split(x)[1] for x in thread.frames[:depth]]
        if not all(f in STDLIB_INSIDE or f.split("/", 1)[0] == package for f in inside):
            return None
        frames = [thread.locals_of(i) for i in range(depth, min(len(thread.frames), depth + decl.callers + 1))]
        exclusive = decl.exclusive or any(v.name == "self" and v.type_name in EXCLUSIVE_TYPES for v in frames[0])
        for name, suffix in decl.paths:
            for local_vars in frames:
                v = next((v for v in local_vars if v.name == name and v.text), None)
                if v is not None and v.text is not None:
                    return Polling(decl, frame, v, v.text.rstrip("/") + suffix if suffix else v.text, exclusive)
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
                return self._py_lock_holder(p, t, found) if found is not None else None
        return None

    def _py_thread_is(self, p: Process, thread: PyThread, t: Task) -> bool:
        """Whether py-spy's thread is this task: by its native thread id (the process's own PID
        namespace's: a container's program seen from the host), or the main thread by its name."""
        if t.tid is not None:
            return thread.tid == str(t.tid)
        own = {str(p.pid), *(str(n) for n in p.nspid[-1:])}
        return thread.tid in own or (thread.name == "MainThread" and read_int(thread.tid) is None)

    def _py_lock_holder(self, p: Process, t: Task, found: Polling) -> WaitEdge | None:
        named, path = found.named, found.path
        relative = not path.startswith("/")
        opened = [
            (pid, e)
            for f, entries in self._fds.paths.items()
            if (f.endswith("/" + path) if relative else f == path)
            for pid, e in entries
            if pid != p.pid and not e.deleted
        ]
        ev = [
            Evidence("py-spy", f"{t.who} sleeps between attempts in {found.frame}: {found.lock.library}"),
            Evidence("py-spy", f"its lock file: {named.name} = {named.repr}"
                     + (f" (+ {path.rsplit('/', 1)[-1]})" if path != named.text else "")
                     + (" (relative to its working directory)" if relative else "")),
        ]  # fmt: skip
        if not found.exclusive:
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
