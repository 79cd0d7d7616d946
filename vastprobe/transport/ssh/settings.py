"""SSH settings as the command line gives them, importable without asyncssh (the CLI checks them
before it knows whether any target needs SSH).

Precedence follows OpenSSH: the target string, then vastprobe's own flags (-l, -p, -i, -J,
--known-hosts, --host-key-check, --connect-timeout), then `-o Key=Value`, then ssh_config, then
defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

HostKeyPolicy = Literal["strict", "accept-new", "off"]

#: `-o` keys vastprobe honours (the ssh_config keywords it reads), by lower-case name.
CONFIG_KEYS = {
    k.lower(): k
    for k in (
        "User",
        "Port",
        "HostName",
        "IdentityFile",
        "IdentitiesOnly",
        "IdentityAgent",
        "UserKnownHostsFile",
        "StrictHostKeyChecking",
        "HashKnownHosts",
        "ConnectTimeout",
        "ProxyJump",
        "KexAlgorithms",
    )
}
_BOOL_KEYS = {"IdentitiesOnly", "HashKnownHosts"}
_INT_KEYS = {"Port": (1, 65535), "ConnectTimeout": (1, 86400)}
_POLICIES: dict[str, HostKeyPolicy] = {
    "yes": "strict",
    "ask": "strict",  # vastprobe never prompts: ask refuses as yes does
    "strict": "strict",
    "accept-new": "accept-new",
    "no": "off",
    "off": "off",
}


def policy_from_config(value: str) -> HostKeyPolicy | None:
    """StrictHostKeyChecking's words (yes/ask/accept-new/no/off) as a vastprobe policy."""
    return _POLICIES.get(value.strip().lower())


def parse_yes_no(value: str) -> bool | None:
    v = value.strip().lower()
    return True if v in ("yes", "true") else False if v in ("no", "false") else None


def parse_config_option(text: str) -> tuple[str, str]:
    """`Key=Value` or `Key Value`, as `ssh -o` takes it -> (canonical key, value). Raises ValueError
    with a sentence for an unknown key or a bad value."""
    key, sep, value = text.partition("=")
    if not sep:
        key, _, value = text.strip().partition(" ")
    key, value = key.strip(), value.strip()
    if not key or not value:
        raise ValueError(f"{text!r}: want Key=Value")
    canonical = CONFIG_KEYS.get(key.lower())
    if canonical is None:
        known = ", ".join(sorted(CONFIG_KEYS.values()))
        raise ValueError(f"{key!r} is not an option vastprobe honours (it reads: {known})")
    if canonical in _BOOL_KEYS and parse_yes_no(value) is None:
        raise ValueError(f"{canonical} must be yes or no, not {value!r}")
    if canonical in _INT_KEYS:
        lo, hi = _INT_KEYS[canonical]
        if not (value.isascii() and value.isdigit() and len(value) <= 6 and lo <= int(value) <= hi):
            raise ValueError(f"{canonical} must be a whole number from {lo} to {hi}, not {value!r}")
    if canonical == "StrictHostKeyChecking" and policy_from_config(value) is None:
        raise ValueError(f"StrictHostKeyChecking must be yes, accept-new, no (or ask/off), not {value!r}")
    return canonical, value


@dataclass(frozen=True)
class SshOptions:
    port: int | None = None
    user: str | None = None
    identities: tuple[str, ...] = ()  # -i, in order
    ssh_config: str | None = None  # None: ~/.ssh/config when it exists
    known_hosts: str | None = None  # --known-hosts; None: UserKnownHostsFile, else ~/.ssh/known_hosts
    host_key_check: HostKeyPolicy | None = None  # None: StrictHostKeyChecking from ssh_config, else strict
    connect_timeout: float | None = None  # None: ConnectTimeout from ssh_config, else 10 s
    timeout: float = 60.0
    jump: str | None = None  # -J: wins over ProxyJump
    config_options: tuple[tuple[str, str], ...] = ()  # -o Key=Value, canonical keys, in order
    verbose: int = 0  # -v count: handshake detail on stderr
    extra: dict[str, Any] = field(default_factory=dict)  # passed to asyncssh.connect (tests)

    def option(self, key: str) -> str | None:
        """The first `-o` value for `key` (OpenSSH: the first value obtained wins)."""
        for k, v in self.config_options:
            if k == key:
                return v
        return None

    def options_all(self, key: str) -> list[str]:
        return [v for k, v in self.config_options if k == key]


DEFAULT_CONNECT_TIMEOUT = 10.0
