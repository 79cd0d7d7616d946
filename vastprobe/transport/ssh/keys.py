"""Key files and ssh-agent, as OpenSSH uses them: keys are read here, not by asyncssh, so that an
encrypted key is skipped with a note while ssh-agent signs for it, a private key readable by
others gets OpenSSH's warning and is ignored, and a `.pub` given as an identity selects the
agent's key. client_keys puts them in OpenSSH's order for one connection and notes what it
offered and skipped (Attempt) for the sentence when authentication fails.
"""

from __future__ import annotations

import base64
import os
import stat
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from vastprobe.notices import say, say_once
from vastprobe.transport.ssh.asyncssh_lib import asyncssh
from vastprobe.transport.ssh.config import Resolved
from vastprobe.transport.ssh.failures import Attempt

MAX_KEY_FILE = 1 << 20


@dataclass(frozen=True)
class KeyFile:
    """One identity file as OpenSSH would see it: its public blob when known (to pick the agent's
    copy) and the private key when it can be used without a passphrase; otherwise the reason."""

    path: str
    public: bytes | None
    private: Any  # asyncssh.SSHKey | None
    problem: str | None  # None: usable; else "not found", "encrypted", "bad permissions", ...
    public_only: bool = False


def _looks_public(data: bytes) -> bool:
    head = data[:64].lstrip()
    return head.startswith((b"ssh-", b"ecdsa-", b"sk-", b"---- BEGIN SSH2 PUBLIC KEY"))


def _openssh_public_blob(data: bytes) -> bytes | None:
    """The public key stored in clear at the head of an openssh-key-v1 file, encrypted or not."""
    begin, end = b"-----BEGIN OPENSSH PRIVATE KEY-----", b"-----END OPENSSH PRIVATE KEY-----"
    i, j = data.find(begin), data.find(end)
    if i < 0 or j < i:
        return None
    try:
        raw = base64.b64decode(b"".join(data[i + len(begin) : j].split()), validate=True)
        magic = b"openssh-key-v1\0"
        if not raw.startswith(magic):
            return None
        pos = len(magic)
        for _ in range(3):  # ciphername, kdfname, kdfoptions
            (n,) = struct.unpack_from(">I", raw, pos)
            pos += 4 + n
        (nkeys,) = struct.unpack_from(">I", raw, pos)
        (n,) = struct.unpack_from(">I", raw, pos + 4)
        blob = raw[pos + 8 : pos + 8 + n]
    except (ValueError, struct.error):
        return None
    return blob if nkeys >= 1 and len(blob) == n and n > 0 else None


def _public_of(path: str, data: bytes) -> bytes | None:
    try:
        with open(path + ".pub", "rb") as f:
            return bytes(asyncssh.import_public_key(f.read(MAX_KEY_FILE)).public_data)
    except (OSError, ValueError, asyncssh.KeyImportError):
        return _openssh_public_blob(data)


@lru_cache(maxsize=64)
def _load_key_file(path: str, mtime_ns: int, size: int, mode: int, uid: int) -> KeyFile:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_KEY_FILE)
    except OSError as exc:
        return KeyFile(path, None, None, f"unreadable: {exc.strerror}")
    if _looks_public(data):
        try:
            return KeyFile(path, bytes(asyncssh.import_public_key(data).public_data), None, "a public key", True)
        except (ValueError, asyncssh.KeyImportError) as exc:
            return KeyFile(path, None, None, f"not a key: {exc}")
    if uid == os.getuid() and mode & 0o077:
        return KeyFile(path, _public_of(path, data), None, f"bad permissions {stat.S_IMODE(mode):04o}")
    try:
        key = asyncssh.import_private_key(data)
    except (ValueError, asyncssh.KeyImportError) as exc:
        if "assphrase" in str(exc):
            return KeyFile(path, _public_of(path, data), None, "encrypted")
        return KeyFile(path, None, None, f"not a key: {exc}")
    return KeyFile(path, bytes(key.public_data), key, None)


def read_key_file(path: str) -> KeyFile:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return KeyFile(path, None, None, "not found")
    except OSError as exc:
        return KeyFile(path, None, None, f"unreadable: {exc.strerror}")
    if not stat.S_ISREG(st.st_mode):
        return KeyFile(path, None, None, "not a regular file")
    return _load_key_file(path, st.st_mtime_ns, st.st_size, st.st_mode, st.st_uid)


def _warn_unusable(kf: KeyFile) -> None:
    """OpenSSH's words for a key it will not use, once per file per run."""
    p = kf.path
    if kf.problem is None or kf.problem == "not found":
        return
    if kf.problem.startswith("bad permissions"):
        mode = kf.problem.rsplit(" ", 1)[-1]
        bar = "@" * 59
        say_once(
            "perm:" + p,
            f"{bar}\n@         WARNING: UNPROTECTED PRIVATE KEY FILE!          @\n{bar}\n"
            f"Permissions {mode} for '{p}' are too open.\n"
            "It is required that your private key files are NOT accessible by others.\n"
            f'This private key will be ignored.\nLoad key "{p}": bad permissions',
        )
    elif kf.problem == "encrypted":
        say_once(
            "enc:" + p,
            f"vastprobe: key {p} is encrypted and vastprobe never asks for a passphrase; skipped "
            f"(load it into ssh-agent with `ssh-add {p}` to use it)",
        )
    elif kf.public_only:
        private = p[:-4] if p.endswith(".pub") else "the private key file"
        say_once(
            "pub:" + p,
            f"vastprobe: {p} is a public key (.pub), and ssh-agent does not hold its private half; "
            f"give the private key ({private}) instead",
        )
    else:
        say_once("bad:" + p, f"vastprobe: cannot use key {p}: {kf.problem}; skipped")


async def client_keys(r: Resolved, att: Attempt, verbose: int) -> tuple[list[Any], Any]:
    """Keys to offer, in OpenSSH's order: each identity (through the agent when the agent holds
    it), then, unless IdentitiesOnly, the agent's other keys. Returns (keys, agent client)."""
    agent = None
    agent_keys: list[Any] = []
    if r.identity_agent:
        agent = asyncssh.SSHAgentClient(r.identity_agent)
        try:
            agent_keys = list(await agent.get_keys())
        except (OSError, ValueError, asyncssh.Error) as exc:
            att.agent_note = f"ssh-agent at {r.identity_agent} unusable: {getattr(exc, 'strerror', None) or exc}"
            agent.close()
            agent = None
    by_blob = {bytes(k.key_public_data): k for k in agent_keys}
    keys: list[Any] = []
    used: set[bytes] = set()
    for path in r.identities:
        kf = read_key_file(path)
        if kf.public is not None and kf.public in by_blob:
            if kf.public not in used:
                keys.append(by_blob[kf.public])
                used.add(kf.public)
                att.offered.append(f"{path} (via ssh-agent)")
        elif kf.private is not None:
            keys.append(kf.private)
            att.offered.append(path)
        else:
            if kf.problem != "not found":
                _warn_unusable(kf)
                att.skipped.append(f"{path}: {kf.problem}")
            elif verbose:
                say(f"vastprobe: debug: identity {path} not found")
    if not r.identities_only:
        rest = [k for b, k in by_blob.items() if b not in used]
        keys += rest
        if rest:
            att.offered.append(f"{len(rest)} other ssh-agent key{'s' if len(rest) != 1 else ''}")
    if verbose:
        say(f"vastprobe: debug: {r.display}: offering {', '.join(att.offered) or 'no keys'}")
    return keys, agent
