"""SSH targets over asyncssh: one connection, one exec channel, the script on stdin, the framed
output read back under a cap. Every way a connection can fail ends as a status with a sentence
a person understands, never as a hang or a traceback.

asyncssh's sharp edges handled here (shared/reference/ssh-fanout-facts.md): its timeouts do not
cover channel open, so the whole host is wrapped in one deadline; `run()` buffers everything, so
output is read in chunks up to the cap; `connect_timeout` raises the *builtin* TimeoutError, and OS
errors are not asyncssh.Error; there is no trust-on-first-use, so accept-new is ours; and ProxyJump
hops from ssh_config would not get our keys or known_hosts, so jump hosts are connected here.
"""

from __future__ import annotations

import asyncio
import getpass
import re
import socket
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from vastprobe.transport.base import TransportResult
from vastprobe.transport.liboqs import skip_absent_liboqs_lookup

if TYPE_CHECKING:
    from vastprobe.model import Status

with skip_absent_liboqs_lookup():  # no ldconfig/gcc/ld runs per start when there is no liboqs
    import asyncssh
    from asyncssh.config import SSHClientConfig

HostKeyPolicy = Literal["strict", "accept-new", "off"]
_TARGET = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:@\s\[\]]+))(?::(?P<port>\d{1,5}))?$")


class TargetError(ValueError):
    pass


@dataclass(frozen=True)
class SshTarget:
    user: str | None
    host: str
    port: int | None


def parse_target(text: str) -> SshTarget:
    m = _TARGET.match(text)
    if not m:
        raise TargetError(f"not a target: {text!r} (want [user@]host[:port])")
    port = int(m.group("port")) if m.group("port") else None
    if port is not None and not 0 < port < 65536:
        raise TargetError(f"port out of range in {text!r}")
    return SshTarget(m.group("user"), m.group("v6") or m.group("host"), port)


@dataclass(frozen=True)
class SshOptions:
    port: int | None = None
    user: str | None = None
    identities: tuple[str, ...] = ()
    ssh_config: str | None = None  # None: ~/.ssh/config when it exists
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    host_key_check: HostKeyPolicy = "strict"
    connect_timeout: float = 10.0
    timeout: float = 60.0
    extra: dict[str, Any] = field(default_factory=dict)  # passed to asyncssh.connect (tests)


@dataclass(frozen=True)
class Resolved:
    """A target after ssh_config: what to connect to, as whom, through what."""

    alias: str
    host: str
    port: int
    user: str
    identities: tuple[str, ...]
    proxy_jump: str | None


def _config_paths(opts: SshOptions) -> list[Path]:
    if opts.ssh_config:
        return [Path(opts.ssh_config).expanduser()]
    default = Path("~/.ssh/config").expanduser()
    return [default] if default.exists() else []


def resolve(target: SshTarget, opts: SshOptions) -> Resolved:
    """OpenSSH precedence: the target string, then -l/-p/-i, then ssh_config, then defaults."""
    user = target.user or opts.user
    port = target.port or opts.port
    local_user = getpass.getuser()
    cfg = SSHClientConfig.load(
        None, _config_paths(opts), False, False, False, local_user, user or (), target.host, port or ()
    )  # type: ignore[arg-type]
    host = str(cfg.get("Hostname", target.host) or target.host)
    cfg_user = cfg.get("User")
    cfg_port = cfg.get("Port")
    cfg_ids = cfg.get("IdentityFile") or []
    ids = list(opts.identities) + [str(Path(str(p)).expanduser()) for p in cfg_ids]  # type: ignore[attr-defined]
    jump = cfg.get("ProxyJump")
    jump_text = None
    if jump and str(jump).lower() != "none":
        jump_text = ",".join(jump) if isinstance(jump, (list, tuple)) else str(jump)
    return Resolved(
        alias=target.host,
        host=host,
        port=int(str(port or cfg_port or 22)),
        user=str(user or cfg_user or local_user),
        identities=tuple(dict.fromkeys(ids)),
        proxy_jump=jump_text,
    )


