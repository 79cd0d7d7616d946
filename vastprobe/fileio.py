"""Every file vastprobe writes goes through `write_atomic` (known_hosts is appended to, as ssh
does: `append_line`): a fresh temporary file created with O_CREAT|O_EXCL|O_NOFOLLOW in the
destination's own directory, written, fsynced, renamed over the destination, and the directory
fsynced.

Why: readers (node_exporter, cron consumers, ssh) see the old file or the new one, never half of
one; and a name someone else planted in a shared directory (a symlink at a predictable `x.tmp`,
the trick that made root's `collect -o` overwrite a root-only file) is never opened: O_EXCL fails
on any existing name, a symlink included, and another random name is tried.
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


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes, mode: int | None = 0o644, follow_symlink: bool = False
) -> Path:
    """Replace `path` with `data` atomically; returns the path written.

    `mode` None keeps the existing file's permission bits (0644 for a new file). With
    `follow_symlink`, a symlink at `path` itself is resolved first and its target replaced (the
    user's own known_hosts kept in a dotfiles repository); by default the symlink is replaced. Text
    is encoded as strict UTF-8: a lone surrogate is a bug upstream and fails before any file is made.
    """
    dest = Path(path)
    if follow_symlink:
        dest = Path(os.path.realpath(dest))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(dest).st_mode)
        except FileNotFoundError:
            mode = 0o644
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
    try:
        st = os.stat(p)
    except FileNotFoundError:
        pass
    except OSError as exc:
        return f"{p}: {exc.strerror}"
    else:
        if stat.S_ISDIR(st.st_mode):
            return f"{p}: is a directory"
    try:
        dst = os.stat(directory)
    except FileNotFoundError:
        return f"{directory}: no such directory"
    except OSError as exc:
        return f"{directory}: {exc.strerror}"
    if not stat.S_ISDIR(dst.st_mode):
        return f"{directory}: not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{directory}: directory not writable"
    return None
