"""Edges of a wait for a lock: a file lock in /proc/locks (flock, POSIX, OFD), and the locks
nothing in the kernel names because the waiter sleeps and retries (SQLite's busy handler, apt's
lock timeout) or says so in its process title (a PostgreSQL backend waiting for a row lock).
Those are inferred, and worded as likely."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property

from vastprobe.analysis.waitgraph.edges import Task, WaitEdge, main_task
from vastprobe.analysis.waitgraph.index import WaitIndex
from vastprobe.model import Evidence, FileLock, Process, Unavailable
from vastprobe.untrusted.numbers import read_int

#: SQLite's lock bytes start at 0x40000000 (its PENDING_BYTE): PENDING, RESERVED, then the SHARED range
SQLITE_PENDING, SQLITE_SHARED = "1073741824", "1073741826"  # RESERVED is 1073741825
SQLITE_SIDE_FILES = ("-journal", "-wal", "-shm")
#: WAL mode's locks are bytes of the -shm file: the write lock (120), the checkpoint and recovery
#: locks, five read marks (123-127), and the DMS byte (128) every open connection holds
SQLITE_WAL_WRITE, SQLITE_WAL_DMS = "120", "128"
#: apt's and dpkg's own processes: they retry the package system's locks in a sleep loop
APT_COMMS = frozenset({"apt", "apt-get", "aptitude", "apt-cache", "dpkg", "unattended-upgr", "packagekitd"})
_PG_CLIENT = re.compile(r" (\[local\]|[0-9a-fA-F.:]+\([0-9]+\)|[A-Za-z0-9.-]+\([0-9]+\)) ", re.ASCII)


def _pg_database(title: str) -> str | None:
    """The database of a backend's title, `postgres: USER DATABASE CLIENT …`."""
    words = title.split(" ", 4)
    return words[2] if len(words) > 3 and words[0] == "postgres:" else None


def process_title(p: Process) -> str:
    """A title a process wrote over its argv (PostgreSQL's `postgres: user db [local] UPDATE
    waiting`): one argument, the rest of the old argv's space NUL-padded; "" otherwise."""
    args = [a for a in p.cmdline if a]
    return args[0].rstrip() if len(args) == 1 else ""


def _lock_named(path: str) -> bool:
    """A file whose name says it is a lock: `x.lock`, `lock`, `lock-frontend`, `.lck`."""
    base = path.rsplit("/", 1)[-1].lower()
    return path.startswith("/") and ("lock" in base or base.endswith(".lck"))


def _package_lock(path: str) -> bool:
    base = path.rsplit("/", 1)
    return len(base) == 2 and base[1] in ("lock-frontend", "lock") and ("dpkg" in base[0] or "apt" in base[0])


