"""SSH targets over asyncssh: one connection, one exec channel, the script on stdin, the framed
output read back under a cap. Every way a connection can fail ends as a status with a sentence
a person understands, never as a hang or a traceback.

asyncssh's sharp edges handled here (its issue numbers in brackets): its timeouts do not cover
channel open [#626], so the whole host is wrapped in one deadline; `run()` buffers everything
[#754], so output is read in chunks up to the cap; `connect_timeout` raises the *builtin*
TimeoutError, and OS errors are not asyncssh.Error [#558]; there is no trust-on-first-use, so
accept-new is ours; and ProxyJump hops from ssh_config would not get our keys or known_hosts
[#698], so jump hosts are connected here.

OpenSSH habits kept (its ssh(1)/ssh_config(5) behaviour, which users expect): keys are read here,
not by asyncssh, so that an encrypted key is skipped with a note while ssh-agent signs for it, a
private key readable by others gets OpenSSH's warning and is ignored, and a `.pub` given as an
identity selects the agent's key; StrictHostKeyChecking, UserKnownHostsFile, HashKnownHosts,
IdentitiesOnly, IdentityAgent and ConnectTimeout come from ssh_config or `-o` (the command line
wins); a changed host key is its own message with both fingerprints and is never cured by
accept-new.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import getpass
import hashlib
import hmac
import os
import secrets
import socket
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from vastprobe.fileio import append_line
from vastprobe.notices import say, say_once
from vastprobe.targets import SshTarget, TargetError, parse_target
from vastprobe.transport.asyncssh_parts import import_asyncssh
from vastprobe.transport.base import TransportResult
from vastprobe.transport.liboqs import skip_absent_liboqs_lookup
from vastprobe.transport.sshopts import (
    DEFAULT_CONNECT_TIMEOUT,
    HostKeyPolicy,
    SshOptions,
    parse_yes_no,
    policy_from_config,
)

if TYPE_CHECKING:
    from vastprobe.model import Status

with skip_absent_liboqs_lookup():  # no ldconfig/gcc/ld runs per start when there is no liboqs
    import_asyncssh()  # without the parts no OpenSSH server uses (asyncssh_parts.py)
    import asyncssh
    from asyncssh.config import SSHClientConfig, SSHConfig

__all__ = ["HostKeyPolicy", "SshOptions", "SshTarget", "TargetError", "parse_target", "resolve", "run_ssh"]

#: ~/.ssh/id_* that OpenSSH tries when no IdentityFile is configured, in its order.
DEFAULT_IDENTITIES = ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_xmss", "id_dsa")
MAX_KEY_FILE = 1 << 20
MAX_KNOWN_HOSTS = 64 << 20
_MISSING = object()
_KEY_NAMES = {"ssh-ed25519": "ED25519", "ssh-rsa": "RSA", "ssh-dss": "DSA", "sk-ssh-ed25519@openssh.com": "ED25519-SK"}


class _ClientConfig(SSHClientConfig):
    """asyncssh's ssh_config reader, plus the keywords it skips that vastprobe honours, and which
    `Host` lines named the host (for "cannot resolve": a name that is no alias in the file)."""

    def _match_host_noted(self, option: str, args: list[str]) -> None:
        patterns = [p for arg in args for p in arg.split(",")]
        SSHClientConfig._match_host(self, option, args)  # type: ignore[attr-defined]
        aliases = self.__dict__.setdefault("host_aliases", [])
        aliases += [p for p in patterns if p and not any(c in p for c in "*?!")]
        if self._matching and any(p.lstrip("!") != "*" for p in patterns):  # type: ignore[attr-defined]
            self.__dict__["host_named"] = True  # a Host line other than the catch-all matched

    _handlers = {  # noqa: RUF012  (asyncssh's own class attribute, extended)
        **SSHClientConfig._handlers,
        "host": ("Host", _match_host_noted),
        "stricthostkeychecking": ("StrictHostKeyChecking", SSHConfig._set_string),
        "hashknownhosts": ("HashKnownHosts", SSHConfig._set_bool),
    }
    _percent_expand = {*SSHClientConfig._percent_expand, "UserKnownHostsFile"}  # noqa: RUF012


@dataclass(frozen=True)
class Resolved:
    """A target after the command line, `-o` and ssh_config: what to connect to, as whom, through
    what, trusting which keys."""

    alias: str
    host: str
    port: int
    user: str
    identities: tuple[str, ...]
    proxy_jump: str | None
    identities_only: bool = False
    identity_agent: str | None = None
    host_key_check: HostKeyPolicy = "strict"
    policy_source: str = "default"
    known_hosts: tuple[str, ...] = ()
    hash_known_hosts: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    #: said beside "cannot resolve" when the name went to the resolver as typed and no Host line of
    #: the ssh_config read names it (a typo, or the wrong -F): "not a Host alias in FILE"
    alias_note: str | None = None

    @property
    def display(self) -> str:
        return SshTarget(self.user, self.host, self.port).display()


@functools.cache
def _local_user() -> str:
    """Asked once per target (ssh_config's %u and Match user); a passwd lookup each time showed in sweeps."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _config_paths(opts: SshOptions) -> list[Path]:
    if opts.ssh_config:
        return [Path(opts.ssh_config).expanduser()]
    default = Path("~/.ssh/config").expanduser()
    return [default] if default.exists() else []


def load_config(opts: SshOptions, host: str, user: str | None = None, port: int | None = None) -> _ClientConfig:
    """ssh_config for one host; raises ValueError (asyncssh's ConfigParseError) or OSError."""
    cfg = _ClientConfig.load(
        None, _config_paths(opts), False, False, False, _local_user(), user or (), host, port or ()
    )  # type: ignore[arg-type]
    return cast(_ClientConfig, cfg)


def _expand(path: str) -> str:
    return str(Path(os.path.expandvars(path) if path.startswith("$") else path).expanduser())


def _agent_path(value: object) -> str | None:
    """IdentityAgent: a socket path, `SSH_AUTH_SOCK`, `$VAR`, or `none`; unset means $SSH_AUTH_SOCK."""
    if value is _MISSING or value == "SSH_AUTH_SOCK":
        return os.environ.get("SSH_AUTH_SOCK") or None
    if value is None or str(value).lower() == "none":
        return None
    text = str(value)
    if text.startswith("$"):
        return os.environ.get(text[1:]) or None
    return _expand(text)


def resolve(target: SshTarget, opts: SshOptions) -> Resolved:
    """OpenSSH precedence: vastprobe's flags, then -o, then the target string, then ssh_config,
    then defaults (`ssh -p 2603 ssh://h:2605` connects to 2603; `ssh -l bob alice@h` logs in as bob;
    the CLI warns when they differ). Raises ValueError for a setting that cannot be used."""
    o_port = opts.option("Port")
    user = opts.user or opts.option("User") or target.user
    port = opts.port or (int(o_port) if o_port else None) or target.port
    cfg = load_config(opts, target.host, user, port)
    host = opts.option("HostName") or str(cfg.get("Hostname", target.host) or target.host)

    cfg_ids = cfg.get("IdentityFile") or []
    ids = [*opts.identities, *opts.options_all("IdentityFile"), *(str(p) for p in cfg_ids)]  # type: ignore[attr-defined]
    identities = [_expand(p) for p in ids] or [str(Path("~/.ssh", n).expanduser()) for n in DEFAULT_IDENTITIES]
    o_only = opts.option("IdentitiesOnly")
    identities_only = bool(parse_yes_no(o_only)) if o_only else bool(cfg.get("IdentitiesOnly") or False)
    o_agent = opts.option("IdentityAgent")
    agent = _agent_path(o_agent if o_agent is not None else cfg.get("IdentityAgent", _MISSING))

    jump = opts.jump or opts.option("ProxyJump") or cfg.get("ProxyJump")
    jump_text = None
    if jump and str(jump).lower() != "none":
        jump_text = ",".join(jump) if isinstance(jump, (list, tuple)) else str(jump)

    policy: HostKeyPolicy | None
    o_strict = opts.option("StrictHostKeyChecking")
    cfg_strict = cfg.get("StrictHostKeyChecking")
    if opts.host_key_check:
        policy, source = opts.host_key_check, "--host-key-check"
    elif o_strict:
        policy, source = policy_from_config(o_strict), "-o StrictHostKeyChecking"
    elif cfg_strict:
        policy, source = policy_from_config(str(cfg_strict)), "StrictHostKeyChecking in ssh_config"
        if policy is None:
            raise ValueError(f"ssh_config: StrictHostKeyChecking {cfg_strict!r} is not yes, accept-new or no")
    else:
        policy, source = "strict", "default"
    assert policy is not None

    o_known = opts.option("UserKnownHostsFile")
    cfg_known = cfg.get("UserKnownHostsFile")
    if opts.known_hosts:
        known: list[str] = [opts.known_hosts]
    elif o_known:
        known = [] if o_known.lower() == "none" else o_known.split()
    elif cfg_known is not None:
        known = [str(p) for p in cfg_known]  # type: ignore[attr-defined]
    else:
        known = ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]
    o_hash = opts.option("HashKnownHosts")
    hash_hosts = bool(parse_yes_no(o_hash)) if o_hash else bool(cfg.get("HashKnownHosts") or False)

    o_ct = opts.option("ConnectTimeout")
    cfg_ct = cfg.get("ConnectTimeout")
    connect_timeout = (
        opts.connect_timeout
        if opts.connect_timeout is not None
        else float(o_ct)
        if o_ct
        else float(cfg_ct)  # type: ignore[arg-type]
        if isinstance(cfg_ct, int) and cfg_ct > 0
        else DEFAULT_CONNECT_TIMEOUT
    )
    return Resolved(
        alias=target.host,
        alias_note=_alias_note(target.host, host, cfg, opts),
        host=host,
        port=int(str(port or cfg.get("Port") or 22)),
        user=str(user or cfg.get("User") or _local_user()),
        identities=tuple(dict.fromkeys(identities)),
        proxy_jump=jump_text,
        identities_only=identities_only,
        identity_agent=agent,
        host_key_check=policy,
        policy_source=source,
        known_hosts=tuple(dict.fromkeys(_expand(k) for k in known)),
        hash_known_hosts=hash_hosts,
        connect_timeout=min(connect_timeout, opts.timeout),
    )


