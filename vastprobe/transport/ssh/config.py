"""ssh_config resolution: a target, the command line, `-o` and ssh_config become one Resolved (what
to connect to, as whom, through which jump hosts, with which keys and host-key policy), with
OpenSSH's precedence (ssh(1)/ssh_config(5), which users expect): StrictHostKeyChecking,
UserKnownHostsFile, HashKnownHosts, IdentitiesOnly, IdentityAgent and ConnectTimeout come from
ssh_config or `-o`, and the command line wins. asyncssh's reader is extended with the keywords it
skips that vastprobe honours (StrictHostKeyChecking, HashKnownHosts) and with which `Host` lines
named the host, so that "cannot resolve" can say a name is no alias in the file. ProxyJump hops
get the target's keys, known_hosts and policy (hop_options) and are connected by run.py, since
asyncssh's own hops would not get them [asyncssh #698].
"""

from __future__ import annotations

import functools
import getpass
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from vastprobe.targets import SshTarget
from vastprobe.transport.ssh.asyncssh_lib import SSHClientConfig, SSHConfig
from vastprobe.transport.ssh.settings import (
    DEFAULT_CONNECT_TIMEOUT,
    HostKeyPolicy,
    SshOptions,
    parse_yes_no,
    policy_from_config,
)

#: ~/.ssh/id_* that OpenSSH tries when no IdentityFile is configured, in its order.
DEFAULT_IDENTITIES = ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_xmss", "id_dsa")
_MISSING = object()


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
    #: KexAlgorithms from -o or ssh_config, in OpenSSH's syntax (a list, or +, -, ^ against the
    #: defaults); None: vastprobe's own order (run.kex_algs)
    kex_algorithms: str | None = None

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


@functools.lru_cache(maxsize=256)
def _home_path(path: str, home: str | None) -> Path:
    """`path` with ~ expanded (pathlib's normalising too), for this HOME: asked for every path of
    every target (the seven default identities, known_hosts, ssh_config), ~70 us a host in sweeps."""
    return Path(path).expanduser()


def _user_path(path: str) -> Path:
    return _home_path(path, os.environ.get("HOME"))


def _config_paths(opts: SshOptions) -> list[Path]:
    if opts.ssh_config:
        return [_user_path(opts.ssh_config)]
    default = _user_path("~/.ssh/config")
    return [default] if default.exists() else []


def load_config(opts: SshOptions, host: str, user: str | None = None, port: int | None = None) -> _ClientConfig:
    """ssh_config for one host; raises ValueError (asyncssh's ConfigParseError) or OSError."""
    cfg = _ClientConfig.load(
        None, _config_paths(opts), False, False, False, _local_user(), user or (), host, port or ()
    )  # type: ignore[arg-type]
    return cast(_ClientConfig, cfg)


def _expand(path: str) -> str:
    if path.startswith("$"):
        return str(Path(os.path.expandvars(path)).expanduser())
    return str(_user_path(path))


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
    identities = [_expand(p) for p in ids] or [str(_user_path("~/.ssh/" + n)) for n in DEFAULT_IDENTITIES]
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
        kex_algorithms=opts.option("KexAlgorithms") or _text_or_none(cfg.get("KexAlgorithms")),
    )


def _text_or_none(value: object) -> str | None:
    return str(value) if value else None


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


def hop_options(opts: SshOptions) -> SshOptions:
    """A jump host gets the keys, known_hosts and policy, not the target's -l/-p/-J (as OpenSSH)."""
    keep = tuple((k, v) for k, v in opts.config_options if k not in ("User", "Port", "HostName", "ProxyJump"))
    return replace(opts, port=None, user=None, jump=None, config_options=keep)
