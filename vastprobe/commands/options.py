"""Every option the commands share, defined once with its check (commands/checks.py), its help
panel and its completion, and gathered in the groups the commands take (commands/option_groups.py):
what the probe reads, how the rules judge, how the report is shown, how SSH connects, the fleet's
history. What the commands build from them is commands/settings.py.

A new shared option is an `Annotated` alias here and one field in its group: every command that
takes the group offers it. Nothing here imports asyncssh or rich at import time: `vastprobe --help`
and option errors stay light.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Optional

import typer

from vastprobe.commands import checks
from vastprobe.commands.option_groups import OptionGroup
from vastprobe.render.formats import OutputFormat
from vastprobe.transport.registry import target_forms
from vastprobe.transport.ssh.settings import CONFIG_KEYS

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


# ---- options: each with its check (checks.py) and its help panel --------------------------------

SampleOpt = Annotated[
    float,
    typer.Option("--sample", metavar="SECONDS", parser=checks.duration, callback=checks.seconds(0.01, 600, zero=True), rich_help_panel=P_SCOPE,
                 help="Seconds between the probe's two samples: 0.01-600, or 0 for one sample."),
]  # fmt: skip
PidOpt = Annotated[
    Optional[list[int]],
    typer.Option("--pid", metavar="PID", callback=checks.pids, rich_help_panel=P_SCOPE, autocompletion=complete_pids,
                 help="Root process of interest, with its descendants (repeatable). Matching nothing: verdict unknown, exit 3; one of several matching nothing: a warning on stderr."),
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
#: `rules` and `history`, which have no --snapshot
ListingFormatOpt = Annotated[
    Optional[OutputFormat],
    typer.Option("--format", rich_help_panel=P_OUTPUT, help="table on a terminal, json otherwise."),
]
JsonOpt = Annotated[bool, typer.Option("--json", rich_help_panel=P_OUTPUT, help="Short for --format json.")]
FailOnOpt = Annotated[
    FailOn,
    typer.Option("--fail-on", rich_help_panel=P_OUTPUT,
                 help="Exit 1 on a stalled target (the default), or on a degraded one too."),
]  # fmt: skip
#: What a TARGET argument may be: every kind of transport (transport/registry.py), in its form.
TARGET_HELP = target_forms()
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
_SSH_OPTION_HELP = f"ssh_config option, as ssh -o (repeatable): {', '.join(CONFIG_KEYS.values())}."
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
    typer.Option("-v", "--verbose", count=True, show_default=False, rich_help_panel=P_OUTPUT, metavar="",
                 help="More detail: the report lists every process in scope and every finding in full; "
                      "SSH handshake detail on stderr (-vv, -vvv: more)."),
]  # fmt: skip
ReportVerboseOpt = Annotated[
    int,
    typer.Option("-v", "--verbose", count=True, show_default=False, rich_help_panel=P_OUTPUT, metavar="",
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


# ---- the groups: each command takes some of them (commands/option_groups.with_groups) ----------------


@dataclass(frozen=True)
class ProbeFlags:
    """What the probe reads on each target (and --context, the kubectl context that reaches a pod's)."""

    sample: SampleOpt = 1.0
    pid: PidOpt = None
    match: MatchOpt = None
    log: LogOpt = None
    artifacts: ArtOpt = None
    py_spy: PySpyOpt = False
    context: ContextOpt = None


@dataclass(frozen=True)
class RuleFlags:
    """How the rules judge what it read."""

    stale_after: StaleOpt = 300.0
    expect_gpu: GpuOpt = None
    expect_gpus: GpusOpt = None


@dataclass(frozen=True)
class ReportFlags:
    """How the report is shown."""

    fmt: FormatOpt = None
    json_flag: JsonOpt = False
    verbose: VerboseOpt = 0
    brief: BriefOpt = False
    snapshot: SnapshotOpt = False


@dataclass(frozen=True)
class SshFlags:
    """How each target is reached over SSH, and the bound on its whole probe."""

    timeout: TimeoutOpt = 60.0
    connect_timeout: ConnectTimeoutOpt = None
    port: PortOpt = None
    user: UserOpt = None
    identity: IdentityOpt = None
    ssh_config: ConfigOpt = None
    config_options: OptionOpt = None
    jump: JumpOpt = None
    known_hosts: KnownHostsOpt = None
    host_key_check: HostKeyOpt = None


@dataclass(frozen=True)
class FleetFlags:
    """The fleet's memory: where the history lives, how long it keeps, how hosts are grouped and sharded."""

    history: HistoryOpt = None
    no_history: NoHistoryOpt = False
    keep: KeepOpt = "30d"
    group_by: GroupByOpt = None
    shard: ShardOpt = None
    shards: ShardsOpt = None


PROBE_GROUP = OptionGroup(ProbeFlags)
RULE_GROUP = OptionGroup(RuleFlags)
REPORT_GROUP = OptionGroup(ReportFlags)
SSH_GROUP = OptionGroup(SshFlags)
FLEET_GROUP = OptionGroup(FleetFlags)
