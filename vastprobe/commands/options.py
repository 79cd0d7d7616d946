"""Every option the commands share, defined once with its check (commands/checks.py), its help
panel and its completion; and what the commands build from them: the output format, the probe's
options, the SSH options (ssh_config read and checked before the first connection).

A new option is an `Annotated` alias here, used by name in each command that takes it. Nothing
here imports asyncssh or rich at import time: `vastprobe --help` and option errors stay light.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Optional

import typer

from vastprobe.commands import checks
from vastprobe.commands.common import usage_error
from vastprobe.notices import say
from vastprobe.render.formats import FORMATS, Format, OutputFormat

P_SCOPE = "What to look at"
P_OUTPUT = "Output"
P_LIMITS = "Limits"
P_SSH = "SSH (as OpenSSH; the command line wins over ssh_config)"
P_INVENTORY = "Inventory (as ClusterShell's clush)"
P_HISTORY = "History and fleet"


class FailOn(StrEnum):
    """The worst verdict a run may find and still exit 0: `stalled` pages on stalls alone, `degraded`
    on warnings too (a cron line that wants to hear of every host at risk)."""

    stalled = "stalled"
    degraded = "degraded"


class HostKeyCheck(StrEnum):
    strict = "strict"
    accept_new = "accept-new"
    off = "off"


# Completion of values, asked by the shell's script (vastprobe/completion.py, imported only then).


def complete_targets(ctx: typer.Context, incomplete: str) -> list[str]:
    from vastprobe.completion import targets

    return targets(ctx, incomplete)


def complete_hosts(ctx: typer.Context, incomplete: str) -> list[str]:
    from vastprobe.completion import targets

    return targets(ctx, incomplete, local=False)


def complete_pids(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    from vastprobe.completion import local_pids

    return local_pids(ctx, incomplete)


def complete_rules(incomplete: str) -> list[tuple[str, str]]:
    from vastprobe.completion import rule_names

    return rule_names(incomplete)


def output_format(fmt: Optional[OutputFormat], json_flag: bool, snapshot: bool = False) -> Format:
    """--json, else --format, else json for --snapshot (only JSON carries it), else table on a terminal, json otherwise."""
    if json_flag:
        return FORMATS["json"]
    if fmt is not None:
        return FORMATS[fmt.value]
    if snapshot:  # only JSON carries it
        return FORMATS["json"]
    return FORMATS["table" if sys.stdout.isatty() else "json"]


def report_format(fmt: Optional[OutputFormat], json_flag: bool, brief: bool, snapshot: bool) -> Format:
    """The report's format, --brief and --snapshot checked against it and each other (usage errors)."""
    if brief and snapshot:
        usage_error("--brief leaves the snapshot out and --snapshot puts it in: give one of them")
    chosen = output_format(fmt, json_flag, snapshot)
    if snapshot and not chosen.shows_snapshot:
        usage_error("--snapshot is for --format json or ndjson: the table never shows the snapshot")
    return chosen


# ---- options: each with its check (checks.py) and its help panel --------------------------------