def _alias_note(name: str, host: str, cfg: _ClientConfig, opts: SshOptions) -> str | None:
    """`not a Host alias in FILE` (and the nearest aliases it has) when `name` reached the resolver
    as typed and only catch-all lines of the ssh_config matched it."""
    paths = _config_paths(opts)
    if host != name or cfg.__dict__.get("host_named") or not paths:
        return None
    import difflib

    near = difflib.get_close_matches(name, dict.fromkeys(cfg.__dict__.get("host_aliases", [])), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]}?" if near else ""
    return f"not a Host alias in {', '.join(map(str, paths))}{hint}"


def _hop_options(opts: SshOptions) -> SshOptions:
    """A jump host gets the keys, known_hosts and policy, not the target's -l/-p/-J (as OpenSSH)."""
    keep = tuple((k, v) for k, v in opts.config_options if k not in ("User", "Port", "HostName", "ProxyJump"))
    return replace(opts, port=None, user=None, jump=None, config_options=keep)


# ---- keys -------------------------------------------------------------------------------------


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


@dataclass
class _Attempt:
    """What one connection offered and saw, for the sentence when it fails."""

    offered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    agent_note: str | None = None
    changed: str | None = None  # the host-key-changed sentence
    unknown: str | None = None  # the host-key-unknown sentence


