"""known_hosts and the host-key policy. asyncssh has no trust-on-first-use, so accept-new is here:
known_hosts files are read (cached by mtime and size, a malformed line skipped as OpenSSH does),
a key they do not trust is checked against every recorded key of the host (a changed host key is
its own message with both fingerprints and is never cured by accept-new), and an unknown host is
refused by strict or recorded by accept-new (hashed under HashKnownHosts).
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import hmac
import os
import secrets
import stat
from functools import lru_cache
from pathlib import Path
from typing import Any

from vastprobe.fileio import append_line
from vastprobe.notices import say, say_once
from vastprobe.transport.ssh.asyncssh_lib import asyncssh
from vastprobe.transport.ssh.config import Resolved
from vastprobe.transport.ssh.failures import Attempt

MAX_KNOWN_HOSTS = 64 << 20
_KEY_NAMES = {"ssh-ed25519": "ED25519", "ssh-rsa": "RSA", "ssh-dss": "DSA", "sk-ssh-ed25519@openssh.com": "ED25519-SK"}


def _fp(key: Any) -> str:
    return f"{_KEY_NAMES.get(key.get_algorithm(), key.get_algorithm().upper())} {key.get_fingerprint()}"


def _known_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def _hash_name(name: str) -> str:
    """HashKnownHosts: `|1|salt|HMAC-SHA1(salt, name)`, as ssh-keygen -H writes it."""
    salt = secrets.token_bytes(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _read_text(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read(MAX_KNOWN_HOSTS)
    return data.decode("utf-8", "replace")


@lru_cache(maxsize=32)
def _load_known_hosts(key: tuple[tuple[str, int, int], ...]) -> Any:
    text = "\n".join(_read_text(path) for path, _, _ in key)
    try:
        return asyncssh.import_known_hosts(text)
    except ValueError:  # one malformed line: OpenSSH skips it, so keep the others
        good = []
        for line in text.splitlines():
            try:
                asyncssh.import_known_hosts(line)
            except ValueError:
                continue
            good.append(line)
        return asyncssh.import_known_hosts("\n".join(good))


def _regular(path: str) -> os.stat_result | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def known_hosts_for(r: Resolved) -> Any:
    if r.host_key_check == "off":
        return None
    files = [(p, st.st_mtime_ns, st.st_size) for p in r.known_hosts if (st := _regular(p)) is not None]
    if not files:
        return ([], [], [])  # trust nothing; accept-new may still record
    return _load_known_hosts(tuple(files))


class _Entries:
    """One known_hosts file's entries, read once per version of the file (path, mtime, size), for
    recorded_keys: a host whose key is not trusted was checked against every line of the file, a
    Python loop over 20,000 lines (18-133 ms) for each such host of a sweep. The lines' host patterns
    are joined into one text, where str.find locates the ones naming the host."""

    def __init__(self, text: str) -> None:
        self.lines: list[tuple[int, str]] = []  # (line number, entry)
        patterns: list[str] = []
        self.always: list[int] = []  # hashed or wildcard patterns: every host is checked against them
        for n, line in enumerate(text.splitlines(), 1):
            s = line.strip()
            if not s or s.startswith(("#", "@")):
                continue
            pattern = s.split(None, 1)[0]
            if pattern.startswith("|") or any(c in pattern for c in "*?!"):
                self.always.append(len(self.lines))
            self.lines.append((n, s))
            patterns.append(pattern)
        self.joined = "\n".join(patterns)
        self.starts: list[int] = []  # where each pattern starts in `joined`
        at = 0
        for pattern in patterns:
            self.starts.append(at)
            at += len(pattern) + 1
        self.parsed: dict[int, Any] = {}  # entry index -> asyncssh's reading of it (None: unreadable)

    def naming(self, name: str) -> set[int]:
        """The entries whose host pattern holds `name` (as text: the check is asyncssh's)."""
        if not name or "\n" in name:
            return set(range(len(self.lines)))
        found: set[int] = set()
        i = self.joined.find(name)
        while i >= 0:  # `name` holds no newline: each place it is found lies within one pattern
            found.add(bisect.bisect_right(self.starts, i) - 1)
            i = self.joined.find(name, i + 1)
        return found

    def keys(self, k: int, host: str, addr: str, port: int | None) -> list[Any]:
        if k not in self.parsed:
            try:
                self.parsed[k] = asyncssh.import_known_hosts(self.lines[k][1])
            except ValueError:
                self.parsed[k] = None
        entry = self.parsed[k]
        if entry is None:
            return []
        try:
            return list(entry.match(host, addr, port)[0])
        except ValueError:
            return []


@lru_cache(maxsize=8)
def _entries(path: str, mtime_ns: int, size: int) -> _Entries:
    return _Entries(_read_text(path))


def recorded_keys(files: tuple[str, ...], host: str, addr: str, port: int) -> list[tuple[str, int, Any]]:
    """(file, line number, key) of every known_hosts entry for this host: what a changed key is
    compared with, and the line to remove."""
    out = []
    p = None if port == 22 else port
    for path in files:
        st = _regular(path)
        if st is None:
            continue
        try:
            entries = _entries(path, st.st_mtime_ns, st.st_size)
        except OSError:
            continue
        for k in sorted({*entries.always, *entries.naming(host), *entries.naming(addr)}):
            out += [(path, entries.lines[k][0], key) for key in entries.keys(k, host, addr, p)]
    return out


class HostKeyClient(asyncssh.SSHClient):
    """Host-key policy for keys known_hosts does not trust: a host with a recorded key is a changed
    key under every policy; an unknown host is refused by strict and recorded by accept-new."""

    def __init__(self, r: Resolved, att: Attempt) -> None:
        self.r = r
        self.att = att

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        name = _known_name(host, port)
        recorded = recorded_keys(self.r.known_hosts, host, addr, port)
        if recorded:
            path, line, old = recorded[0]
            self.att.changed = (
                f"host key CHANGED for {name}: the server sent {_fp(key)}, but {path}:{line} records {_fp(old)}. "
                "Someone may be in the middle, or the host was reinstalled; if the change is expected, remove the "
                f"old entry with: ssh-keygen -f '{path}' -R '{name}' (accept-new never replaces a recorded key)"
            )
            return False
        where = " or ".join(self.r.known_hosts) or "any known_hosts file (UserKnownHostsFile none)"
        self.att.unknown = f"host key not trusted: {name} is not in {where} (the server sent {_fp(key)})"
        if self.r.host_key_check != "accept-new":
            return False
        self._record(name, key)
        return True

    def _record(self, name: str, key: asyncssh.SSHKey) -> None:
        if not self.r.known_hosts:
            say(f"vastprobe: accepted {name} ({_fp(key)}) without recording it: UserKnownHostsFile is none")
            return
        path = Path(self.r.known_hosts[0])
        if path.exists() and not path.is_file():  # /dev/null, as vast.ai guides suggest: nothing to keep
            say(f"vastprobe: accepted {name} ({_fp(key)}); not recorded: {path} is not a regular file")
            return
        blob = key.export_public_key("openssh").decode("ascii", "replace").split()
        entry = _hash_name(name) if self.r.hash_known_hosts else name
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            written = append_line(path, f"{entry} {blob[0]} {blob[1]}\n")
        except OSError as exc:
            say(f"vastprobe: Failed to add the host to the list of known hosts ({path}): {exc.strerror or exc}")
            return
        say(f"vastprobe: Permanently added '{name}' ({_fp(key)}) to {written}")


def warn_if_off(r: Resolved, target_text: str) -> None:
    """Once per run, when host keys go unchecked: anyone on the path could be the host."""
    if r.host_key_check != "off":
        return
    if r.policy_source == "--host-key-check":
        text = "host key checking is OFF (--host-key-check off) for every target of this run"
    else:
        text = f"host key checking is OFF ({r.policy_source}), first for {target_text}"
    say_once("host-key-off", f"vastprobe: WARNING: {text}: anyone on the network path can impersonate them")