SampleOpt = Annotated[
    float,
    typer.Option("--sample", metavar="SECONDS", parser=checks.duration, callback=checks.seconds(0.01, 600, zero=True), rich_help_panel=P_SCOPE,
                 help="Seconds between the probe's two samples: 0.01-600, or 0 for one sample."),
]  # fmt: skip
PidOpt = Annotated[
    Optional[list[int]],
    typer.Option("--pid", metavar="PID", callback=checks.pids, rich_help_panel=P_SCOPE, autocompletion=complete_pids,
                 help="Root process of interest, with its descendants (repeatable). Matching nothing: verdict unknown, exit 3."),
]  # fmt: skip
MatchOpt = Annotated[
    Optional[list[str]],
    typer.Option("--match", metavar="REGEX", callback=checks.regexes, rich_help_panel=P_SCOPE,
                 help="Processes whose command line (its first 4096 characters) matches, with descendants (repeatable)."),
]  # fmt: skip
PySpyOpt = Annotated[
    bool,
    typer.Option("--py-spy", rich_help_panel=P_SCOPE,
                 help="Also take Python stacks with py-spy on the target (8 programs: under --pid, else the newest; "
                      "--nonblocking: read, never paused; 3 s and 64 KiB each), shown on the findings that name them. "
                      "Locals are read too, but only allow-listed names (lock file paths) leave the target: "
                      "it finds waiters on py-filelock and torch's FileBaton."),
]  # fmt: skip
LogOpt = Annotated[
    Optional[list[str]],
    typer.Option("--log", metavar="PATH", callback=checks.texts, rich_help_panel=P_SCOPE,
                 help="Log file the workload keeps writing (repeatable)."),
]  # fmt: skip
ArtOpt = Annotated[
    Optional[list[str]],
    typer.Option("--artifacts", metavar="GLOB", callback=checks.texts, rich_help_panel=P_SCOPE,
                 help="Remote glob to list (repeatable; default /tmp/*)."),
]  # fmt: skip
StaleOpt = Annotated[
    float,
    typer.Option("--stale-after", metavar="SECONDS", parser=checks.duration, callback=checks.seconds(0, 10 * 365 * 86400), rich_help_panel=P_SCOPE,
                 help="A log not written for this long is stale."),
]  # fmt: skip
GpuOpt = Annotated[
    Optional[bool],
    typer.Option("--expect-gpu/--no-expect-gpu", rich_help_panel=P_SCOPE,
                 help="Whether the workload should use GPUs (default: auto)."),
]  # fmt: skip
FormatOpt = Annotated[
    Optional[OutputFormat],
    typer.Option(
        "--format", rich_help_panel=P_OUTPUT, help="table on a terminal (json with --snapshot), json otherwise."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", rich_help_panel=P_OUTPUT, help="Short for --format json.")]
FailOnOpt = Annotated[
    FailOn,
    typer.Option("--fail-on", rich_help_panel=P_OUTPUT,
                 help="Exit 1 on a stalled target (the default), or on a degraded one too."),
]  # fmt: skip
#: What a TARGET argument may be: every kind of transport (transport/registry.py).
TARGET_HELP = ("`local`, \\[user@]host\\[:port], ssh://\\[user@]host\\[:port], docker://NAME, podman://NAME, "
               "kubectl://\\[NS/]POD\\[/CONTAINER]")  # fmt: skip
ContextOpt = Annotated[
    Optional[str],
    typer.Option("--context", metavar="NAME", callback=checks.kube_context, rich_help_panel=P_SCOPE,
                 help="kubectl:// targets: the kubeconfig context (default: kubectl's current one)."),
]  # fmt: skip
GpusOpt = Annotated[
    Optional[int],
    typer.Option("--expect-gpus", metavar="N", min=0, max=4096, rich_help_panel=P_SCOPE,
                 help="How many GPUs should answer on each target (gpu-missing when fewer do)."),
]  # fmt: skip
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", metavar="SECONDS", parser=checks.duration, callback=checks.seconds(1, 86400), rich_help_panel=P_LIMITS,
                 help="Bound on one host's whole probe, connect included (1-86400)."),
]  # fmt: skip
ConnectTimeoutOpt = Annotated[
    Optional[float],
    typer.Option("--connect-timeout", metavar="SECONDS", parser=checks.duration, callback=checks.seconds(1, 3600), rich_help_panel=P_SSH,
                 help="TCP connect + handshake + auth bound (default: ConnectTimeout from ssh_config, else 10)."),
]  # fmt: skip
PortOpt = Annotated[
    Optional[int], typer.Option("-p", "--port", metavar="PORT", callback=checks.port, rich_help_panel=P_SSH, help="SSH port (wins over a target's :port, as ssh -p).")
]  # fmt: skip
UserOpt = Annotated[
    Optional[str], typer.Option("-l", "--user", metavar="USER", callback=checks.user, rich_help_panel=P_SSH, help="SSH user (wins over a target's user@, as ssh -l).")
]  # fmt: skip
IdentityOpt = Annotated[
    Optional[list[Path]],
    typer.Option("-i", "--identity", metavar="FILE", callback=checks.readable_files, rich_help_panel=P_SSH,
                 help="Private key (repeatable). Encrypted keys are used through ssh-agent; keys readable by others are refused."),
]  # fmt: skip
ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("-F", "--ssh-config", metavar="FILE", callback=checks.readable_file, rich_help_panel=P_SSH,
                 help="ssh_config file (default ~/.ssh/config)."),
]  # fmt: skip
_SSH_OPTION_HELP = (
    "ssh_config option, as ssh -o (repeatable): User, Port, HostName, IdentityFile, IdentitiesOnly, IdentityAgent, "
    "UserKnownHostsFile, StrictHostKeyChecking, HashKnownHosts, ConnectTimeout, ProxyJump."
)
OptionOpt = Annotated[
    Optional[list[str]],
    typer.Option("-o", "--ssh-option", metavar="KEY=VALUE", callback=checks.config_options, rich_help_panel=P_SSH,
                 help=_SSH_OPTION_HELP),
]  # fmt: skip
#: collect's -o is its output file (the contract), so there the SSH option is --ssh-option alone.
LongOptionOpt = Annotated[
    Optional[list[str]],
    typer.Option("--ssh-option", metavar="KEY=VALUE", callback=checks.config_options, rich_help_panel=P_SSH,
                 help=_SSH_OPTION_HELP),
]  # fmt: skip
JumpOpt = Annotated[
    Optional[str],
    typer.Option("-J", "--jump", metavar="HOST,...", callback=checks.jump_hosts, rich_help_panel=P_SSH,
                 help="Jump host(s), as ssh -J (wins over ProxyJump).", autocompletion=complete_hosts),
]  # fmt: skip
KnownHostsOpt = Annotated[
    Optional[Path],
    typer.Option("--known-hosts", metavar="FILE", callback=checks.known_hosts, rich_help_panel=P_SSH,
                 help="known_hosts file (default: UserKnownHostsFile from ssh_config, else ~/.ssh/known_hosts)."),
]  # fmt: skip
HostKeyOpt = Annotated[
    Optional[HostKeyCheck],
    typer.Option("--host-key-check", rich_help_panel=P_SSH,
                 help="strict refuses unknown keys; accept-new records them; off checks nothing (warned once). "
                      "Default: StrictHostKeyChecking from ssh_config, else strict. A changed key is always refused."),
]  # fmt: skip
VerboseOpt = Annotated[
    int,
    typer.Option("-v", "--verbose", count=True, show_default=False, rich_help_panel=P_OUTPUT,
                 help="More detail: the report lists every process in scope and every finding in full; "
                      "SSH handshake detail on stderr (-vv, -vvv: more)."),
]  # fmt: skip
ReportVerboseOpt = Annotated[
    int,
    typer.Option("-v", "--verbose", count=True, show_default=False, rich_help_panel=P_OUTPUT,
                 help="The report lists every process in scope and every finding in full."),
]  # fmt: skip
BriefOpt = Annotated[
    bool,
    typer.Option("--brief", rich_help_panel=P_OUTPUT,
                 help="A table of each host's headline alone (JSON and NDJSON leave the snapshot out already)."),
]  # fmt: skip
SnapshotOpt = Annotated[
    bool,
    typer.Option("--snapshot", rich_help_panel=P_OUTPUT,
                 help="JSON/NDJSON with each host's parsed evidence (processes, kernel log, cgroups, GPUs, logs; "
                      "0.1-0.6 MB a host), left out by default. Without --format: JSON."),
]  # fmt: skip
ConcurrencyOpt = Annotated[
    int,
    typer.Option("--concurrency", metavar="N", callback=checks.whole(1, 4096, "host count"), rich_help_panel=P_LIMITS,
                 help="Hosts probed at once (1-4096)."),
]  # fmt: skip


