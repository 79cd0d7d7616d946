"""What the commands build from their options (commands/options.py): the output format, the
probe's and the rules' settings, the SSH options (ssh_config read and checked before the first
connection), each cross-option check a usage error before anything is contacted.

Nothing here imports asyncssh or rich at import time: option errors stay light.
"""

from __future__ import annotations

import math
import sys
from typing import Optional

from vastprobe.commands.common import usage_error
from vastprobe.commands.options import ProbeFlags, ReportFlags, RuleFlags, SshFlags
from vastprobe.notices import say
from vastprobe.render.formats import FORMATS, Format, OutputFormat


def output_format(fmt: Optional[OutputFormat], json_flag: bool, snapshot: bool = False) -> Format:
    """--json, else --format, else json for --snapshot (only JSON carries it), else table on a terminal, json
    otherwise. --json beside another --format is a usage error (it printed JSON silently; found by a helper)."""
    if json_flag and fmt is not None and fmt.value != "json":
        usage_error(f"--json and --format {fmt.value} ask for two formats: give one of them")
    if json_flag:
        return FORMATS["json"]
    if fmt is not None:
        return FORMATS[fmt.value]
    if snapshot:  # only JSON carries it
        return FORMATS["json"]
    return FORMATS["table" if sys.stdout.isatty() else "json"]


def report_format(report: ReportFlags) -> Format:
    """The report's format, --brief and --snapshot checked against it and each other (usage errors)."""
    if report.brief and report.snapshot:
        usage_error("--brief leaves the snapshot out and --snapshot puts it in: give one of them")
    chosen = output_format(report.fmt, report.json_flag, report.snapshot)
    if report.snapshot and not chosen.shows_snapshot:
        usage_error("--snapshot is for --format json or ndjson: the table never shows the snapshot")
    return chosen


def per_kind(context: Optional[str]) -> dict[str, dict[str, str]]:
    """The transports' own options from the command line (base.TransportSettings.per_kind)."""
    return {"kubectl": {"context": context}} if context else {}


def probe_options(
    probe: ProbeFlags,
    rules: RuleFlags | None = None,
    *,
    timeout: float = 60.0,
    targets: tuple[str, ...] = (),
):  # -> DiagnoseOptions
    """The probe's and the rules' settings, built alike for every command that probes or analyses.
    `targets`: what it will probe, to say so when an option of one kind of target reaches none."""
    from vastprobe.rule_options import RuleOptions
    from vastprobe.transport.registry import kind_or_none

    rules = rules or RuleFlags()
    sample, pid, match, py_spy, context = probe.sample, probe.pid, probe.match, probe.py_spy, probe.context
    if context and targets and not any(getattr(kind_or_none(t), "name", None) == "kubectl" for t in targets):
        say(
            f"vastprobe: warning: --context {context} applies to kubectl:// targets only; none was given, so it is ignored"
        )
    from vastprobe.pipeline import DEADLINE_MARGIN, DiagnoseOptions, remote_deadline
    from vastprobe.probe.script import DEFAULT_ARTIFACTS, ProbeParams

    deadline = remote_deadline(timeout)  # SSH runs set it again from the time left once connected
    if deadline <= sample:
        # the watchdog would end every probe before its second sample: `--timeout 3` was accepted and
        # each run read "the probe did not finish" (found by a new user's review)
        need = math.floor(sample) + 1 + math.ceil(DEADLINE_MARGIN)
        usage_error(
            f"--timeout {timeout:g} leaves the probe {deadline}s on the target, too short for --sample {sample:g}: "
            f"give --timeout {need} or more (or a shorter --sample)"
        )
    params = ProbeParams(
        sample=sample,
        logs=tuple(lexical(x) for x in probe.log or ()),
        artifacts=tuple(lexical(x) for x in probe.artifacts or DEFAULT_ARTIFACTS),
        deadline=deadline,
        python_stacks=py_spy,
        job_pids=tuple(dict.fromkeys(pid or ()))[:64],
    )
    return DiagnoseOptions(
        params=params,
        timeout=timeout,
        pids=tuple(dict.fromkeys(pid or ())),
        matches=tuple(dict.fromkeys(match or ())),
        rules=RuleOptions(stale_after=rules.stale_after, expect_gpu=rules.expect_gpu, expect_gpus=rules.expect_gpus),
        transport_options=per_kind(context),
    )


