"""Edges of a wait for a FUSE server's answer: which mount the waiter is on, and which /dev/fuse
holder serves it (never another mount's server)."""

from __future__ import annotations

from vastprobe.analysis.waitgraph.edges import WaitEdge, main_task
from vastprobe.analysis.waitgraph.index import WaitIndex
from vastprobe.model import Evidence, FdEntry, FuseMount, Process, Unavailable, lies_under


def _names_mount(argv: tuple[str, ...], mount: FuseMount) -> bool:
    """Whether a FUSE server's arguments name this mount point (as given, or with a trailing /)."""
    point = mount.mount_point.rstrip("/") or "/"
    return any(a.rstrip("/") == point for a in argv[1:])


def _path_in(arg: str) -> str | None:
    """The absolute path an argument names: itself, or an option's value (`--data=/mnt/ds/train`)."""
    if arg.startswith("/"):
        return arg
    _, eq, value = arg.partition("=")
    return value if eq and value.startswith("/") else None


class FuseEdges(WaitIndex):
    """Who serves the FUSE mount a process waits on."""

    def _fuse_edge(self, p: Process, thread: int | None) -> WaitEdge:
        """The server of the mount the waiter is on: the mount from the waited fd's path, else the
        one its open files or its arguments are under (`cat /mnt/a/x` blocks in open(), before any
        fd), else the only one. Its server is the /dev/fuse holder whose arguments name that mount
        point (sshfs, s3fs, rclone and gcsfuse all take it as an argument); failing that, the
        holders that name no other FUSE mount. Never another mount's server."""
        servers = self._fds.fuse_servers
        mounts = self.snapshot.fuse_mounts if isinstance(self.snapshot.fuse_mounts, tuple) else ()
        task = next((t for t in self.tasks(p) if t.tid == thread), main_task(p))
        mount = self._fuse_mount_of(p, self.waited_entry(p, task.syscall), mounts)
        chosen = servers
        if mount is not None:
            named = [s for s in servers if _names_mount(self._cmd(s), mount)]
            elsewhere = {s for s in servers for m in mounts if m != mount and _names_mount(self._cmd(s), m)}
            chosen = named or [s for s in servers if s not in elsewhere]
        where = f"FUSE mount {mount.mount_point} ({mount.fstype})" if mount else "a FUSE mount"
        who = f"thread {thread} of " if thread else ""
        ev = [Evidence("/proc/wchan", f"{who}{p.pid} ({p.comm}) waits for an answer from {where}")]
        if mount is not None and ":" in mount.device:
            conn = mount.device.split(":", 1)[1]
            ev.append(Evidence("mountinfo", f"{mount.mount_point} is FUSE connection {conn} "
                                            f"(/sys/fs/fuse/connections/{conn})"))  # fmt: skip
        ev += [Evidence("/proc/fd", f"/dev/fuse held by {self._label(s)}") for s in chosen[:8]]
        if not servers:
            ev.append(Evidence("/proc/fd", "no process holds /dev/fuse: the server is gone"))
        elif not chosen:
            ev.append(Evidence("/proc/fd", "no /dev/fuse holder names this mount, and every one names another"))
        return WaitEdge(p.pid, "fuse", tuple(sorted(set(chosen) - {p.pid})), where, tuple(ev), thread=thread,
                        path=mount.mount_point if mount else None)  # fmt: skip

    @property
    def fuse_servers(self) -> tuple[int, ...]:
        """The processes holding /dev/fuse: every FUSE server on the host."""
        return tuple(self._fds.fuse_servers)

    def _fuse_mount_of(self, p: Process, entry: FdEntry | None, mounts: tuple[FuseMount, ...]) -> FuseMount | None:
        def under(path: str) -> list[FuseMount]:
            return [m for m in mounts if lies_under(path, m.mount_point)]

        if entry is not None and (found := under(entry.path)):
            return max(found, key=lambda m: len(m.mount_point))
        for paths in (
            [e.path for e in p.fds] if not isinstance(p.fds, Unavailable) else [],
            [path for a in p.cmdline[1:] if (path := _path_in(a))],
        ):
            hit = {m for path in paths for m in under(path)}
            if len(hit) == 1:
                return hit.pop()
        if len(mounts) == 1:
            return mounts[0]
        # a file opened by a name from the environment or a config (no fd yet, no argument): the
        # only mount with requests waiting for its server is the one this waiter's request is on
        waiting = [m for m in mounts if m.waiting]
        if len(waiting) == 1:
            return waiting[0]
        # no counter (fusectl is not mounted everywhere): a mount no process serves cannot keep a
        # request waiting (its connection ends with its server's /dev/fuse), so when every server
        # names its mount point, the waiter is on a served one
        named = [{m for m in mounts if _names_mount(self._cmd(s), m)} for s in self._fds.fuse_servers]
        if named and all(named) and len(served := set().union(*named)) == 1:
            return served.pop()
        return None