HistoryOpt = Annotated[
    Optional[str],
    typer.Option("--history", metavar="PATH|URL", callback=checks.history, rich_help_panel=P_HISTORY,
                 help="Where the history lives: an SQLite file, or a postgresql:// URL (shared by many "
                      "controllers; docs/deploy.md). sweep and history: by default $VASTPROBE_HISTORY, else "
                      "vastprobe/history.sqlite in $XDG_STATE_HOME (~/.local/state when unset); diagnose: "
                      "recorded only with this option."),
]  # fmt: skip
NoHistoryOpt = Annotated[
    bool, typer.Option("--no-history", rich_help_panel=P_HISTORY, help="Record nothing in the history.")
]
KeepOpt = Annotated[
    str,
    typer.Option("--keep", metavar="DURATION", callback=checks.keep, rich_help_panel=P_HISTORY,
                 help="Prune history older than this as it writes (30d, 12h, 90m, seconds)."),
]  # fmt: skip
GroupByOpt = Annotated[
    Optional[str],
    typer.Option("--group-by", metavar="label|REGEX", callback=checks.group_by, rich_help_panel=P_HISTORY,
                 help="Compare the hosts of each job: 'label' (vast.ai label) or a regex over the target whose "
                      "first group names the job; odd hosts get outlier_of."),
]  # fmt: skip
ShardOpt = Annotated[
    Optional[str],
    typer.Option("--shard", metavar="K/N|auto", callback=checks.shard, rich_help_panel=P_HISTORY,
                 help="Sweep only shard K of N of the inventory (a stable hash of each target); 'auto': K and N "
                      "from a Kubernetes Indexed Job or a Slurm array (docs/deploy.md)."),
]  # fmt: skip
ShardsOpt = Annotated[
    Optional[int],
    typer.Option("--shards", metavar="N", min=1, max=9999, rich_help_panel=P_HISTORY,
                 help="With --shard auto in a Kubernetes Indexed Job: the shard count, the Job's completions "
                      "(default: $VASTPROBE_SHARDS)."),
]  # fmt: skip