def _fp(key: Any) -> str:
    return f"{_KEY_NAMES.get(key.get_algorithm(), key.get_algorithm().upper())} {key.get_fingerprint()}"


async def _client_keys(r: Resolved, att: _Attempt, verbose: int) -> tuple[list[Any], Any]:
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


# ---- host keys --------------------------------------------------------------------------------


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


def recorded_keys(files: tuple[str, ...], host: str, addr: str, port: int) -> list[tuple[str, int, Any]]:
    """(file, line number, key) of every known_hosts entry for this host: what a changed key is
    compared with, and the line to remove."""
    out = []
    p = None if port == 22 else port
    for path in files:
        if _regular(path) is None:
            continue
        try:
            text = _read_text(path)
        except OSError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            s = line.strip()
            if not s or s.startswith(("#", "@")):
                continue
            pattern = s.split(None, 1)[0]
            if not (pattern.startswith("|") or host in pattern or addr in pattern or any(c in pattern for c in "*?!")):
                continue
            try:
                keys = asyncssh.import_known_hosts(s).match(host, addr, p)[0]
            except ValueError:
                continue
            out += [(path, n, k) for k in keys]
    return out


class _Client(asyncssh.SSHClient):
    """Host-key policy for keys known_hosts does not trust: a host with a recorded key is a changed
    key under every policy; an unknown host is refused by strict and recorded by accept-new."""

    def __init__(self, r: Resolved, att: _Attempt) -> None:
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