class _Client(asyncssh.SSHClient):
    """Host-key policy for keys not in known_hosts: strict refuses; accept-new records a key for a
    host known_hosts has never seen, and refuses a host whose key changed."""

    def __init__(self, policy: HostKeyPolicy, known_hosts: Path, known_for_host: bool) -> None:
        self.policy = policy
        self.known_hosts = known_hosts
        self.known_for_host = known_for_host
        self.recorded = False

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        if self.policy != "accept-new" or self.known_for_host:
            return False
        name = host if port == 22 else f"[{host}]:{port}"
        line = f"{name} {key.export_public_key('openssh').decode().strip()}\n"
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with open(self.known_hosts, "a", encoding="utf-8") as f:
            f.write(line)
        self.recorded = True
        return True


def _known_for(path: Path, host: str, addr: str, port: int) -> bool:
    if not path.exists():
        return False
    try:
        trusted = asyncssh.read_known_hosts(str(path)).match(host, addr, port)
    except (OSError, ValueError):
        return False
    return bool(trusted[0] or trusted[1])


class ProbeFailure(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _describe(exc: BaseException, where: str, r: Resolved, opts: SshOptions, phase: str) -> ProbeFailure:
    """Map an exception to a status and a sentence: which host, what happened, what to try."""
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        kh = opts.known_hosts or "~/.ssh/known_hosts"
        hint = "check the key and add it to " + kh if opts.host_key_check != "off" else ""
        changed = " (its key changed since it was recorded)" if opts.host_key_check == "accept-new" else ""
        return ProbeFailure(
            "host-key-rejected", f"{where}: host key not trusted{changed}; {hint} or use --host-key-check accept-new"
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        return ProbeFailure(
            "auth-failed",
            f"{where}: permission denied for user {r.user}; check -i/--identity, the agent, and authorized_keys",
        )
    if isinstance(exc, asyncssh.KeyImportError):
        return ProbeFailure(
            "auth-failed",
            f"{where}: cannot use the key: {exc}; vastprobe never asks for passphrases (load it into ssh-agent)",
        )
    if isinstance(exc, TimeoutError):  # builtin: connect_timeout and our own deadline
        if phase == "connect":
            return ProbeFailure(
                "unreachable", f"{where}: no SSH session within --connect-timeout {opts.connect_timeout:g}s"
            )
        return ProbeFailure("timeout", f"{where}: the probe did not finish within --timeout {opts.timeout:g}s")
    if isinstance(exc, socket.gaierror):
        return ProbeFailure("unreachable", f"{where}: cannot resolve host name {r.host!r}: {exc.strerror}")
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
    if isinstance(exc, asyncssh.Error):
        return ProbeFailure("probe-error", f"{where}: {type(exc).__name__}: {exc}")
    return ProbeFailure("probe-error", f"{where}: {type(exc).__name__}: {exc}")


def _file_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path), st.st_mtime_ns, st.st_size)


# A sweep connects to hundreds of hosts with the same key and known_hosts: parse each file once
# (keyed by mtime and size, so accept-new's appends are seen).
@lru_cache(maxsize=32)
def _load_known_hosts(key: tuple[str, int, int]) -> asyncssh.SSHKnownHosts:
    return asyncssh.read_known_hosts(key[0])


@lru_cache(maxsize=32)
def _load_key(key: tuple[str, int, int]) -> asyncssh.SSHKey:
    return asyncssh.read_private_key(key[0])  # an encrypted key raises: we never ask for passphrases


def _known_hosts_path(opts: SshOptions) -> Path:
    return Path(opts.known_hosts).expanduser() if opts.known_hosts else Path("~/.ssh/known_hosts").expanduser()


