"""Every file vastprobe writes goes through `write_atomic` (known_hosts is appended to, as ssh
does: `append_line`): a fresh temporary file created with O_CREAT|O_EXCL|O_NOFOLLOW in the
destination's own directory, written, fsynced, renamed over the destination, and the directory
fsynced.

Why: readers (node_exporter, cron consumers, ssh) see the old file or the new one, never half of
one; and a name someone else planted in a shared directory (a symlink at a predictable `x.tmp`,
the trick that made root's `collect -o` overwrite a root-only file) is never opened: O_EXCL fails
on any existing name, a symlink included, and another random name is tried.

Only a regular file, a symbolic link (replaced, not followed) or nothing is replaced: a device
node or a FIFO at the destination (`--prom` to a named pipe), and any name in /dev itself or under
/proc (`-o /dev/null`, `--prom /dev/stdout` on a pipe, a terminal or a redirected file), is
written in place, opened without O_CREAT and never renamed over: a rename made /dev/null a
regular file for the whole machine when run as root (issue 32). Files vastprobe makes are mode
0600 unless a caller says otherwise: a capture, a report or a textfile can hold command lines and
the secrets in them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from pathlib import Path

#: Random names tried before giving up (each collision means something already sits at that name).
TEMP_ATTEMPTS = 64
#: The mode of every file vastprobe makes (a capture, a report, a textfile, history): the owner's only.
PRIVATE = 0o600
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _temp_name(final: str) -> str:
    """A hidden, unpredictable sibling name (tests replace this to plant files at every name)."""
    return f".{final}.{secrets.token_hex(8)}.tmp"


def _open_temp(directory: Path, final: str, mode: int) -> tuple[int, Path]:
    for _ in range(TEMP_ATTEMPTS):
        tmp = directory / _temp_name(final)
        try:
            return os.open(tmp, _FLAGS, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory}: no free temporary name after {TEMP_ATTEMPTS} tries")


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse O_RDONLY fsync on directories
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _in_system_dir(path: Path) -> bool:
    """Whether `path` names something in /dev itself (root's own directory: not /dev/shm, where
    anyone may plant a name) or under /proc (where nobody makes names): /dev/null, /dev/stdout,
    /dev/fd/N and /proc/self/fd/N are the system's, never names to create or replace."""
    directory = os.path.realpath(path.parent)
    return directory in ("/dev", "/proc") or directory.startswith("/proc/")


def writes_in_place(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is written in place rather than replaced: a name in /dev or /proc
    (`_in_system_dir`), or, anywhere else, something there that is neither a regular file, a
    directory nor a symbolic link (a device node, a FIFO). A link elsewhere is not followed: one
    planted in a shared directory is replaced, as before, and never leads the write to a device."""
    p = Path(path)
    if _in_system_dir(p):
        return True
    try:
        st = os.lstat(p)
    except OSError:
        return False  # nothing there: a new file, made atomically
    return not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode))


def _write_in_place(dest: Path, payload: bytes) -> Path:
    """Open what is there for writing, as a shell's `>` does but never creating it (no O_CREAT),
    and write: a device, a FIFO (this blocks until a reader opens it, as `>` does) or, through a
    link in /dev or /proc, what it leads to (/dev/stdout: a terminal, a pipe, or the file stdout
    was redirected to). Nothing is renamed, chmod'ed or unlinked. Elsewhere O_NOFOLLOW: a node
    swapped for a link since it was looked at is not written through. O_APPEND: what vastprobe
    printed to a redirected stdout before stays (a device or a FIFO ignores the flag)."""
    system = _in_system_dir(dest)
    flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(dest, flags if system else flags | getattr(os, "O_NOFOLLOW", 0))
    try:
        if not system and stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{dest}: became a regular file while being written; not written")
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return dest


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes, mode: int | None = PRIVATE, follow_symlink: bool = False
) -> Path:
    """Replace `path` with `data` atomically; returns the path written.

    `mode` is the file's permission bits, 0600 unless told (a replaced file gets them too, whatever
    it had); None keeps the existing file's bits (0600 for a new file). With `follow_symlink`, a
    symlink at `path` itself is resolved first and its target replaced (the user's own known_hosts
    kept in a dotfiles repository); by default the symlink is replaced. A destination that is not a
    regular file (/dev/null, a FIFO, /dev/stdout) is written in place, never replaced
    (`writes_in_place`). Text is encoded as strict UTF-8: a lone surrogate is a bug upstream and
    fails before any file is made.
    """
    dest = Path(path)
    if follow_symlink:
        dest = Path(os.path.realpath(dest))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if writes_in_place(dest):
        return _write_in_place(dest, payload)
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(dest).st_mode)
        except FileNotFoundError:
            mode = PRIVATE
    directory = dest.parent
    fd, tmp = _open_temp(directory, dest.name, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fchmod(f.fileno(), mode)  # on the descriptor: never a path someone could swap
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)
    return dest


def append_line(path: str | os.PathLike[str], line: str, max_bytes: int = 64 * 1024 * 1024) -> Path:
    """Append one line as OpenSSH appends to known_hosts: O_APPEND and one write(), so a line that
    ssh or another sweep appends meanwhile is kept (rewriting the file and renaming it over would
    drop it: 3 processes adding 300 hosts each to a 1-line file left 369 of 901 lines that way).
    vastprobes take turns (flock), so none reads the file's size in the middle of another's write
    and adds a stray newline. Follows a symlink at the path itself (the user's own dotfiles link,
    as ssh does); creates the file as ssh does (0666 less the umask); refuses one that is not a
    regular file or is over `max_bytes`."""
    dest = Path(os.path.realpath(path))
    data = line.encode("utf-8")
    fd = os.open(dest, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            # other vastprobes wait here: the size read next is then never one in the middle of their write
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{dest}: not a regular file")
        if st.st_size > max_bytes:
            raise OSError(f"{dest}: larger than {max_bytes} bytes; not appended to")
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return dest


def create_private(path: str | os.PathLike[str]) -> bool:
    """An empty file, mode 0600 from its first instant, created only where nothing is (O_EXCL)
    and never through a link (O_NOFOLLOW): for a file another program fills afterwards (SQLite's
    history), which would otherwise create it through a link planted at its name. False: something
    is already there (the caller checks what)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def output_path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a file could not be written at `path` (checked before any work starts), or None."""
    p = Path(path)
    directory = p.parent
    if p.name in ("", ".", ".."):
        return f"{p}: not a file name"
    st: os.stat_result | None
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return f"{p}: {exc.strerror}"
    if st is not None and stat.S_ISDIR(st.st_mode):
        return f"{p}: is a directory"
    try:
        dst = os.stat(directory)
    except FileNotFoundError:
        return f"{directory}: no such directory"
    except OSError as exc:
        return f"{directory}: {exc.strerror}"
    if not stat.S_ISDIR(dst.st_mode):
        return f"{directory}: not a directory"
    if writes_in_place(p):  # /dev/null, a FIFO, /dev/stdout: written in place, its directory untouched
        if st is None:
            return f"{p}: no such file (vastprobe creates nothing in /dev or /proc)"
        if stat.S_ISSOCK(st.st_mode):
            return f"{p}: is a socket"
        return None if os.access(p, os.W_OK) else f"{p}: not writable"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{directory}: directory not writable"
    return None