class LockEdges(WaitIndex):
    """Who holds the lock a process waits for, or keeps it out between its attempts."""

    def _db_lock_edge(self, p: Process) -> WaitEdge | None:
        """A PostgreSQL backend says in its process title that it waits for a lock (`... UPDATE
        waiting`); which session holds it only pg_locks says. The likely holders are the backends of
        the same server idle in a transaction (they hold their locks until they commit), else the
        ones running a statement. Worded as likely, with the titles as evidence."""
        title = process_title(p)
        if not title.startswith("postgres: ") or not title.endswith(" waiting"):
            return None
        title_of = process_title
        db = _pg_database(title)
        # the sessions of its database (a lock is the database's; background workers name none)
        siblings = [
            q
            for q in self.tree.kids(p.ppid)
            if q.pid != p.pid and q.state != "Z" and _pg_database(title_of(q)) in (db, None)
        ]

        idle_tx = [q for q in siblings if " idle in transaction" in title_of(q)]
        active = [
            q
            for q in siblings
            if title_of(q).startswith("postgres: ")
            and _PG_CLIENT.search(title_of(q))
            and not title_of(q).endswith((" idle", " waiting"))
            and " idle in transaction" not in title_of(q)
        ]
        # none of those: a lock that outlives its transactions (a session-level pg_advisory_lock, a
        # migration tool's) is held by a session idle outside one, of the same database (an advisory
        # lock is the database's). A migration lock held so read HEALTHY, no finding (found by a helper)
        idle = [
            q
            for q in siblings
            if title_of(q).endswith(" idle") and _PG_CLIENT.search(title_of(q)) and _pg_database(title_of(q)) == db
        ]
        likely = idle_tx or active or idle
        ev = [Evidence("title", f"{p.pid}: {title[:200]}")]
        ev += [Evidence("title", f"{q.pid}: {title_of(q)[:200]}") for q in likely[:8]]
        why = (
            "idle in a transaction"
            if idle_tx
            else "running a statement"
            if active
            else "idle, outside a transaction (a session-level lock: pg_advisory_lock)"
        )
        return WaitEdge(
            p.pid,
            "db-lock",
            tuple(q.pid for q in likely),
            f"a PostgreSQL lock; likely held by the session(s) {why}"
            if likely
            else "a PostgreSQL lock no session holds",
            tuple(ev),
            inferred=True,
        )

    def _app_lock_edge(self, p: Process) -> WaitEdge | None:
        """A waiter that retries a lock in a sleep loop holds no lock between attempts and often not
        even the file (apt's DPkg::Lock::Timeout closes it), so no kernel wait names it. The holder
        is a process holding a write lock in /proc/locks while it has open a lock file that the
        sleeper has open too, or, for apt and dpkg, one of the package system's lock files
        (`lock-frontend`, `lock` of dpkg's or apt's directories). Inferred: a retry loop."""
        _waiting, held = self._locks
        if not held or isinstance(p.fds, Unavailable):
            return None
        mine = {e.path for e in p.fds if _lock_named(e.path)}
        apt = p.comm in APT_COMMS
        if not mine and not apt:
            return None
        if any(lk.pid == p.pid for lk in held.values()):
            return None  # it holds a lock itself: not a waiter kept out
        for lk in held.values():
            if lk.access != "WRITE" or lk.pid is None or lk.pid == p.pid:
                continue
            holder = self.tree.by_pid.get(lk.pid)
            if holder is None or isinstance(holder.fds, Unavailable):
                continue
            theirs = {e.path for e in holder.fds if e.path.startswith("/") and not e.deleted}
            path = next(iter(sorted(mine & theirs)), None)
            if path is None and apt:
                # the frontend lock first: apt takes it before dpkg's `lock`, and a waiting apt retries it (an
                # unattended apt waiting on lock-frontend was said to wait on dpkg's lock; found by a helper)
                frontend_first = sorted(theirs, key=lambda f: (not f.endswith("/lock-frontend"), f))
                path = next((f for f in frontend_first if _package_lock(f)), None)
            if path is None:
                continue
            ev = (
                Evidence("/proc/wchan", f"{p.pid} ({p.comm}) sleeps between attempts ({p.wchan})"),
                Evidence("/proc/locks", f"held: {lk.kind} WRITE by {self._label(holder.pid)}"),
                Evidence("/proc/fd", f"{path} open in {holder.pid} ({holder.comm})"
                         + (" and in the waiter" if path in mine else "")),
            )  # fmt: skip
            return WaitEdge(p.pid, "file-lock", (holder.pid,), f"the lock on {path}", ev, path=path, lock=lk,
                            inferred=True, retry="lock-file")  # fmt: skip
        return None

    def _lock_edges(self, p: Process, t: Task | None = None) -> Iterator[WaitEdge]:
        t = t or main_task(p)
        waiting, held = self._locks
        entry = self.waited_entry(p, t.syscall)
        path = entry.path if entry is not None and entry.target.startswith("/") else None
        requests = waiting.get(p.pid, [])
        if not requests and path is not None and (ofd := self._ofd_requests()):
            yield self._ofd_edge(p, t, path, ofd)
            return
        if not requests:
            yield WaitEdge(p.pid, "file-lock", (), f"a file lock{f' on {path}' if path else ''} (not in /proc/locks)")
            return
        for req in requests[:4]:
            lk = held.get(req.number)
            holders: tuple[int, ...] = ()
            if lk is not None and lk.pid is not None and lk.pid in self.tree.by_pid:
                holders = (lk.pid, *self._co_holders(req, lk, p.pid))
            elif path is not None:  # the locker is gone or not visible: who still has the file open
                # (to write, for a write lock: a stopped reader of the file is no holder; found by a helper)
                need = ("w", "rw") if lk is not None and lk.access == "WRITE" else ("r", "w", "rw")
                holders = tuple(self._openers(path, p.pid, need))
            where = path or f"inode {req.inode} on device {req.device}"
            ev = [Evidence("/proc/locks", f"{p.pid} ({p.comm}) waits: {req.kind} {req.access} on {where}")]
            if lk is not None:
                who = (
                    self._label(lk.pid)
                    if lk.pid is not None
                    else "an open file description (OFD locks name no process)"
                    if lk.kind == "OFDLCK"
                    else "a process not visible here"
                )
                ev.append(Evidence("/proc/locks", f"held: {lk.kind} {lk.access} by {who}"))
            yield WaitEdge(
                p.pid,
                "file-lock",
                holders,
                f"{req.kind} {req.access} lock on {where}",
                tuple(ev),
                path=path,
                lock=lk,
                thread=t.tid,
            )

    def _openers(self, path: str, waiter: int, modes: tuple[str, ...]) -> list[int]:
        """The processes but the waiter with `path` open in one of `modes`: who may hold a lock on it
        where /proc/locks names nobody (a locker not visible, an OFD lock)."""
        return sorted({pid for pid, e in self._fds.paths.get(path, []) if pid != waiter and e.mode in modes})

    def _ofd_requests(self) -> list[FileLock]:
        """The blocked requests for an open file description's lock (F_OFD_SETLKW): /proc/locks names no
        process for those (-1), the waiter's or the holder's."""
        locks = self.snapshot.locks
        return [] if isinstance(locks, Unavailable) else [k for k in locks if k.waiting and k.kind == "OFDLCK"]

    def _ofd_edge(self, p: Process, t: Task, path: str, requests: list[FileLock]) -> WaitEdge:
        """A wait for an OFD lock on `path`, held by one of the file's other openers: named only where one
        opener alone could hold it (a write lock needs the file open for writing). A waiter behind a
        stopped holder read DEGRADED, "held by a process not visible here (not in /proc/locks)" (found by
        a helper); its first version named every opener, and a stopped one that only read the file made a
        false STALLED, two waiters a false deadlock (found by a helper). Which request is this waiter's
        only the file's inode says, which the probe does not read: with requests on several files, the
        access is unsaid."""
        _waiting, held = self._locks
        files = {(r.device, r.inode) for r in requests}
        blocker = held.get(requests[0].number) if len(files) == 1 else None
        need = {"WRITE": ("w", "rw"), "READ": ("r", "rw")}.get(blocker.access if blocker else "", ("r", "w", "rw"))
        openers = self._openers(path, p.pid, need)
        access = f"{blocker.access} " if blocker is not None else ""
        ev = [
            Evidence("/proc/locks", f"an OFD lock request waits ({access or 'on one of ' + str(len(files)) + ' files'}"
                                    "): OFD locks name no process"),
            *(Evidence("/proc/fd", f"{path} open{' for writing' if need == ('w', 'rw') else ''} in {self._label(h)}")
              for h in openers[:8]),
        ]  # fmt: skip
        if len(openers) != 1:
            ev.append(Evidence("/proc/locks", f"{len(openers)} other process(es) have it open: which holds the lock "
                                              "/proc/locks cannot say"))  # fmt: skip
        holders = tuple(openers) if len(openers) == 1 else ()
        return WaitEdge(p.pid, "file-lock", holders, f"OFD {access}lock on {path}", tuple(ev), path=path,
                        thread=t.tid)  # fmt: skip

    def _co_holders(self, req: FileLock, blocker: FileLock, waiter: int) -> tuple[int, ...]:
        """The other holders of locks that keep `req` out beside the one the kernel names: readers of a
        shared lock a writer waits for. The waiter needs every one of them to let go (one asleep on a
        timer, named alone, cancelled the proof against a stuck one; found by a helper). At most 8."""
        _waiting, held = self._locks
        out: dict[int, None] = {}
        for lk in held.values():
            if len(out) >= 8:
                break
            if lk is blocker or lk.pid is None or lk.pid in (waiter, blocker.pid) or lk.pid not in self.tree.by_pid:
                continue
            if (lk.device, lk.inode) != (req.device, req.inode) or (lk.kind == "FLOCK") != (req.kind == "FLOCK"):
                continue
            if "WRITE" in (lk.access, req.access) and _overlap(lk, req):
                out.setdefault(lk.pid, None)
        return tuple(out)

    def _sqlite_busy_edge(self, p: Process) -> WaitEdge | None:
        """SQLite's busy handler sleeps between attempts, so no kernel wait names the lock; its lock
        bytes in /proc/locks (from offset 0x40000000) say who waits on whom. A sleeper that holds
        PENDING but not EXCLUSIVE is a writer waiting for the connections that hold SHARED (an open
        read cursor or transaction) to let go. A sleeper that holds no lock of the database is kept
        out by another's PENDING or EXCLUSIVE; SQLite does not retry a connection that holds SHARED,
        and whether a lockless sleeper wants to write (RESERVED would stop it) nothing says."""
        by_pid, keeping_out = self._sqlite_locks
        if not by_pid or isinstance(p.fds, Unavailable):
            return None
        mine = by_pid.get(p.pid, [])
        for own in mine:
            if own.access != "WRITE" or own.start != SQLITE_PENDING:
                continue
            key = (own.device, own.inode)
            if any(lk.access == "WRITE" and lk.start == SQLITE_SHARED and (lk.device, lk.inode) == key for lk in mine):
                return None  # it has EXCLUSIVE: it is writing, not waiting
            readers = sorted(
                {
                    pid
                    for pid, locks in by_pid.items()
                    if pid != p.pid and any((lk.device, lk.inode) == key and lk.start == SQLITE_SHARED for lk in locks)
                }
            )
            if not readers:
                return None
            db = self._sqlite_database(p.pid) or f"inode {own.inode}"
            ev = (
                Evidence("/proc/wchan", f"{p.pid} ({p.comm}) sleeps between attempts ({p.wchan})"),
                Evidence("/proc/locks", f"{p.pid} holds SQLite's PENDING lock ({own.start}): it waits to write"),
                *(Evidence("/proc/locks", f"SHARED (a reader) held by {self._label(r)}") for r in readers[:8]),
            )
            return WaitEdge(p.pid, "file-lock", tuple(readers), f"the readers of {db} (SQLite's SHARED locks)", ev,
                            path=db if db.startswith("/") else None, lock=own, inferred=True,
                            retry="sqlite-busy")  # fmt: skip
        if (wal := self._sqlite_wal_edge(p, mine, by_pid)) is not None:
            return wal
        if mine:
            return None  # it holds SHARED (never retried), RESERVED or more: not kept out
        opened = self._readable_files(p)
        for holder, lk, held_db in keeping_out:
            if held_db not in opened:
                continue  # the lock's file is the holder's database: only that one keeps this sleeper out
            ev = (
                Evidence("/proc/wchan", f"{p.pid} ({p.comm}) sleeps between attempts ({p.wchan})"),
                Evidence(
                    "/proc/locks",
                    f"held: {lk.kind} WRITE {lk.start}-{lk.end} by {self._label(holder)}: SQLite's lock bytes",
                ),
                Evidence("/proc/fd", f"{held_db} open in both"),
            )
            # its retry is for the shared lock every reader and writer needs first: "retrying SQLite's write
            # lock" said of a SELECT-only job was false (found by a helper)
            what = f"a lock on {held_db} (SQLite's write lock keeps it out)"
            return WaitEdge(p.pid, "file-lock", (holder,), what, ev, path=held_db, lock=lk, inferred=True,
                            retry="sqlite-busy")  # fmt: skip
        return None

    def _sqlite_wal_edge(self, p: Process, mine: list[FileLock], by_pid: dict[int, list[FileLock]]) -> WaitEdge | None:
        """WAL mode: every open connection holds its database's SHARED range and its -shm file's DMS
        byte, so a sleeper holding those alone is a connection outside any transaction of its own (no
        read mark, not the write lock); while another holds the -shm's write lock, the busy handler it
        sleeps in waits for that lock (a writer kept out by a transaction left open). A reader asleep
        between its queries holds the same locks, and WAL readers never wait for the writer: nothing
        says this one wants to write, so the edge proves nothing (stalls._proof)."""
        for dms in mine:
            if dms.access != "READ" or dms.start != SQLITE_WAL_DMS:
                continue
            key = (dms.device, dms.inode)
            if any((lk.device, lk.inode) == key and lk.start != SQLITE_WAL_DMS for lk in mine):
                return None  # a read mark or the write lock: in a transaction of its own
            writers = [(pid, lk) for pid, locks in sorted(by_pid.items()) if pid != p.pid for lk in locks
                       if (lk.device, lk.inode) == key and lk.access == "WRITE" and lk.start == SQLITE_WAL_WRITE]  # fmt: skip
            if not writers:
                return None
            fds = p.fds if not isinstance(p.fds, Unavailable) else ()
            shm = sorted({e.path for e in fds if e.path.endswith("-shm") and not e.deleted})
            db = shm[0][: -len("-shm")] if len(shm) == 1 else f"the database of -shm inode {dms.inode}"
            holder, lock = writers[0]
            ev = (
                Evidence("/proc/wchan", f"{p.pid} ({p.comm}) sleeps between attempts ({p.wchan})"),
                Evidence(
                    "/proc/locks",
                    f"{p.pid} holds the -shm's DMS byte ({SQLITE_WAL_DMS}) and no read mark: "
                    "an open WAL connection in no transaction of its own",
                ),
                Evidence(
                    "/proc/locks", f"WAL write lock (byte {SQLITE_WAL_WRITE} of {db}-shm) held by {self._label(holder)}"
                ),
            )
            return WaitEdge(p.pid, "file-lock", (holder,), f"SQLite's WAL write lock on {db}", ev,
                            path=db if db.startswith("/") else None, lock=lock, inferred=True,
                            retry="sqlite-wal")  # fmt: skip
        return None

    @cached_property
    def _sqlite_locks(self) -> tuple[dict[int, list[FileLock]], list[tuple[int, FileLock, str]]]:
        """Held locks by visible holder, and the PENDING or EXCLUSIVE write locks that keep other
        connections out, each with its holder's database: built once, not once per sleeper."""
        _waiting, held = self._locks
        by_pid: dict[int, list[FileLock]] = {}
        for lk in held.values():
            if lk.pid is not None and lk.pid in self.tree.by_pid:
                by_pid.setdefault(lk.pid, []).append(lk)
        keeping_out = []
        for pid, locks in by_pid.items():
            for lk in locks:
                if lk.access == "WRITE" and lk.start in (SQLITE_PENDING, SQLITE_SHARED):
                    db = self._sqlite_database(pid)
                    if db is not None:
                        keeping_out.append((pid, lk, db))
        return by_pid, keeping_out

    def _readable_files(self, p: Process) -> set[str]:
        """Files a process has open to read (a database is, never write-only like a log): not a
        device, not deleted, not SQLite's journal, WAL or shm."""
        if isinstance(p.fds, Unavailable):
            return set()
        return {
            e.path
            for e in p.fds
            if e.mode in ("r", "rw")
            and not e.deleted
            and e.path.startswith("/")
            and not e.path.startswith(("/dev/", "/proc/", "/sys/"))
            and not e.path.endswith(SQLITE_SIDE_FILES)
        }

    def _sqlite_database(self, pid: int) -> str | None:
        """Which database a lock holder's lock is on, without its inode: the file it holds open
        with its rollback journal, else the only file it has open to read; None when that is not
        one file (an app with two databases open)."""
        p = self.tree.by_pid.get(pid)
        if p is None or isinstance(p.fds, Unavailable):
            return None
        files = self._readable_files(p)
        journaled = sorted(f for f in files if any(e.path == f + "-journal" for e in p.fds))
        if len(journaled) == 1:
            return journaled[0]
        return next(iter(files)) if len(files) == 1 else None


def _overlap(a: FileLock, b: FileLock) -> bool:
    """Whether two locks' byte ranges meet (a flock is the whole file; `EOF` is no end)."""
    if a.kind == "FLOCK":
        return True
    a0, b0 = read_int(a.start), read_int(b.start)
    a1 = None if a.end == "EOF" else read_int(a.end)
    b1 = None if b.end == "EOF" else read_int(b.end)
    if a0 is None or b0 is None:
        return True  # unreadable: taken to meet, as the kernel's blocker says one does
    return (a1 is None or b0 <= a1) and (b1 is None or a0 <= b1)