def check_targets(targets: list[str]) -> None:
    """Each target well formed for its transport (the registry's kinds), or one usage error."""
    from vastprobe.targets import TargetError
    from vastprobe.transport.registry import check_target

    for t in targets:
        try:
            check_target(t)
        except TargetError as exc:
            usage_error(str(exc))


def _verbose_logging(level: int) -> None:
    """-v: asyncssh's own log (connection, auth, channel) on stderr, escaped like everything else."""
    import logging

    from vastprobe.transport.ssh.asyncssh_lib import asyncssh  # imported as the transport imports it
    from vastprobe.untrusted.safe import safe

    class Escaped(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return safe(f"vastprobe: ssh: {super().format(record)}")

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Escaped("%(message)s"))
    logger = logging.getLogger("asyncssh")
    logger.addHandler(handler)
    asyncssh.set_log_level(logging.INFO if level == 1 else logging.DEBUG)
    if level >= 2:
        asyncssh.set_debug_level(min(level - 1, 3))


def ssh_options(targets: list[str], ssh: SshFlags, verbose: int = 0):  # -> SshOptions, or None
    """Every SSH setting checked before the first connection, ssh_config included (a syntax
    error there is one usage error, not one failure per host)."""
    from vastprobe.transport.registry import needs_ssh

    check_targets(targets)
    if not any(needs_ssh(t) for t in targets):
        return None
    from vastprobe.transport.ssh.config import load_config
    from vastprobe.transport.ssh.settings import SshOptions, parse_config_option

    ssh_config = ssh.ssh_config
    opts = SshOptions(
        port=ssh.port,
        user=ssh.user,
        identities=tuple(str(p.expanduser()) for p in ssh.identity or ()),
        ssh_config=str(ssh_config.expanduser()) if ssh_config else None,
        known_hosts=str(ssh.known_hosts.expanduser()) if ssh.known_hosts else None,
        host_key_check=ssh.host_key_check.value if ssh.host_key_check else None,  # type: ignore[arg-type]
        connect_timeout=ssh.connect_timeout,
        timeout=ssh.timeout,
        jump=ssh.jump,
        config_options=tuple(parse_config_option(o) for o in ssh.config_options or ()),
        verbose=verbose,
    )
    try:
        load_config(opts, "vastprobe-config-check")
    except OSError as exc:
        usage_error(f"{ssh_config or '~/.ssh/config'}: {exc.strerror or exc}")
    except ValueError as exc:  # asyncssh's ConfigParseError names the file and line
        usage_error(f"ssh_config: {exc}")
    _say_overridden(targets, opts)
    if verbose:
        _verbose_logging(verbose)
    return opts


def _say_overridden(targets: list[str], opts) -> None:  # type: ignore[no-untyped-def]
    """-p/-l (or -o Port/User) win over a port or user written in a target, as ssh's do over
    ssh://user@host:port: one warning line each, before anything is contacted, naming the targets
    whose own port or user is not the one used."""
    from vastprobe.targets import parse_target
    from vastprobe.transport.registry import needs_ssh

    port = opts.port or opts.option("Port")
    user = opts.user or opts.option("User")
    if port is None and user is None:
        return
    parsed = [(t, parse_target(t)) for t in targets if needs_ssh(t)]
    if port is not None:
        flag = "-p" if opts.port else "-o Port"
        theirs = [t for t, st in parsed if st.port is not None and str(st.port) != str(port)]
        if theirs:
            say(f"vastprobe: warning: {flag} {port} wins over the port in {_some(theirs)}, as ssh -p does over "
                f"ssh://host:port: connecting to port {port}")  # fmt: skip
    if user is not None:
        flag = "-l" if opts.user else "-o User"
        theirs = [t for t, st in parsed if st.user is not None and st.user != user]
        if theirs:
            say(f"vastprobe: warning: {flag} {user} wins over the user in {_some(theirs)}, as ssh -l does over "
                f"user@host: logging in as {user}")  # fmt: skip


def _some(items: list[str], shown: int = 5) -> str:
    return ", ".join(items[:shown]) + (f" (+{len(items) - shown} more)" if len(items) > shown else "")


def lexical(path: str) -> str:
    """A --log or --artifacts path with `.` and `..` resolved by name, as the user reads it: on the
    target `link/..` is the parent of where the link leads, which a tenant's directory link can make
    a root-only directory (the probe refuses any `..` left)."""
    import posixpath

    return posixpath.normpath(path) if "/." in path or path.startswith(".") else path
