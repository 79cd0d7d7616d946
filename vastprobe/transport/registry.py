"""From a target string to the transport that reaches it: one table, as ClusterShell's workers
(Exec, Ssh) are picked by what is asked. Each kind is one entry: its name (the `transport` of a
capture and a snapshot), how a target names it (the word `local`, a scheme `docker://`, or
anything else: ssh), the module that implements it (imported only when a target of that kind is
checked or run, so `local` never loads asyncssh), and the few facts the analysis needs about it
without running anything (a saved capture is analysed long after its transport ran).

A kind's module provides `check_target(target) -> None` (raises TargetError with one line) and
`open_transport(target, settings) -> Transport`. Adding a transport is its module, its tests, and
one entry in KINDS.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vastprobe.transport.base import OwnProcesses, Transport, TransportSettings

# targets.py and transport/base.py are imported where they are used: the CLI reads KINDS for its
# help text (target_forms) at every start, and `vastprobe --help` stays light.


@dataclass(frozen=True)
class Kind:
    name: str
    module: str  # where check_target and open_transport live
    form: str  # the target's form, for messages: "docker://NAME"
    word: str | None = None  # the whole target is this word (`local`)
    scheme: str | None = None  # the target starts with SCHEME:// (`docker://NAME`)
    own_processes: OwnProcesses = "none"  # what above the probe's shell is the transport's (base.py)
    this_machine: bool = False  # the probe runs on the machine vastprobe runs on
    needs_ssh: bool = False  # SSH settings (ssh_config, keys, known_hosts) apply to its targets
    addressed: bool = False  # reached at host:port, as another host's ssh session names it (hops.py)

    def check(self, target: str) -> None:
        """Raises TargetError (one line) when `target` is not a well-formed target of this kind."""
        importlib.import_module(self.module).check_target(target)

    def open(self, target: str, settings: TransportSettings) -> Transport:
        return importlib.import_module(self.module).open_transport(target, settings)  # type: ignore[no-any-return]

    def list(self, query: str, settings: TransportSettings) -> list[str]:
        """The targets of this kind that are running now, as its runtime lists them (`sweep --from`);
        TargetError (one line) when the kind lists nothing or its runtime refuses. A kind lists when
        its module has `list_targets(query, settings)`."""
        from vastprobe.targets import TargetError

        lister = getattr(importlib.import_module(self.module), "list_targets", None)
        if lister is None:
            raise TargetError(f"--from {self.name}: {self.name} targets cannot be listed (only {listing()})")
        return lister(query, settings)  # type: ignore[no-any-return]


LOCAL = Kind("local", "vastprobe.transport.local", "local", word="local", own_processes="caller", this_machine=True)
SSH = Kind(
    "ssh", "vastprobe.transport.ssh.transport", "[user@]host[:port]", scheme="ssh", own_processes="sshd",
    needs_ssh=True, addressed=True,
)  # fmt: skip

#: Every kind, in the order messages list them. A target that names no word or scheme is ssh's.
KINDS: tuple[Kind, ...] = (
    LOCAL,
    SSH,
    Kind("docker", "vastprobe.transport.docker", "docker://NAME", scheme="docker"),
    Kind("podman", "vastprobe.transport.podman", "podman://NAME", scheme="podman"),
    Kind("kubectl", "vastprobe.transport.kubectl", "kubectl://[NAMESPACE/]POD[/CONTAINER]", scheme="kubectl"),
)


def kind_for(target: str) -> Kind:
    """The kind that reaches `target` (its form is not checked: check_target). Raises TargetError
    for a scheme no kind has."""
    from vastprobe.targets import TargetError, split_scheme

    for kind in KINDS:
        if kind.word is not None and target == kind.word:
            return kind
    scheme = split_scheme(target)
    if scheme is None:
        head, colon, rest = target.partition(":")
        if colon and rest and not rest.startswith("/") and any(k.scheme == head.lower() for k in KINDS if k is not SSH):
            raise TargetError(f"not a target: {target!r} (did you mean {head}://{rest}?)")
        return SSH
    for kind in KINDS:
        if kind.scheme == scheme[0]:
            return kind
    known = ", ".join(f"{k.scheme}://" for k in KINDS if k.scheme)
    raise TargetError(f"not a target: {target!r} (unknown scheme {scheme[0]}://; known: {known})")


def check_target(target: str) -> Kind:
    """The kind of a well-formed `target`; raises TargetError with one line (its kind's form) otherwise."""
    kind = kind_for(target)
    kind.check(target)
    return kind


def kind_named(name: str) -> Kind | None:
    """The kind a capture's `transport` names (None: a name this version does not know)."""
    return next((k for k in KINDS if k.name == name), None)


def kind_or_none(target: str) -> Kind | None:
    """kind_for, with None for a scheme no kind has (where a bad target is reported elsewhere)."""
    from vastprobe.targets import TargetError

    try:
        return kind_for(target)
    except TargetError:
        return None


def needs_ssh(target: str) -> bool:
    """Whether `target` is reached over SSH (its settings are checked and loaded before any run)."""
    kind = kind_or_none(target)
    return kind is not None and kind.needs_ssh


def transport_for(target: str, settings: TransportSettings | None = None) -> Transport:
    """The transport that runs the probe on `target`. Raises TargetError for a malformed target."""
    from vastprobe.transport.base import TransportSettings

    return check_target(target).open(target, settings or TransportSettings())


def listing() -> str:
    """The kinds `sweep --from` takes, for messages."""
    return ", ".join(k.name for k in KINDS if k.scheme and k not in (SSH,))


def list_targets(spec: str, settings: TransportSettings) -> list[str]:
    """`KIND[:QUERY]` (sweep --from) -> the running targets that kind's runtime lists."""
    from vastprobe.targets import TargetError

    name, _, query = spec.partition(":")
    kind = kind_named(name.lower())
    if kind is None or kind.scheme is None or kind is SSH:
        raise TargetError(f"--from {spec}: not a kind that lists targets (one of: {listing()})")
    return kind.list(query, settings)


def words() -> list[str]:
    """The targets that are a whole word (`local`), as completion offers them."""
    return [k.word for k in KINDS if k.word is not None]


def target_forms() -> str:
    """Every kind's form, for a TARGET argument's help (rich markup: `[` escaped)."""
    forms = [f"`{k.word}`" if k.word else k.form + (f", {k.scheme}://{k.form}" if k is SSH else "") for k in KINDS]
    return ", ".join(forms).replace("[", "\\[")