# ---- what the commands build from the options -----------------------------------------------------


def per_kind(context: Optional[str]) -> dict[str, dict[str, str]]:
    """The transports' own options from the command line (base.TransportSettings.per_kind)."""
    return {"kubectl": {"context": context}} if context else {}


def probe_options(
    *,
    sample: float,
    pid: Optional[list[int]] = None,
    match: Optional[list[str]] = None,
    log: Optional[list[str]] = None,
    artifacts: Optional[list[str]] = None,
    stale_after: float = 300.0,
    expect_gpu: Optional[bool] = None,
    timeout: float = 60.0,
    expect_gpus: Optional[int] = None,
    py_spy: bool = False,
    context: Optional[str] = None,
    targets: tuple[str, ...] = (),
):  # -> DiagnoseOptions
    """The probe's and the rules' settings, built alike for every command that probes or analyses.
    `targets`: what it will probe, to say so when an option of one kind of target reaches none."""
    from vastprobe.options import RuleOptions

    if context and targets and not any(t.startswith("kubectl://") for t in targets):
        say(
            f"vastprobe: warning: --context {context} applies to kubectl:// targets only; none was given, so it is ignored"
        )
    from vastprobe.pipeline import DiagnoseOptions, remote_deadline
    from vastprobe.probe.render import DEFAULT_ARTIFACTS, ProbeParams

    deadline = remote_deadline(timeout)  # SSH runs set it again from the time left once connected
    params = ProbeParams(
        sample=sample,
        logs=tuple(log or ()),
        artifacts=tuple(artifacts or DEFAULT_ARTIFACTS),
        deadline=deadline,
        python_stacks=py_spy,
        python_stack_pids=tuple(dict.fromkeys(pid or ())) if py_spy else (),
        job_pids=tuple(dict.fromkeys(pid or ()))[:64],
    )
    return DiagnoseOptions(
        params=params,
        timeout=timeout,
        pids=tuple(dict.fromkeys(pid or ())),
        matches=tuple(dict.fromkeys(match or ())),
        rules=RuleOptions(stale_after=stale_after, expect_gpu=expect_gpu, expect_gpus=expect_gpus),
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


def ssh_options(
    targets: list[str],
    *,
    port: Optional[int],
    user: Optional[str],
    identity: Optional[list[Path]],
    ssh_config: Optional[Path],
    known_hosts: Optional[Path],
    host_key_check: Optional[HostKeyCheck],
    connect_timeout: Optional[float],
    timeout: float,
    config_options: Optional[list[str]] = None,
    jump: Optional[str] = None,
    verbose: int = 0,
):  # -> SshOptions, or None when no target is reached over SSH
    """Every SSH setting checked before the first connection, ssh_config included (a syntax
    error there is one usage error, not one failure per host)."""
    from vastprobe.transport.registry import needs_ssh

    check_targets(targets)
    if not any(needs_ssh(t) for t in targets):
        return None
    from vastprobe.transport.ssh.config import load_config
    from vastprobe.transport.ssh.settings import SshOptions, parse_config_option

    opts = SshOptions(
        port=port,
        user=user,
        identities=tuple(str(p.expanduser()) for p in identity or ()),
        ssh_config=str(ssh_config.expanduser()) if ssh_config else None,
        known_hosts=str(known_hosts.expanduser()) if known_hosts else None,
        host_key_check=host_key_check.value if host_key_check else None,  # type: ignore[arg-type]
        connect_timeout=connect_timeout,
        timeout=timeout,
        jump=jump,
        config_options=tuple(parse_config_option(o) for o in config_options or ()),
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
