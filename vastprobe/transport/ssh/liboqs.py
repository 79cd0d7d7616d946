"""asyncssh asks `ctypes.util.find_library` for liboqs when it is imported; on Linux that runs
`ldconfig -p` once per name (two processes, ~25 ms of wall and CPU here) on every vastprobe start.
When no liboqs file is where the dynamic loader would look, the answer is known without them."""

from __future__ import annotations

import contextlib
import ctypes.util
import os
from collections.abc import Iterator

_NAMES = ("oqs", "liboqs")
_DEFAULT_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/local/lib64")


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _loader_dirs() -> list[str]:
    """LD_LIBRARY_PATH, the default directories with their multiarch subdirectories, and the
    directories named in /etc/ld.so.conf and /etc/ld.so.conf.d/*.conf."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    for d in _DEFAULT_DIRS:
        dirs.append(d)
        dirs += [os.path.join(d, sub) for sub in _listdir(d) if "-linux-" in sub]
    confs = ["/etc/ld.so.conf"] + [
        os.path.join("/etc/ld.so.conf.d", n) for n in _listdir("/etc/ld.so.conf.d") if n.endswith(".conf")
    ]
    for conf in confs:
        with contextlib.suppress(OSError, UnicodeDecodeError), open(conf, encoding="utf-8") as f:
            dirs += [line.strip() for line in f if line.strip().startswith("/")]
    return dirs


def liboqs_may_be_installed() -> bool:
    dirs = dict.fromkeys(os.path.realpath(d) for d in _loader_dirs())  # /lib is /usr/lib on merged-usr
    return any(name.startswith("liboqs.so") for d in dirs for name in _listdir(d))


@contextlib.contextmanager
def skip_absent_liboqs_lookup() -> Iterator[None]:
    """While importing asyncssh: answer "not found" for liboqs at once when no liboqs file exists
    in the loader's directories; otherwise leave the lookup to ctypes."""
    if liboqs_may_be_installed():
        yield
        return
    real = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        return None if name in _NAMES else real(name)

    ctypes.util.find_library = find_library
    try:
        yield
    finally:
        ctypes.util.find_library = real