class ProbeFailure(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _describe(exc: BaseException, where: str, r: Resolved, opts: SshOptions, phase: str, att: _Attempt) -> ProbeFailure:
    """Map an exception to a status and a sentence: which host, what happened, what to try."""
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        if att.changed:
            return ProbeFailure("host-key-rejected", f"{where}: {att.changed}")
        unknown = att.unknown or f"host key not trusted ({exc.reason})"
        return ProbeFailure(
            "host-key-rejected",
            f"{where}: {unknown}; check the key and add it to known_hosts, or use --host-key-check accept-new "
            f"to record keys of hosts never seen before",
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        tried = "; ".join(
            x
            for x in (
                f"offered {', '.join(att.offered)}" if att.offered else "no key to offer",
                f"skipped {', '.join(att.skipped)}" if att.skipped else "",
                att.agent_note or "",
            )
            if x
        )
        return ProbeFailure(
            "auth-failed",
            f"{where}: permission denied for user {r.user} ({tried}); check -i/--identity, the agent, and authorized_keys",
        )
    if isinstance(exc, asyncssh.KeyImportError):
        return ProbeFailure("auth-failed", f"{where}: cannot use the key: {exc}")
    if isinstance(exc, TimeoutError):  # builtin: connect_timeout and our own deadline
        if phase == "connect":
            return ProbeFailure(
                "unreachable", f"{where}: no SSH session within --connect-timeout {r.connect_timeout:g}s"
            )
        return ProbeFailure("timeout", f"{where}: the probe did not finish within --timeout {opts.timeout:g}s")
    if isinstance(exc, socket.gaierror):
        note = f" ({r.alias_note})" if r.alias_note else ""
        return ProbeFailure("unreachable", f"{where}: cannot resolve host name {r.host!r}: {exc.strerror}{note}")
    if isinstance(exc, ConnectionRefusedError):
        return ProbeFailure("unreachable", f"{where}: connection refused on port {r.port}; is sshd running there?")
    if isinstance(exc, OSError):
        status_os: Status = "unreachable" if phase == "connect" else "probe-error"
        return ProbeFailure(status_os, f"{where}: {exc.strerror or exc}")
    if isinstance(exc, asyncssh.DisconnectError):
        status: Status = "unreachable" if phase == "connect" else "probe-error"
        return ProbeFailure(status, f"{where}: the server closed the connection ({exc.reason or type(exc).__name__})")
    if isinstance(exc, asyncssh.ChannelOpenError):
        return ProbeFailure("probe-error", f"{where}: the server refused a session channel: {exc.reason}")
    return ProbeFailure("probe-error", f"{where}: {type(exc).__name__}: {exc}")


async def _connect(r: Resolved, opts: SshOptions, tunnel: Any, att: _Attempt, agents: list[Any]) -> Any:
    client = _Client(r, att)
    known = known_hosts_for(r)
    keys, agent = await _client_keys(r, att, opts.verbose)
    if agent is not None:
        agents.append(agent)
    if opts.verbose:
        say(f"vastprobe: debug: connecting to {r.display} (host keys: {r.host_key_check}, {r.policy_source})")
    kwargs: dict[str, Any] = dict(
        port=r.port,
        username=r.user,
        known_hosts=known,
        client_factory=lambda: client,
        config=None,
        connect_timeout=r.connect_timeout,
        login_timeout=r.connect_timeout,
        gss_host=None,
        passphrase=None,
        password=None,
        kbdint_auth=False,
        password_auth=False,
        tunnel=tunnel,
        client_keys=keys or None,
        agent_path=None,  # the agent's keys were fetched above, in OpenSSH's order
        encryption_algs=CIPHERS,
    )
    kwargs.update(opts.extra)
    return await asyncssh.connect(r.host, **kwargs)


#: asyncssh's own list with AES-GCM first: one AEAD call per packet, where its ChaCha20-Poly1305
#: builds three cipher contexts per packet (17 us against 5 us for a 2.5 KB packet here, ~1 ms a host). Both are
#: OpenSSH's defaults; a server that offers neither still gets CTR.
CIPHERS = (
    "aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
    "aes256-ctr", "aes192-ctr", "aes128-ctr",
)  # fmt: skip


class LostMidOutput(Exception):
    pass


async def _read_capped(
    proc: asyncssh.SSHClientProcess, cap: int, buf: bytearray, take: Callable[[int], bool] | None = None
) -> bool:
    """The output into `buf` (the caller's: what arrived stays there when the deadline cuts the
    read), up to `cap` bytes; whether reading stopped early: at the cap, or when `take` (a sweep's
    budget for bytes in flight across all hosts) refused the next chunk."""
    try:
        while len(buf) < cap:
            chunk = await proc.stdout.read(min(65536, cap - len(buf)))
            if not chunk:
                return False
            if take is not None and not take(len(chunk)):
                return True
            buf += chunk if isinstance(chunk, bytes) else chunk.encode()
    except (asyncssh.Error, OSError) as exc:
        if isinstance(exc, TimeoutError):
            raise
        raise LostMidOutput(str(exc)) from exc
    return True


def _warn_if_off(r: Resolved, target_text: str) -> None:
    if r.host_key_check != "off":
        return
    if r.policy_source == "--host-key-check":
        text = "host key checking is OFF (--host-key-check off) for every target of this run"
    else:
        text = f"host key checking is OFF ({r.policy_source}), first for {target_text}"
    say_once("host-key-off", f"vastprobe: WARNING: {text}: anyone on the network path can impersonate them")


async def run_ssh(
    target_text: str,
    script: str | Callable[[float], str],
    cap: int,
    opts: SshOptions,
    take: Callable[[int], bool] | None = None,
    kept: list[Any] | None = None,
) -> TransportResult:
    """`script` may be a function of the seconds left once connected (the probe's own deadline
    must come before this side gives up). What arrived before a timeout or a lost connection is
    kept in the result, with the status that says how the run ended. `kept`: a session's
    connections (sshtransport.SshTransport.session): used when alive, filled by a run that
    connects, emptied by one that fails."""
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    buf = bytearray()
    try:
        r = resolve(parse_target(target_text), opts)
    except (TargetError, OSError, ValueError) as exc:
        return TransportResult("probe-error", f"{target_text}: {exc}", b"", None, False, timings)
    _warn_if_off(r, target_text)
    conns: list[Any] = []
    agents: list[Any] = []
    att = _Attempt()
    phase = "connect"
    # the resolved user@host:port only where ssh_config or the defaults changed what was typed
    where = here = target_text if r.display == target_text else f"{target_text} ({r.display})"
    hop_r = r
    reuse = kept is not None and bool(kept) and not kept[-1].is_closed()
    finished = False
    try:
        async with asyncio.timeout(opts.timeout):
            if reuse:
                assert kept is not None
                conn = kept[-1]
            tunnel = None
            for hop in r.proxy_jump.split(",") if r.proxy_jump and not reuse else []:
                hop_r = resolve(parse_target(hop.strip()), _hop_options(opts))
                where = f"{target_text} via jump host {hop.strip()} ({hop_r.display})"
                _warn_if_off(hop_r, hop.strip())
                tunnel = await _connect(hop_r, opts, tunnel, att, agents)
                conns.append(tunnel)
                att = _Attempt()
            hop_r = r
            where = here
            if not reuse:
                conn = await _connect(r, opts, tunnel, att, agents)
                conns.append(conn)
            for a in agents:
                a.close()
            agents.clear()
            timings["connect"] = round(time.monotonic() - t0, 4)
            phase = "probe"
            t1 = time.monotonic()
            text = script(opts.timeout - (t1 - t0)) if callable(script) else script
            proc = await conn.create_process("sh -s", encoding=None, stderr=asyncssh.STDOUT)
            try:
                proc.stdin.write(text.encode("utf-8", "surrogateescape"))  # a --log path's own bytes, not UTF-8 ones
                proc.stdin.write_eof()
            except (asyncssh.Error, OSError):
                pass  # the remote side closed its stdin early; what it printed still counts
            try:
                truncated = await _read_capped(proc, cap, buf, take)
            except LostMidOutput as lost:
                timings["probe"] = round(time.monotonic() - t1, 4)
                return TransportResult(
                    "probe-error",
                    f"{where}: the connection was lost before the probe finished ({len(buf)} bytes arrived: {lost})",
                    bytes(buf), None, False, timings,
                )  # fmt: skip
            output = bytes(buf)
            if truncated:
                proc.close()
                exit_status = None
            else:
                await proc.wait_closed()
                exit_status = proc.exit_status
            timings["probe"] = round(time.monotonic() - t1, 4)
            signal_name = proc.exit_signal[0] if not truncated and proc.exit_signal else None
            if exit_status is None and not truncated and signal_name is None:
                return TransportResult(
                    "probe-error",
                    f"{where}: the connection was lost before the probe finished ({len(output)} bytes arrived)",
                    output, None, False, timings,
                )  # fmt: skip
            if exit_status is not None and exit_status < 0:  # asyncssh's -1: ended by a signal
                exit_status = None
            finished = True
            return TransportResult("ok", None, output, exit_status, truncated, timings, signal_name)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
            raise
        if isinstance(exc, (TargetError, ValueError)) and phase == "connect" and not isinstance(exc, asyncssh.Error):
            return TransportResult("probe-error", f"{where}: {exc}", b"", None, False, timings)
        f = _describe(exc, where, hop_r, opts, phase, att)
        if phase == "probe" and buf:  # what arrived before the deadline is analysed, and the report says so
            timings["probe"] = round(time.monotonic() - t0 - timings.get("connect", 0.0), 4)
            return TransportResult(f.status, f.message, bytes(buf), None, False, timings)
        return TransportResult(f.status, f.message, b"", None, False, timings)
    finally:
        for a in agents:
            a.close()
        drop = [] if kept is not None and finished else list(conns)
        if kept is not None and not finished:  # a session's connection failed: its next run connects afresh
            drop, kept[:] = [*kept, *drop], []
        elif kept is not None and not reuse:  # this run's connection is the session's now
            drop, kept[:] = list(kept), conns
        for c in reversed(drop):
            c.abort()