async def _connect(r: Resolved, opts: SshOptions, tunnel: Any = None) -> asyncssh.SSHClientConnection:
    kh = _known_hosts_path(opts)
    known: Any
    if opts.host_key_check == "off":
        known = None
    elif kh.exists():
        known = _load_known_hosts(_file_key(kh))
    else:
        known = ([], [], [])  # trust nothing; accept-new may still record
    # only accept-new needs to know whether known_hosts has *any* key for this host
    known_for_host = opts.host_key_check == "accept-new" and _known_for(kh, r.host, r.host, r.port)
    client = _Client(opts.host_key_check, kh, known_for_host)
    keys: Any = list(r.identities) if r.identities else ()
    if r.identities:
        missing = [k for k in r.identities if not Path(k).exists()]
        if missing and len(missing) == len(r.identities):
            raise asyncssh.KeyImportError(f"identity file not found: {missing[0]}")
        keys = [_load_key(_file_key(Path(k))) for k in r.identities if Path(k).exists()]
    kwargs: dict[str, Any] = dict(
        port=r.port,
        username=r.user,
        known_hosts=known,
        client_factory=lambda: client,
        config=None,
        connect_timeout=opts.connect_timeout,
        login_timeout=opts.connect_timeout,
        gss_host=None,
        passphrase=None,
        ignore_encrypted=True,
        password=None,
        kbdint_auth=False,
        password_auth=False,
        tunnel=tunnel,
    )
    if keys != ():
        kwargs["client_keys"] = keys
    kwargs.update(opts.extra)
    return await asyncssh.connect(r.host, **kwargs)


class LostMidOutput(Exception):
    def __init__(self, output: bytes, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.output = output


async def _read_capped(proc: asyncssh.SSHClientProcess, cap: int) -> tuple[bytes, bool]:
    buf = bytearray()
    try:
        while len(buf) < cap:
            chunk = await proc.stdout.read(min(65536, cap - len(buf)))
            if not chunk:
                return bytes(buf), False
            buf += chunk if isinstance(chunk, bytes) else chunk.encode()
    except (asyncssh.Error, OSError) as exc:
        if isinstance(exc, TimeoutError):
            raise
        raise LostMidOutput(bytes(buf), exc) from exc
    return bytes(buf), True


async def run_ssh(target_text: str, script: str, cap: int, opts: SshOptions) -> TransportResult:
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    try:
        r = resolve(parse_target(target_text), opts)
    except (TargetError, OSError, ValueError) as exc:
        return TransportResult("probe-error", f"{target_text}: {exc}", b"", None, False, timings)
    if opts.host_key_check == "off":
        print(
            f"vastprobe: WARNING: host key checking is OFF for {target_text}: anyone on the path can impersonate it",
            file=sys.stderr,
        )
    conns: list[asyncssh.SSHClientConnection] = []
    phase = "connect"
    where = f"{target_text} ({r.user}@{r.host}:{r.port})"
    try:
        async with asyncio.timeout(opts.timeout):
            tunnel = None
            for hop in r.proxy_jump.split(",") if r.proxy_jump else []:
                jr = resolve(parse_target(hop.strip()), opts)
                where = f"{target_text} via jump host {hop.strip()}"
                tunnel = await _connect(jr, opts, tunnel)
                conns.append(tunnel)
            where = f"{target_text} ({r.user}@{r.host}:{r.port})"
            conn = await _connect(r, opts, tunnel)
            conns.append(conn)
            timings["connect"] = round(time.monotonic() - t0, 4)
            phase = "probe"
            t1 = time.monotonic()
            proc = await conn.create_process("sh -s", encoding=None, stderr=asyncssh.STDOUT)
            try:
                proc.stdin.write(script.encode())
                proc.stdin.write_eof()
            except (asyncssh.Error, OSError):
                pass  # the remote side closed its stdin early; what it printed still counts
            try:
                output, truncated = await _read_capped(proc, cap)
            except LostMidOutput as lost:
                return TransportResult(
                    "probe-error",
                    f"{where}: the connection was lost before the probe finished ({len(lost.output)} bytes arrived: {lost})",
                    lost.output, None, False, timings,
                )  # fmt: skip
            if truncated:
                proc.close()
                exit_status = None
            else:
                await proc.wait_closed()
                exit_status = proc.exit_status
            timings["probe"] = round(time.monotonic() - t1, 4)
            if exit_status is None and not truncated and proc.exit_signal is None:
                return TransportResult(
                    "probe-error",
                    f"{where}: the connection was lost before the probe finished ({len(output)} bytes arrived)",
                    output, None, False, timings,
                )  # fmt: skip
            return TransportResult("ok", None, output, exit_status, truncated, timings)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
            raise
        f = _describe(exc, where, r, opts, phase)
        return TransportResult(f.status, f.message, b"", None, False, timings)
    finally:
        for c in reversed(conns):
            c.abort()
