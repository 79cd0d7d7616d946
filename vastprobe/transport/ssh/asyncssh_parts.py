"""asyncssh imports every optional part it can on every start. Two of them serve nothing vastprobe
speaks to and cost ~30-40 ms of CPU per run (a third of a one-host diagnose's own work):

- `asyncssh.crypto.x509`: X.509 certificates as SSH keys (RFC 6187), which OpenSSH does not
  implement; it imports all of `cryptography.x509`, then needs pyOpenSSL (not a dependency of
  asyncssh or of vastprobe: without it the whole import was wasted).
- `asyncssh.crypto.umac`: the UMAC MACs through libnettle, found by `ctypes.util.find_library`,
  which runs `ldconfig -p` in a child process. OpenSSH servers always offer the HMAC-SHA2 MACs,
  and the AEAD ciphers vastprobe prefers need no MAC at all.

asyncssh treats both as optional (it imports them under `except ImportError`); if a future
asyncssh needs one of them, the import is simply retried in full.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

UNUSED = ("asyncssh.crypto.x509", "asyncssh.crypto.umac")


@contextlib.contextmanager
def without_unused_parts() -> Iterator[None]:
    """While importing asyncssh: the modules in UNUSED import as missing."""
    blocked = [name for name in UNUSED if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not found"
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def import_asyncssh() -> None:
    """Import asyncssh without its unused parts, or whole if it refuses to start without them."""
    try:
        with without_unused_parts():
            import asyncssh
    except ImportError:
        for name in [n for n in sys.modules if n == "asyncssh" or n.startswith("asyncssh.")]:
            del sys.modules[name]
        import asyncssh  # noqa: F401
