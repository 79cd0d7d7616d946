"""Containers as targets: the same read-only probe, run by `sh -s` inside a running container
through its runtime's CLI (`podman exec -i NAME sh -s`, the script on stdin), with local.py's
bounded runner (cap, deadline, the CLI's whole session killed past either). This is what the
runtimes share (the run, a failed exec's classification, the listing, `SCHEME://NAME`); each
runtime's module (docker.py, podman.py, kubectl.py) declares only its CLI, argv and messages.

Why the runtime's CLI and not its API: the CLI is what the operator already uses and has
configured (its socket, context, credentials, rootless or not), and it relays stdin and output
as `sh -s` on this machine does. Inside the container the exec'd shell leads a session of its own
(runc starts it with setsid: seen here, podman 4.3 with runc, the shell's SID its own PID), which is
how the snapshot leaves the probe out (by session, as on `local`; a shell that shares a session
whose leader is outside the container reads SID 0 there, and is then left out with its
descendants alone); its parent is outside the container (PPID 0), so nothing above it is left out
(OwnProcesses "none").

When the exec fails before the probe ran (no such container, not running, no sh in the image,
permission refused, the runtime's daemon or CLI missing), the runtime says why in a line of its
own and exits non-zero; that line becomes the host's error with a status like an unreachable
host's (ErrorRule), never a traceback nor "the output is not the probe's framing".
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vastprobe.targets import TargetError, split_scheme, text_problem
from vastprobe.transport.base import KeepsNothing, Render, Take, TransportResult
from vastprobe.transport.local import run_argv, run_argv_async

if TYPE_CHECKING:
    from vastprobe.model import Status

#: A container's name or ID as docker and podman take it (their own rule: [a-zA-Z0-9][a-zA-Z0-9_.-]*).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
#: Only the runtime's own words are classified: output that holds the probe's framing (a section
#: header, `@@<boundary>@@ name`) came from a shell that ran, however it ended.
_FRAMED = re.compile(rb"(?:^|\n)@@[0-9A-Za-z]{8,64}@@ ")
#: How much of a failed exec's output is searched for the runtime's message.
_HEAD = 4096


@dataclass(frozen=True)
class ErrorRule:
    """A runtime's message (searched in its output, case-insensitively) -> status and words."""

    pattern: re.Pattern[str]
    status: Status
    words: str


def rule(pattern: str, status: Status, words: str) -> ErrorRule:
    return ErrorRule(re.compile(pattern, re.I), status, words)


#: Messages every runtime built on runc/crun shares (its OCI runtime's own words).
COMMON_ERRORS = (
    rule(r'exec: "?sh"?: executable file not found|exec: "?sh"?: .*no such file or directory', "probe-error",
         "the container has no sh (its image has no shell): the probe cannot run there"),
    rule(r"permission denied|operation not permitted", "auth-failed", "permission denied"),
)  # fmt: skip


def first_line(text: str, limit: int = 300) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line[:limit]


class ExecTransport(KeepsNothing):
    """A runtime CLI that runs `sh -s` in a container with stdin attached. Subclasses give the
    CLI's name, the argv and the runtime's messages; `target` is checked before one is built."""

    name = "exec"
    cli = ""
    errors: tuple[ErrorRule, ...] = ()

    def __init__(self, target: str, timeout: float = 60.0) -> None:
        self.target = target
        self.timeout = timeout

    def argv(self, exe: str) -> list[str]:
        raise NotImplementedError

    async def run(self, script: Render, cap: int, timeout: float, take: Take | None = None) -> TransportResult:
        exe = shutil.which(self.cli)
        if exe is None:
            return TransportResult(
                "unreachable", f"{self.target}: the {self.cli} command is not installed here (not on PATH)",
                b"", None, False,
            )  # fmt: skip
        res = await run_argv_async(self.argv(exe), script, cap, timeout, take, what=f"{self.target}: the probe")
        return self.classify(res)

    def classify(self, res: TransportResult) -> TransportResult:
        """A failed exec's own message as the host's status and one line; anything else as it came."""
        if res.status != "ok" or res.exit_status in (0, None) or _FRAMED.search(res.output[:65536]):
            return res
        text = res.output[:_HEAD].decode("utf-8", "replace")
        for r in (*self.errors, *COMMON_ERRORS):
            if r.pattern.search(text) is not None:
                said = next((x for x in text.splitlines() if r.pattern.search(x)), None) or first_line(text)
                return TransportResult(
                    r.status, f"{self.target}: {r.words} ({self.cli} said: {said.strip()[:300]})",
                    b"", res.exit_status, False, res.timings,
                )  # fmt: skip
        said = first_line(text)
        if not said:
            return res
        return TransportResult(
            "probe-error", f"{self.target}: `{self.cli} exec` failed with status {res.exit_status}: {said}",
            b"", res.exit_status, False, res.timings,
        )  # fmt: skip


#: A klog line (kubectl's log: `E1204 11:27:49.943967 23249 memcache.go:265] ...`), not its answer.
_KLOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")
#: Seconds a runtime may take to list its containers, and the bytes of its answer read.
LIST_TIMEOUT = 30.0
LIST_CAP = 4 * 1024 * 1024


def listed(argv: list[str], what: str, form: Callable[[str], str | None]) -> list[str]:
    """Run a runtime's listing (`docker ps ...`), bounded; each line through `form` (a target, or
    None for a line that is no valid name: a runtime's output is read as hostile too). TargetError
    with the runtime's own line when it refuses."""
    exe = shutil.which(argv[0])
    if exe is None:
        raise TargetError(f"{what}: the {argv[0]} command is not installed here (not on PATH)")
    res = run_argv([exe, *argv[1:]], "", LIST_CAP, LIST_TIMEOUT, what=what)
    text = res.output.decode("utf-8", "replace")
    if res.status != "ok" or res.exit_status != 0 or res.truncated:
        lines = [x for x in text.splitlines() if x.strip() and not _KLOG.match(x)]  # kubectl's own last word
        said = (lines[-1] if lines else first_line(text)) or res.error or f"exit status {res.exit_status}"
        raise TargetError(f"{what}: {argv[0]} could not list (it said: {said.strip()[:300]})")
    out = [t for t in (form(line.strip()) for line in text.splitlines() if line.strip()) if t is not None]
    return list(dict.fromkeys(out))


def list_running(cli: str, scheme: str, query: str) -> list[str]:
    """`CLI ps` (running containers only), its filters from QUERY (`label=job=x,name=prover`)."""
    argv = [cli, "ps", "--format", "{{.Names}}"]
    for f in filter(None, query.split(",")):
        # checked as kubectl's selector is: a filter is KEY=VALUE, never an option of the CLI's own
        # (`--from docker:--host=tcp://…` would point the CLI at another daemon), no control characters
        key, eq, _value = f.partition("=")
        if f.startswith("-") or not eq or not key.strip() or text_problem(f, "filter"):
            raise TargetError(
                f"--from {scheme}:{query}: not a filter list (want KEY=VALUE[,KEY=VALUE…], e.g. label=job=x)"
            )
        argv += ["--filter", f]
    return listed(argv, f"--from {scheme}:{query}" if query else f"--from {scheme}",
                  lambda name: f"{scheme}://{name}" if NAME.match(name) else None)  # fmt: skip


def container_name(target: str, scheme: str) -> str:
    """The NAME of `SCHEME://NAME`, checked: one clear line (TargetError) when empty or malformed."""
    split = split_scheme(target)
    if split is None or split[0] != scheme:
        raise TargetError(f"not a {scheme} target: {target!r} (want {scheme}://NAME)")
    name = split[1]
    bad = text_problem(name, "container name")
    if bad:
        raise TargetError(f"not a {scheme} target: {target!r} ({bad}; want {scheme}://NAME)")
    if not NAME.match(name):
        raise TargetError(
            f"not a {scheme} target: {target!r} (a container name or ID is letters, digits and _.- "
            f"and starts with a letter or digit; want {scheme}://NAME)"
        )
    return name


class ContainerTransport(ExecTransport):
    """`SCHEME://NAME` for a runtime whose exec is `CLI exec -i NAME sh -s` (docker, podman): the
    kind's name is its scheme; subclasses give the name, the CLI and the runtime's messages."""

    def __init__(self, target: str, timeout: float = 60.0) -> None:
        super().__init__(target, timeout)
        self.container = container_name(target, self.name)

    def argv(self, exe: str) -> list[str]:
        return [exe, "exec", "-i", self.container, "sh", "-s"]
