"""The command line: options -> targets -> pipeline -> renderer -> exit code. Nothing else.

Every option is checked while the command line is parsed (vastprobe/cli_checks.py) and every
cross-option check runs before the first connection: bad input is one line on stderr and exit 2.
vastprobe's own failure is one line and exit 4 (the traceback with --debug or VASTPROBE_DEBUG=1);
Ctrl-C prints what finished and exits 130. Everything on stderr goes through notices.say, escaped.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from typer.core import TyperCommand

from vastprobe import __version__
from vastprobe import cli_checks as checks
from vastprobe.notices import say

EXIT_OK, EXIT_STALLED, EXIT_USAGE, EXIT_UNPROBED, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_PIPE = 141  # stdout's reader went away (`| head`): what a tool killed by SIGPIPE reports
EXIT_TERMINATED = 143  # SIGTERM (`timeout`, systemd, a scheduler): stops as Ctrl-C does, 128 + 15 as a shell says
#: Documented in docs/output.md and in every command's help; tests/test_cli_errors.py holds every run to them.
EXIT_CODES = {
    EXIT_OK: "every target probed and diagnosed, none stalled",
    EXIT_STALLED: "at least one target is stalled",
    EXIT_USAGE: "usage error: a bad option, target, inventory or capture (one line on stderr)",
    EXIT_UNPROBED: "nothing stalled, but a target could not be probed or diagnosed (skipped rows do not count)",
    EXIT_FAILED: "vastprobe itself failed (one line on stderr; the traceback with --debug)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C), after printing what finished",
}
EXIT_EPILOG = "[b]Exit codes[/b]: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items()) + "."
CONTEXT = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings=CONTEXT,
    help="Find out why a GPU host went quiet: one read-only probe per host, classified with evidence.",
    epilog=EXIT_EPILOG,
)

P_SCOPE = "What to look at"
P_OUTPUT = "Output"
P_LIMITS = "Limits"
P_SSH = "SSH (as OpenSSH; the command line wins over ssh_config)"
P_INVENTORY = "Inventory (as ClusterShell's clush)"


class Command(TyperCommand):
    """Usage lines as man pages write them: `TARGET...`, not typer's `{TARGET...}`."""

    def collect_usage_pieces(self, ctx):  # type: ignore[no-untyped-def]
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in super().collect_usage_pieces(ctx)]


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    ndjson = "ndjson"


class HostKeyCheck(StrEnum):
    strict = "strict"
    accept_new = "accept-new"
    off = "off"


def usage_error(message: str) -> NoReturn:
    """A bad input found in a command's body (after parsing, before any connection): exit 2."""
    raise _click_exceptions().UsageError(message)


def _version(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:  # not while a shell asks for completions
        typer.echo(f"vastprobe {__version__}")
        raise typer.Exit(0)


def _show_completion(ctx: typer.Context, value: Optional[str]) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from vastprobe.completion import SCRIPTS, ShellError, shell_for

    try:
        shell = shell_for(value)
    except ShellError as exc:
        raise typer.BadParameter(str(exc)) from exc
    sys.stdout.write(SCRIPTS[shell])
    raise typer.Exit(0)


def _install_completion(ctx: typer.Context, value: Optional[str]) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from vastprobe.completion import ShellError, install, shell_for

    try:
        shell = shell_for(value)
        script, rc = install(shell)
    except ShellError as exc:
        raise typer.BadParameter(str(exc)) from exc
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise typer.BadParameter(f"{where}{exc.strerror or exc}") from exc
    loaded = f", loaded from {rc}" if rc else ""
    say(f"vastprobe: {shell} completion installed in {script}{loaded}; it works in shells started from now on")
    raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="On an internal error, print the traceback (also VASTPROBE_DEBUG=1).")
    ] = False,
    install_completion: Annotated[
        Optional[str],
        typer.Option(
            "--install-completion",
            metavar="[bash|zsh|fish]",
            callback=_install_completion,
            is_eager=True,
            expose_value=False,
            help="Install completion for this shell ($SHELL) or the one named, then exit.",
        ),
    ] = None,
    show_completion: Annotated[
        Optional[str],
        typer.Option(
            "--show-completion",
            metavar="[bash|zsh|fish]",
            callback=_show_completion,
            is_eager=True,
            expose_value=False,
            help="Print the completion script for this shell or the one named (to save or source), then exit.",
        ),
    ] = None,
) -> None:
    pass  # --debug is read by main() before parsing, so it works after the command name too


# Completion of values, asked by the shell's script (vastprobe/completion.py, imported only then).


def _complete_targets(ctx: typer.Context, incomplete: str) -> list[str]:
    from vastprobe.completion import targets

    return targets(ctx, incomplete)


def _complete_hosts(ctx: typer.Context, incomplete: str) -> list[str]:
    from vastprobe.completion import targets

    return targets(ctx, incomplete, local=False)


def _complete_rules(incomplete: str) -> list[tuple[str, str]]:
    from vastprobe.completion import rule_names

    return rule_names(incomplete)


def _format(fmt: Optional[OutputFormat], json_flag: bool, snapshot: bool = False) -> OutputFormat:
    if json_flag:
        return OutputFormat.json
    if fmt is not None:
        return fmt
    if snapshot:  # only JSON carries it
        return OutputFormat.json
    return OutputFormat.table if sys.stdout.isatty() else OutputFormat.json


def _report_format(fmt: Optional[OutputFormat], json_flag: bool, brief: bool, snapshot: bool) -> OutputFormat:
    """The report's format, --brief and --snapshot checked against it and each other (usage errors)."""
    if brief and snapshot:
        usage_error("--brief leaves the snapshot out and --snapshot puts it in: give one of them")
    chosen = _format(fmt, json_flag, snapshot)
    if snapshot and chosen is OutputFormat.table:
        usage_error("--snapshot is for --format json or ndjson: the table never shows the snapshot")
    return chosen


def exit_code(reports: list) -> int:
    """1 if any target is stalled; else 3 if any could not be probed, or was probed but not
    diagnosed (verdict unknown: e.g. --pid/--match matched nothing); else 0. Skipped rows are neither."""
    if any(r.verdict == "stalled" for r in reports):
        return EXIT_STALLED
    if any(r.status != "skipped" and (r.status != "ok" or r.verdict == "unknown") for r in reports):
        return EXIT_UNPROBED
    return EXIT_OK


# ---- options: each with its check (cli_checks) and its help panel ------------------------------

SampleOpt = Annotated[
    float,
    typer.Option("--sample", metavar="SECONDS", callback=checks.seconds(0.01, 600, zero=True), rich_help_panel=P_SCOPE,
                 help="Seconds between the probe's two samples: 0.01-600, or 0 for one sample."),
]  # fmt: skip
PidOpt = Annotated[
    Optional[list[int]],
    typer.Option("--pid", metavar="PID", callback=checks.pids, rich_help_panel=P_SCOPE,
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
                      "--nonblocking: read, never paused; 3 s and 64 KiB each), shown on the findings that name them."),
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
    typer.Option("--stale-after", metavar="SECONDS", callback=checks.seconds(0, 10 * 365 * 86400), rich_help_panel=P_SCOPE,
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
GpusOpt = Annotated[
    Optional[int],
    typer.Option("--expect-gpus", metavar="N", min=0, max=4096, rich_help_panel=P_SCOPE,
                 help="How many GPUs should answer on each target (gpu-missing when fewer do)."),
]  # fmt: skip
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", metavar="SECONDS", callback=checks.seconds(1, 86400), rich_help_panel=P_LIMITS,
                 help="Bound on one host's whole probe, connect included (1-86400)."),
]  # fmt: skip
ConnectTimeoutOpt = Annotated[
    Optional[float],
    typer.Option("--connect-timeout", metavar="SECONDS", callback=checks.seconds(1, 3600), rich_help_panel=P_SSH,
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
                 help="Jump host(s), as ssh -J (wins over ProxyJump).", autocompletion=_complete_hosts),
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


def _options(
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
):  # -> DiagnoseOptions
    from vastprobe.options import RuleOptions
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
    )
    return DiagnoseOptions(
        params=params,
        timeout=timeout,
        pids=tuple(dict.fromkeys(pid or ())),
        matches=tuple(dict.fromkeys(match or ())),
        rules=RuleOptions(stale_after=stale_after, expect_gpu=expect_gpu, expect_gpus=expect_gpus),
    )


def _emit(
    reports: list,
    fmt: OutputFormat,
    code: int,
    verbose: int = 0,
    brief: bool = False,
    snapshot: bool = False,
    unfinished: int = 0,
) -> None:
    """The reports of a run that ended with `code` (`unfinished`: targets an interrupt left out)."""
    if fmt is OutputFormat.table:
        from vastprobe.render.table import render_reports

        render_reports(reports, verbose=verbose > 0, brief=brief)
        return
    from vastprobe.render.jsonable import summary_dict

    summary = summary_dict(reports, code, unfinished)
    indent = 1 if fmt is OutputFormat.json and sys.stdout.isatty() else None  # compact for pipes
    sys.stdout.write(_json_text(reports, fmt, snapshot, summary, indent))
    sys.stdout.flush()


def _json_text(reports: list, fmt: OutputFormat, snapshot: bool, summary: dict, indent: int | None = None) -> str:
    """A JSON document, or NDJSON lines and the summary line that ends them."""
    from vastprobe.render.jsonable import dumps, ndjson_line, ndjson_summary, report_document

    if fmt is OutputFormat.ndjson:
        return "".join(ndjson_line(r, snapshot) for r in reports) + ndjson_summary(summary)
    return dumps(report_document(reports, snapshot, summary), indent=indent) + "\n"


def _interrupted_code() -> int:
    return EXIT_TERMINATED if _terminated else EXIT_INTERRUPTED


def _check_targets(targets: list[str]) -> None:
    from vastprobe.targets import TargetError, parse_target

    for t in targets:
        if t != "local":
            try:
                parse_target(t)
            except TargetError as exc:
                usage_error(str(exc))


def _verbose_logging(level: int) -> None:
    """-v: asyncssh's own log (connection, auth, channel) on stderr, escaped like everything else."""
    import logging

    import asyncssh

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


def _ssh_options(
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
):  # -> SshOptions, or None when every target is local
    """Every SSH setting checked before the first connection, ssh_config included (a syntax
    error there is one usage error, not one failure per host)."""
    _check_targets(targets)
    if all(t == "local" for t in targets):
        return None
    from vastprobe.transport.ssh import SshOptions, load_config
    from vastprobe.transport.sshopts import parse_config_option

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

    port = opts.port or opts.option("Port")
    user = opts.user or opts.option("User")
    if port is None and user is None:
        return
    parsed = [(t, parse_target(t)) for t in targets if t != "local"]
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


def _unique(targets: list[str], what: str = "target") -> list[str]:
    out = list(dict.fromkeys(targets))
    if len(out) < len(targets):
        n = len(targets) - len(out)
        say(f"vastprobe: {n} duplicate {what}{'s' if n != 1 else ''} probed once")
    return out


def _run_entries(
    entries: list, options, concurrency: int, on_report, on_start=None, keep_snapshots: bool = True
) -> tuple[list, bool]:  # type: ignore[no-untyped-def]
    """Probe every entry; returns (reports in completion order, interrupted). Ctrl-C stops the run
    and keeps what finished."""
    from vastprobe import eventloop
    from vastprobe.sweep import sweep as run_sweep

    done: list = []  # filled by the sweep as hosts finish (snapshots within its budget)

    if any(e.target != "local" and e.skip is None for e in entries):
        from vastprobe.pipeline import warm_analysis

        warm_analysis()
    from vastprobe.analysis.hops import join_jobs, join_remote

    try:
        eventloop.run(run_sweep(entries, options, concurrency, on_report, on_start, kept=done,
                                keep_snapshots=keep_snapshots))  # fmt: skip
    except KeyboardInterrupt:
        return join_jobs(join_remote(done)), True
    # a job waiting on an ssh session to another host of the run; a distributed job's hosts
    return join_jobs(join_remote(done)), False


def _say_interrupted(done: list, entries: list, unit: str = "hosts") -> None:
    finished = {r.target for r in done}
    left = [e.target for e in entries if e.target not in finished]
    shown = ", ".join(left[:8]) + (f" (+{len(left) - 8} more)" if len(left) > 8 else "")
    say(f"\nvastprobe: interrupted: {len(done)} of {len(entries)} {unit} finished; {len(left)} did not: {shown}")


@app.command(cls=Command, context_settings=CONTEXT, epilog=EXIT_EPILOG)
def diagnose(
    targets: Annotated[
        list[str],
        typer.Argument(
            metavar="TARGET...",
            help="`local`, \\[user@]host\\[:port], ssh://\\[user@]host\\[:port], or a range like gpu\\[01-04].",
            autocompletion=_complete_targets,
        ),
    ],
    sample: SampleOpt = 1.0,
    pid: PidOpt = None,
    match: MatchOpt = None,
    log: LogOpt = None,
    artifacts: ArtOpt = None,
    py_spy: PySpyOpt = False,
    stale_after: StaleOpt = 300.0,
    expect_gpu: GpuOpt = None,
    expect_gpus: GpusOpt = None,
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
    timeout: TimeoutOpt = 60.0,
    connect_timeout: ConnectTimeoutOpt = None,
    port: PortOpt = None,
    user: UserOpt = None,
    identity: IdentityOpt = None,
    ssh_config: ConfigOpt = None,
    config_options: OptionOpt = None,
    jump: JumpOpt = None,
    known_hosts: KnownHostsOpt = None,
    host_key_check: HostKeyOpt = None,
    verbose: VerboseOpt = 0,
    brief: BriefOpt = False,
    snapshot: SnapshotOpt = False,
    history: HistoryOpt = None,
    keep: KeepOpt = "30d",
) -> None:
    """Probe each target once, classify its stall, print a report.

    [b]Examples[/b]
      vastprobe diagnose local --pid 1234 --log /workspace/run.log
      vastprobe diagnose root@203.0.113.7:41234 -i ~/.ssh/vast
      vastprobe diagnose gpu-box -J bastion --format json
    """
    from dataclasses import replace

    from vastprobe.targets import InventoryEntry, InventoryError, expand_nodeset

    try:
        expanded = [t for text in targets for t in expand_nodeset(text)]  # gpu[01-04]
    except InventoryError as exc:
        usage_error(str(exc))
    expanded = _unique(expanded)
    chosen = _report_format(fmt, json_flag, brief, snapshot)
    options = _options(sample=sample, pid=pid, match=match, log=log, artifacts=artifacts,
                       stale_after=stale_after, expect_gpu=expect_gpu, timeout=timeout,
                       expect_gpus=expect_gpus, py_spy=py_spy)  # fmt: skip
    ssh = _ssh_options(expanded, port=port, user=user, identity=identity, ssh_config=ssh_config,
                       known_hosts=known_hosts, host_key_check=host_key_check, connect_timeout=connect_timeout,
                       timeout=timeout, config_options=config_options, jump=jump, verbose=verbose)  # fmt: skip
    entries = [InventoryEntry(t) for t in expanded]
    fleet = _FleetMemory(_history_location(history), keep) if history is not None else None  # only when asked
    done, interrupted = _run_entries(entries, replace(options, ssh=ssh), len(entries), lambda r: None)
    order = {t: i for i, t in enumerate(expanded)}
    reports = sorted(done, key=lambda r: order.get(r.target, len(order)))
    if fleet is not None:
        reports = fleet.finish(reports, kind="diagnose", complete=not interrupted)
    code = _interrupted_code() if interrupted else exit_code(reports)
    if fleet is not None:  # a shared history that could not be written fails the run (exit 2)
        code = fleet.exit_code(code)
    _emit(reports, chosen, code, verbose, brief, snapshot, unfinished=len(entries) - len(done))
    if interrupted:
        _say_interrupted(done, entries, "targets")
    raise typer.Exit(code)


def _read_text_source(name: str) -> str:
    """An inventory file's text ('-': stdin), bounded; a usage error when it cannot be read."""
    limit = 64 * 1024 * 1024
    try:
        if name == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(Path(name).expanduser(), "rb") as f:
                data = f.read(limit + 1)
    except FileNotFoundError:
        usage_error(f"{name}: no such file")
    except IsADirectoryError:
        usage_error(f"{name}: is a directory, not an inventory file")
    except OSError as exc:
        usage_error(f"{name}: {exc.strerror or exc}")
    if len(data) > limit:
        usage_error(f"{name}: larger than {limit} bytes")
    if b"\0" in data[:65536]:
        usage_error(f"{name}: binary data, not an inventory")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        usage_error(f"{name}: not UTF-8 text (byte {exc.start})")


def _inventory(
    inventory: Optional[str], nodes: list[str], hostfiles: list[Path], excluded: list[str]
) -> list:  # -> list[InventoryEntry]
    """Positional INVENTORY (an existing file, '-', or a node set), -w node sets and --hostfile
    files, in that order; then -x; then each target once."""
    from vastprobe.targets import (
        InventoryEntry,
        InventoryError,
        exclude,
        expand_nodeset,
        looks_like_path,
        parse_inventory,
        text_problem,
        unique_entries,
    )

    entries: list[InventoryEntry] = []

    def add_nodes(text: str, what: str) -> None:
        try:
            targets = expand_nodeset(text)
        except InventoryError as exc:
            usage_error(f"{what}: {exc}")
        for t in targets:
            bad = text_problem(t)
            if bad:
                usage_error(f"{what}: {bad}: {t!r}")
        entries.extend(InventoryEntry(t) for t in targets)

    def add_file(name: str) -> None:
        try:
            entries.extend(parse_inventory(_read_text_source(name)))
        except InventoryError as exc:
            usage_error(f"{'stdin' if name == '-' else name}: {exc}")

    if inventory is not None:
        if inventory == "-" or Path(inventory).expanduser().exists():
            add_file(inventory)
        elif looks_like_path(inventory):
            usage_error(f"{inventory}: no such file (for host names, use -w)")
        else:
            add_nodes(inventory, "INVENTORY")
    for n in nodes:
        add_nodes(n, f"-w {n}")
    for f in hostfiles:
        add_file(str(f))
    if not entries:
        usage_error("no targets: give an INVENTORY, -w NODES or --hostfile FILE")
    try:
        ex = [t for x in excluded for t in expand_nodeset(x)]
    except InventoryError as exc:
        usage_error(f"-x: {exc}")
    kept = exclude(entries, ex)
    if not kept:
        usage_error(f"no targets left after -x ({len(entries)} excluded)")
    unique, dropped = unique_entries(kept)
    if dropped:
        say(f"vastprobe: {dropped} duplicate target{'s' if dropped != 1 else ''} probed once")
    return unique


def _document(
    reports: list, fmt: OutputFormat, summary: dict, snapshot: bool = False, elapsed: float | None = None, memory=None
) -> str:  # type: ignore[no-untyped-def]
    if fmt is not OutputFormat.table:
        return _json_text(reports, fmt, snapshot, summary)
    import io

    from vastprobe.render.summary import render_summary

    buf = io.StringIO()
    render_summary(reports, buf, memory=memory, elapsed=elapsed)
    return buf.getvalue()


@app.command(cls=Command, context_settings=CONTEXT, epilog=EXIT_EPILOG)
def sweep(
    inventory: Annotated[
        Optional[str],
        typer.Argument(
            metavar="[INVENTORY]",
            help="An inventory file (plain list or vast.ai JSON), '-' for stdin, or a node set like 'gpu\\[01-16]'.",
            autocompletion=_complete_targets,
        ),
    ] = None,
    nodes: Annotated[
        Optional[list[str]],
        typer.Option(
            "-w",
            "--nodes",
            metavar="NODES",
            rich_help_panel=P_INVENTORY,
            help="Targets as a node set: 'gpu\\[01-16],root@other:2222' (repeatable).",
            autocompletion=_complete_targets,
        ),
    ] = None,
    hostfile: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--hostfile",
            metavar="FILE",
            callback=checks.readable_files,
            rich_help_panel=P_INVENTORY,
            help="Inventory file: a plain list or vast.ai JSON (repeatable).",
        ),
    ] = None,
    exclude_nodes: Annotated[
        Optional[list[str]],
        typer.Option(
            "-x",
            "--exclude",
            metavar="NODES",
            rich_help_panel=P_INVENTORY,
            help="Leave these out: targets or host names, node sets allowed (repeatable).",
            autocompletion=_complete_targets,
        ),
    ] = None,
    concurrency: ConcurrencyOpt = 32,
    output: Annotated[
        Optional[Path],
        typer.Option(
            "--output",
            metavar="FILE",
            callback=checks.output_file,
            rich_help_panel=P_OUTPUT,
            help="Also write the report here (atomically; not on Ctrl-C).",
        ),
    ] = None,
    prom: Annotated[
        Optional[Path],
        typer.Option(
            "--prom",
            metavar="FILE",
            callback=checks.output_file,
            rich_help_panel=P_OUTPUT,
            help="Prometheus textfile-collector file to write (atomically; not on Ctrl-C).",
        ),
    ] = None,
    sample: SampleOpt = 1.0,
    pid: PidOpt = None,
    match: MatchOpt = None,
    log: LogOpt = None,
    artifacts: ArtOpt = None,
    py_spy: PySpyOpt = False,
    stale_after: StaleOpt = 300.0,
    expect_gpu: GpuOpt = None,
    expect_gpus: GpusOpt = None,
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
    timeout: TimeoutOpt = 60.0,
    connect_timeout: ConnectTimeoutOpt = None,
    port: PortOpt = None,
    user: UserOpt = None,
    identity: IdentityOpt = None,
    ssh_config: ConfigOpt = None,
    config_options: OptionOpt = None,
    jump: JumpOpt = None,
    known_hosts: KnownHostsOpt = None,
    host_key_check: HostKeyOpt = None,
    verbose: VerboseOpt = 0,
    brief: BriefOpt = False,
    snapshot: SnapshotOpt = False,
    history: HistoryOpt = None,
    no_history: NoHistoryOpt = False,
    keep: KeepOpt = "30d",
    group_by: GroupByOpt = None,
    shard: ShardOpt = None,
    shards: ShardsOpt = None,
) -> None:
    """The same diagnosis over a fleet: bounded concurrency, results streamed as hosts finish.

    [b]Examples[/b]
      vastprobe sweep -w 'gpu\\[01-16]' -x gpu03 -l root --prom /var/lib/textfile/vastprobe.prom
      vastprobe sweep --hostfile fleet.txt --format ndjson --output last.ndjson
      vastai show instances --raw | vastprobe sweep - --concurrency 64
    """
    import time
    from dataclasses import replace

    from vastprobe.sweep import plan

    chosen = _report_format(fmt, json_flag, brief, snapshot)
    entries = _inventory(inventory, nodes or [], hostfile or [], exclude_nodes or [])
    where = None if no_history else _history_location(history) if history is not None else _default_history()
    fleet = _FleetMemory(where, keep, group_by, shard, shards)
    entries = fleet.select(entries)
    options = _options(sample=sample, pid=pid, match=match, log=log, artifacts=artifacts,
                       stale_after=stale_after, expect_gpu=expect_gpu, timeout=timeout,
                       expect_gpus=expect_gpus, py_spy=py_spy)  # fmt: skip
    probed = [e.target for e in entries if e.skip is None]
    ssh = _ssh_options(probed or ["local"], port=port, user=user, identity=identity, ssh_config=ssh_config,
                       known_hosts=known_hosts, host_key_check=host_key_check, connect_timeout=connect_timeout,
                       timeout=timeout, config_options=config_options, jump=jump, verbose=verbose)  # fmt: skip
    options = replace(options, ssh=ssh)
    p = plan(len(probed), concurrency, timeout)
    if p.warning:
        say(f"vastprobe: warning: {p.warning}")
    from vastprobe.render.jsonable import ndjson_line, summary_dict

    t0 = time.monotonic()
    progress = None
    if sys.stderr.isatty():
        from vastprobe.render.progress import progress_for

        progress = progress_for(len(entries))  # 0/N at once, then redrawn with the time and hosts in flight

    def on_report(r) -> None:  # type: ignore[no-untyped-def]
        if chosen is OutputFormat.ndjson and fleet.group_by is None:  # outliers need the whole group first
            sys.stdout.write(ndjson_line(r, snapshot))
            sys.stdout.flush()
        if progress is not None:
            progress.finished(r.status, probed=r.status != "skipped")

    try:
        # the snapshots are kept for the end only when something there prints them or compares hosts by them
        snapshots = fleet.group_by is not None or (not brief and (chosen is OutputFormat.json or (
            output is not None and chosen is not OutputFormat.table)))  # fmt: skip
        reports, interrupted = _run_entries(
            entries, options, p.concurrency, on_report, progress.started if progress is not None else None, snapshots
        )
    finally:
        if progress is not None:
            progress.stop()
    elapsed = time.monotonic() - t0
    reports = fleet.finish(reports, complete=not interrupted)
    code = _interrupted_code() if interrupted else fleet.exit_code(exit_code(reports))
    summary = summary_dict(reports, code, unfinished=len(entries) - len(reports), memory=fleet.memory)
    if chosen is OutputFormat.table:
        from vastprobe.render.summary import render_summary

        render_summary(reports, sys.stdout, memory=fleet.memory, elapsed=elapsed, verbose=verbose > 0)
    elif chosen is OutputFormat.json:
        sys.stdout.write(_json_text(reports, chosen, snapshot, summary, indent=1 if sys.stdout.isatty() else None))
    elif fleet.group_by is not None:  # NDJSON held back until the outliers are known
        sys.stdout.write(_document(reports, chosen, summary, snapshot))
    else:
        from vastprobe.render.jsonable import ndjson_summary

        sys.stdout.write(ndjson_summary(summary))  # the hosts' lines went out as they finished
    sys.stdout.flush()
    if interrupted:
        _say_interrupted(reports, entries)
        if output is not None or prom is not None:
            say("vastprobe: --output/--prom not written: the sweep did not finish")
        raise typer.Exit(EXIT_INTERRUPTED)
    from vastprobe.fileio import write_atomic

    if output is not None:
        write_atomic(output.expanduser(), _document(reports, chosen, summary, snapshot, elapsed, fleet.memory))
    if prom is not None:
        from vastprobe.render.prometheus import render_prometheus

        write_atomic(prom.expanduser(), render_prometheus(reports, memory=fleet.memory, shard=fleet.shard))
    raise typer.Exit(code)


@app.command(cls=Command, context_settings=CONTEXT, epilog=EXIT_EPILOG)
def collect(
    target: Annotated[
        str,
        typer.Argument(metavar="TARGET", help="`local`, or \\[user@]host\\[:port].", autocompletion=_complete_targets),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            callback=checks.output_file,
            rich_help_panel=P_OUTPUT,
            help="Capture file to write ('-' for stdout; written atomically).",
        ),
    ],
    sample: SampleOpt = 1.0,
    pid: PidOpt = None,
    match: MatchOpt = None,
    log: LogOpt = None,
    artifacts: ArtOpt = None,
    py_spy: PySpyOpt = False,
    timeout: TimeoutOpt = 60.0,
    connect_timeout: ConnectTimeoutOpt = None,
    port: PortOpt = None,
    user: UserOpt = None,
    identity: IdentityOpt = None,
    ssh_config: ConfigOpt = None,
    config_options: LongOptionOpt = None,
    jump: JumpOpt = None,
    known_hosts: KnownHostsOpt = None,
    host_key_check: HostKeyOpt = None,
    verbose: VerboseOpt = 0,
) -> None:
    """Probe and save the raw snapshot (no rules), for `analyze` later or elsewhere.

    --pid/--match are stored in the capture as the scope `analyze` uses unless told otherwise.

    [b]Examples[/b]
      vastprobe collect local --pid 1234 -o snap.json
      vastprobe collect root@203.0.113.7:41234 -i ~/.ssh/vast -o - | gzip > snap.json.gz
    """
    from dataclasses import replace

    from vastprobe.capture import capture_to_dict
    from vastprobe.pipeline import collect_target, parse_capture
    from vastprobe.render.jsonable import dumps

    options = _options(sample=sample, pid=pid, match=match, log=log, artifacts=artifacts, timeout=timeout,
                       py_spy=py_spy)  # fmt: skip
    ssh = _ssh_options([target], port=port, user=user, identity=identity, ssh_config=ssh_config,
                       known_hosts=known_hosts, host_key_check=host_key_check, connect_timeout=connect_timeout,
                       timeout=timeout, config_options=config_options, jump=jump, verbose=verbose)  # fmt: skip
    try:
        cap = collect_target(target, replace(options, ssh=ssh))
    except KeyboardInterrupt:
        say("\nvastprobe: interrupted: nothing was collected or written")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    cap = replace(cap, pids=options.pids, matches=options.matches)
    if cap.status != "ok":
        say(f"vastprobe: {cap.error or cap.status}")
    snap = parse_capture(cap)[0] if cap.status == "ok" else None
    text = dumps(capture_to_dict(cap, snap), indent=1) + "\n"
    if str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        from vastprobe.fileio import write_atomic

        written = write_atomic(output.expanduser(), text)
        say(f"saved {target} ({len(cap.output)} bytes of probe output) to {written}")
    raise typer.Exit(EXIT_OK if cap.status == "ok" else EXIT_UNPROBED)


@app.command(cls=Command, context_settings=CONTEXT, epilog=EXIT_EPILOG)
def analyze(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE...", help="Capture files written by `collect` ('-' for stdin).")
    ],
    pid: PidOpt = None,
    match: MatchOpt = None,
    stale_after: StaleOpt = 300.0,
    expect_gpu: GpuOpt = None,
    expect_gpus: GpusOpt = None,
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
    verbose: ReportVerboseOpt = 0,
    brief: BriefOpt = False,
    snapshot: SnapshotOpt = False,
) -> None:
    """Run the rules on saved captures, offline.

    The scope is the capture's own (`collect --pid/--match`) unless --pid/--match are given here.
    A capture whose raw bytes do not match their recorded sha256 is reported as an error, not analysed.

    [b]Examples[/b]
      vastprobe analyze snap.json
      vastprobe analyze snap.json --pid 4242 --format json
      gunzip -c snap.json.gz | vastprobe analyze -
    """
    from dataclasses import replace

    from vastprobe.capture import CaptureError, load_captures
    from vastprobe.pipeline import report_from_capture

    if sum(str(f) == "-" for f in files) > 1:
        usage_error("stdin ('-') can be read once")
    chosen = _report_format(fmt, json_flag, brief, snapshot)
    base = _options(
        sample=1.0, pid=pid, match=match, stale_after=stale_after, expect_gpu=expect_gpu, expect_gpus=expect_gpus
    )
    caps = []
    for f in files:
        try:
            caps += load_captures(f)
        except CaptureError as exc:
            usage_error(str(exc))
    reports = []
    for cap in caps:
        scope_pids, scope_matches = (base.pids, base.matches) if (pid or match) else (cap.pids, cap.matches)
        try:
            checks.regexes(list(scope_matches))
        except typer.BadParameter as exc:
            usage_error(f"capture of {cap.target}: scope {exc.format_message()}")
        opts = replace(base, params=cap.params, pids=scope_pids, matches=scope_matches)
        reports.append(report_from_capture(cap, opts))
    code = exit_code(reports)
    _emit(reports, chosen, code, verbose, brief, snapshot)
    raise typer.Exit(code)


@app.command(cls=Command, context_settings=CONTEXT, epilog=EXIT_EPILOG)
def rules(
    name: Annotated[
        Optional[str],
        typer.Argument(metavar="[RULE]", help="A slug or code: explain that rule.", autocompletion=_complete_rules),
    ] = None,
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
) -> None:
    """The rule catalogue: slug, code, severity, one line each; with a name, that rule's page (docs/rules).

    [b]Examples[/b]
      vastprobe rules
      vastprobe rules VP102
      vastprobe rules --format json
    """
    from vastprobe.rules import RULES, find_rule

    if name is not None:
        rule = find_rule(name)
        if rule is None:
            usage_error(f"no rule {name!r}; `vastprobe rules` lists them")
        page = _rule_page(rule.meta.slug)
        if page is None:  # an installation without its docs: the module's own words
            doc = sys.modules[rule.check.__module__].__doc__ or ""
            m = rule.meta
            page = f"{m.code} {m.slug} ({m.severity}): {m.summary}\n\n{doc.strip()}\n"
        sys.stdout.write(page)
        return

    rows = [
        {"rule": r.meta.slug, "code": r.meta.code, "severity": r.meta.severity, "summary": r.meta.summary}
        for r in RULES
    ]
    chosen = _format(fmt, json_flag)
    if chosen is OutputFormat.table:
        for row in rows:
            typer.echo(f"{row['code']}  {row['rule']:<20} {row['severity']:<9} {row['summary']}")
    elif chosen is OutputFormat.ndjson:
        for row in rows:
            typer.echo(json.dumps(row))
    else:
        typer.echo(json.dumps(rows, indent=1))


def _rule_page(slug: str) -> str | None:
    """docs/rules/<slug>.md, as shipped in the package (vastprobe/ruledocs links to docs/rules)."""
    from importlib.resources import files

    try:
        return (files("vastprobe") / "ruledocs" / f"{slug}.md").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None


@app.command("probe-script", cls=Command, context_settings=CONTEXT, epilog=EXIT_EPILOG)
def probe_script(
    sample: SampleOpt = 1.0,
    log: LogOpt = None,
    artifacts: ArtOpt = None,
    py_spy: PySpyOpt = False,
) -> None:
    """Print the exact script that runs on targets, for audit.

    [b]Examples[/b]
      vastprobe probe-script
      vastprobe probe-script --log /workspace/run.log | less
    """
    options = _options(sample=sample, log=log, artifacts=artifacts, py_spy=py_spy)
    from vastprobe.probe.render import render_script

    sys.stdout.write(render_script(options.params))


# ---- fleet memory: history, --group-by, --shard (docs/history.md) --------------------------------
# Self-contained: the options with their checks, the object a command asks, and `history`.

P_HISTORY = "History and fleet"


DEFAULT_KEEP = "30d"  # the default of --keep (written out in each command)


def _keep_check(value: str) -> str:
    if value == DEFAULT_KEEP:  # the default needs no check, and `diagnose` without --history imports no history
        return value
    from vastprobe.history.timespec import TimeSpecError, parse_duration

    try:
        parse_duration(value)
    except TimeSpecError as exc:
        raise typer.BadParameter(str(exc)) from exc
    return value


def _shard_check(value: Optional[str]) -> Optional[str]:
    if value is not None and value.strip() != "auto":  # auto: read from the environment once all options are in
        from vastprobe.history.shard import ShardError, parse_shard

        try:
            parse_shard(value)
        except ShardError as exc:
            raise typer.BadParameter(str(exc)) from exc
    return value


def _group_by_check(value: Optional[str]) -> Optional[str]:
    if value is not None:
        from vastprobe.analysis.outliers import GroupByError, group_key

        try:
            group_key(value)
        except GroupByError as exc:
            raise typer.BadParameter(str(exc)) from exc
    return value


def _history_check(value: Optional[str]) -> Optional[str]:
    if value is not None:
        problem = _history_url_problem(value)
        if problem:
            raise typer.BadParameter(problem)
    return value


def _history_url_problem(value: str) -> Optional[str]:
    """What is wrong with a database URL that no server need be asked (its syntax, the driver)."""
    from vastprobe.history.engine import display, is_url, reason

    if not is_url(value):
        return None if value.strip() else "an empty path"
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return f"{display(value)}: a PostgreSQL history needs psycopg 3: pip install 'vastprobe[postgres]'"
    try:
        conninfo_to_dict(value.strip())
    except Exception as exc:  # psycopg.ProgrammingError: libpq could not read it
        from vastprobe.history.engine import url_secrets

        return f"{display(value)}: not a usable PostgreSQL URL: {reason(exc, url_secrets(value))}"
    return None


HistoryOpt = Annotated[
    Optional[str],
    typer.Option("--history", metavar="PATH|URL", callback=_history_check, rich_help_panel=P_HISTORY,
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
    typer.Option("--keep", metavar="DURATION", callback=_keep_check, rich_help_panel=P_HISTORY,
                 help="Prune history older than this as it writes (30d, 12h, 90m, seconds)."),
]  # fmt: skip
GroupByOpt = Annotated[
    Optional[str],
    typer.Option("--group-by", metavar="label|REGEX", callback=_group_by_check, rich_help_panel=P_HISTORY,
                 help="Compare the hosts of each job: 'label' (vast.ai label) or a regex over the target whose "
                      "first group names the job; odd hosts get outlier_of."),
]  # fmt: skip
ShardOpt = Annotated[
    Optional[str],
    typer.Option("--shard", metavar="K/N|auto", callback=_shard_check, rich_help_panel=P_HISTORY,
                 help="Sweep only shard K of N of the inventory (a stable hash of each target); 'auto': K and N "
                      "from a Kubernetes Indexed Job or a Slurm array (docs/deploy.md)."),
]  # fmt: skip
ShardsOpt = Annotated[
    Optional[int],
    typer.Option("--shards", metavar="N", min=1, max=9999, rich_help_panel=P_HISTORY,
                 help="With --shard auto in a Kubernetes Indexed Job: the shard count, the Job's completions "
                      "(default: $VASTPROBE_SHARDS)."),
]  # fmt: skip


def _resolve_shard(shard: Optional[str], shards: Optional[int]) -> Optional[tuple[int, int]]:
    """K and N from --shard K/N, or from the engine's environment for --shard auto: a usage error
    (exit 2, before any host is contacted) when they cannot be known."""
    import os

    from vastprobe.history.shard import SHARDS_ENV, ShardError, parse_shard, shard_from_environment

    if shard is None or shard.strip() != "auto":
        if shards is not None:
            usage_error("--shards N goes with --shard auto (with --shard K/N, N is already given)")
        return parse_shard(shard) if shard is not None else None
    if shards is None and os.environ.get(SHARDS_ENV, "").strip():
        raw = os.environ[SHARDS_ENV].strip()
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 9999:
            usage_error(f"--shard auto: {SHARDS_ENV}={raw[:40]!r} is not a shard count from 1 to 9999")
        shards = int(raw)
    try:
        k, n, _ = shard_from_environment(os.environ, shards)
    except ShardError as exc:
        usage_error(str(exc))
    return k, n


def _history_location(text: str):  # type: ignore[no-untyped-def]
    from vastprobe.history.store import location_of

    return location_of(text)


def _default_history():  # type: ignore[no-untyped-def]
    """$VASTPROBE_HISTORY (checked as --history is), else the per-user SQLite file."""
    import os

    from vastprobe.history.store import HISTORY_ENV, default_location

    env = os.environ.get(HISTORY_ENV, "")
    problem = _history_url_problem(env) if env.strip() else None
    if problem:
        usage_error(f"{HISTORY_ENV}: {problem}")
    return default_location()


GROUP_WINDOW = 3600.0  # --group-by counts other shards' hosts whose features are at most this old


def _labels_of(text: Optional[str]) -> dict:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


class _FleetMemory:
    """One run's history, group and shard settings (checked while parsing), and what it asks of them."""

    def __init__(
        self,
        history,  # type: ignore[no-untyped-def]  # a Path or a database URL (store.Location)
        keep: str,
        group_by: Optional[str] = None,
        shard: Optional[str] = None,
        shards: Optional[int] = None,
    ) -> None:
        import time

        from vastprobe.history.timespec import parse_duration

        self.started_at = time.time()
        self.history = history
        self.failed = None  # the history error of a shared database: exit 2 once everything is written
        self.keep = parse_duration(keep)
        self.shard = _resolve_shard(shard, shards)
        self.group_by = group_by
        self.memory: dict = {}

    def select(self, entries: list) -> list:
        if self.shard is None:
            return entries
        from vastprobe.history.shard import in_shard

        return in_shard(entries, [e.target for e in entries], *self.shard)

    def finish(self, reports: list, kind: str = "sweep", complete: bool = True) -> list:
        """The run recorded, outliers marked (with a history, against the whole fleet's groups: the
        hosts other shards recorded within GROUP_WINDOW count in their groups); a history failure
        is one line."""
        feats = texts = None
        if self.group_by is not None:
            from vastprobe.analysis.outliers import features, features_text

            feats = {r.target: features(r) for r in reports if r.status != "skipped"}
            texts = {t: features_text(f) for t, f in feats.items()}
        from vastprobe.sweep import remember

        shard = f"{self.shard[0]}/{self.shard[1]}" if self.shard else None
        errors: list = []
        peers: list = []
        memory, warning = remember(reports, self.history, started_at=self.started_at, keep=self.keep, kind=kind,
                                   shard=shard, complete=complete, on_error=errors, features=texts,
                                   peers_since=self.started_at - GROUP_WINDOW if feats is not None else None,
                                   peers_out=peers)  # fmt: skip
        if self.group_by is not None:
            from vastprobe.analysis.outliers import Peer, features_from_text, mark_outliers

            others = []
            for target, labels, text in peers:
                fs = features_from_text(text)
                if fs is not None and target not in (feats or {}):
                    others.append(Peer(target, _labels_of(labels), fs))
            reports = mark_outliers(reports, self.group_by, others, feats)
        self.memory = dict(memory)
        if errors and errors[0].shared:  # a shared history the run could not write: a configuration error
            self.failed = errors[0]
            say(f"vastprobe: error: {warning}")
        elif warning:
            say(f"vastprobe: warning: {warning}")
        return reports

    def exit_code(self, code: int) -> int:
        """A shared (PostgreSQL) history that could not be written fails the run with exit 2, after the
        findings were printed and written: every shard's memory depends on it, so it must not go unseen."""
        if self.failed is not None and code != EXIT_INTERRUPTED:
            return EXIT_USAGE
        return code


ExportOutputOpt = Annotated[
    Optional[Path],
    typer.Option("-o", "--output", metavar="FILE", rich_help_panel=P_HISTORY,
                 help="history export: write the dump here (default: stdout)."),
]  # fmt: skip


@app.command("history", cls=Command, context_settings=CONTEXT, epilog=EXIT_EPILOG)
def history_command(
    targets: Annotated[
        Optional[list[str]],
        typer.Argument(
            metavar="[TARGET|NODESET...]",
            help="Targets as swept, host names, or ranges like gpu\\[01-04]; all when none.",
            autocompletion=_complete_targets,
        ),
    ] = None,
    history: HistoryOpt = None,
    since: Annotated[
        str,
        typer.Option(
            "--since",
            metavar="WHEN",
            rich_help_panel=P_HISTORY,
            help="Window for transitions and flapping: back from now (24h, 7d) or a time (2026-12-02T14:00).",
        ),
    ] = "24h",
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
    output: ExportOutputOpt = None,
) -> None:
    """What the recorded sweeps say per host: the state and since when, the last time healthy,
    transitions and flapping. Exit 2 when the history is missing or unreadable.
    `history export` writes the whole history as NDJSON; `history import FILE|-` merges such a dump
    into --history (an SQLite file into a shared PostgreSQL database: docs/deploy.md).

    [b]Examples[/b]
      vastprobe history
      vastprobe history 'gpu\\[01-04]' --since 7d
      vastprobe history --history postgresql:///fleet?service=vastprobe --format json
      vastprobe history export --history old.sqlite > dump.ndjson
      vastprobe history import dump.ndjson --history postgresql:///fleet
    """
    import time

    from vastprobe.history.queries import host_histories
    from vastprobe.history.render import history_document, history_lines
    from vastprobe.history.store import HistoryError, open_history
    from vastprobe.history.timespec import TimeSpecError, parse_since
    from vastprobe.render.jsonable import dumps
    from vastprobe.targets import InventoryError, expand_nodeset

    location = _history_location(history) if history is not None else _default_history()
    if targets and targets[0] in ("export", "import"):  # a host named so: user@export, export:22
        _history_transfer(list(targets), location, output)
    if output is not None:
        usage_error("-o/--output goes with history export")
    now = time.time()
    try:
        start = parse_since(since, now)
    except TimeSpecError as exc:
        usage_error(f"--since: {exc}")
    try:
        words = [t for text in targets or () for t in expand_nodeset(text)]
    except InventoryError as exc:
        usage_error(str(exc))
    from vastprobe.history.engine import display

    path = display(location)  # as it may be printed: a URL without its password
    try:
        con = open_history(location, readonly=True)
        try:
            found, missing = host_histories(con, words, start)
        finally:
            con.close()
    except HistoryError as exc:
        say(f"vastprobe history: {exc} (see vastprobe history -h)")
        raise typer.Exit(EXIT_USAGE) from exc
    if missing:
        names = f"{', '.join(missing[:20])}{' ...' if len(missing) > 20 else ''}"
        if not found:  # a usage error, worded as every other
            say(f"vastprobe history: no history for {names} in {path} (see vastprobe history -h)")
            raise typer.Exit(EXIT_USAGE)
        say(f"vastprobe history: no history for {names} in {path}")
    chosen = _format(fmt, json_flag)
    if chosen is OutputFormat.table:
        sys.stdout.write("".join(line + "\n" for line in history_lines(found, start, now)))
    elif chosen is OutputFormat.ndjson:
        doc = history_document(found, start, now, missing)
        sys.stdout.write("".join(dumps(h) + "\n" for h in doc["hosts"]))
    else:
        doc = history_document(found, start, now, missing)
        sys.stdout.write(dumps(doc, indent=1 if sys.stdout.isatty() else None) + "\n")
    raise typer.Exit(EXIT_OK)


def _history_transfer(words: list[str], location, output: Optional[Path]) -> NoReturn:  # type: ignore[no-untyped-def]
    """`history export [-o FILE]` and `history import FILE|-`: exit 0, or 2 with one line."""
    import time

    from vastprobe.history.engine import display
    from vastprobe.history.store import HistoryError, _errors, open_history
    from vastprobe.history.transfer import TransferError, export_lines, import_lines, read_lines

    verb, args = words[0], words[1:]
    where = display(location)
    if verb == "export":
        if args:
            usage_error(f"history export takes no targets ({args[0]!r}); it writes the whole history")
        try:
            db = open_history(location, readonly=True)
            try:
                with _errors(location, "nothing was exported"):
                    lines = "".join(line + "\n" for line in export_lines(db, where, time.time()))
            finally:
                db.close()
        except HistoryError as exc:
            say(f"vastprobe history: {exc} (see vastprobe history -h)")
            raise typer.Exit(EXIT_USAGE) from exc
        if output is None:
            sys.stdout.write(lines)
        else:
            from vastprobe.fileio import write_atomic

            write_atomic(output.expanduser(), lines)
        raise typer.Exit(EXIT_OK)
    if len(args) != 1:
        usage_error("history import takes one dump: a file from history export, or - for stdin")
    if output is not None:
        usage_error("-o/--output goes with history export")
    try:
        source = sys.stdin if args[0] == "-" else open(args[0], encoding="utf-8", errors="strict")  # noqa: SIM115
    except OSError as exc:
        usage_error(f"{args[0]}: {exc.strerror or exc}")
    try:
        import itertools

        from vastprobe.history.store import BUSY_TIMEOUT, PG_WRITE_WAIT
        from vastprobe.history.transfer import check_header

        dump = read_lines(source)
        first = next(dump, None)
        check_header(first)  # a file that is no dump opens (or creates) no history
        db = open_history(location)
        try:
            with _errors(location, "nothing was imported"):
                rows = itertools.chain([first or ""], dump)
                counts, skipped = import_lines(db, rows, max(BUSY_TIMEOUT, PG_WRITE_WAIT))
        finally:
            db.close()
    except (HistoryError, TransferError, UnicodeDecodeError) as exc:
        name = "stdin" if args[0] == "-" else args[0]
        why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
        say(f"vastprobe history: import {name}: {why}; nothing was imported")
        raise typer.Exit(EXIT_USAGE) from exc
    finally:
        if source is not sys.stdin:
            source.close()
    note = f"; {len(skipped)} host(s) already in it kept their record: {', '.join(skipped[:8])}" if skipped else ""
    say(f"vastprobe history: imported {counts['hosts']} hosts, {counts['sweeps']} sweeps, "
        f"{counts['observations']} observations into {where}{note}")  # fmt: skip
    raise typer.Exit(EXIT_OK)


# ---- the process: one line per failure, documented exit codes ---------------------------------


def _click_exceptions():  # type: ignore[no-untyped-def]
    try:
        from typer._click import exceptions  # typer >= 0.26 vendors click
    except ImportError:  # pragma: no cover - older typer depends on click
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


_COMMANDS = ("diagnose", "sweep", "collect", "analyze", "rules", "probe-script", "history")


def _command_name(args: list[str]) -> str:
    return next((a for a in args if a in _COMMANDS), "")


def _completion_shell_named(args: list[str]) -> list[str]:
    """`--show-completion` / `--install-completion` with no shell after them mean this shell ("auto"):
    typer's options cannot leave their value out, so it is filled in here."""
    out = list(args)
    for i in range(len(out) - 1, -1, -1):
        if out[i] in ("--show-completion", "--install-completion") and "--" not in out[:i]:
            after = out[i + 1] if i + 1 < len(out) else None
            if after is None or after.startswith("-") or after in _COMMANDS:
                out.insert(i + 1, "auto")
    return out


def _click_group(args: list[str]) -> typer.core.TyperGroup:
    """The click group for this command line. typer builds every command's click object (options,
    help, types) on each start: ~15 ms for seven commands, against ~5 ms for the one that runs.
    The whole group is built when no command is named (`vastprobe`, `-h`, a misspelt name, so
    that the help and "No such command" list them all)."""
    import copy

    name = next((a for a in args if not a.startswith("-")), None)
    only = [
        c
        for c in app.registered_commands
        if c.callback and typer.main.get_command_name(c.name or c.callback.__name__) == name
    ]
    if not only:
        return typer.main.get_command(app)  # type: ignore[return-value]
    narrowed = copy.copy(app)
    narrowed.registered_commands = only
    return typer.main.get_command(narrowed)  # type: ignore[return-value]


def run(args: list[str], debug: bool = False) -> int:
    """Run the CLI on `args` and return the exit code; never raises (but SystemExit from --help)."""
    import os

    instruction = os.environ.get("_VASTPROBE_COMPLETE")
    if instruction:  # a shell's completion script asks (vastprobe/completion.py)
        from vastprobe.completion import respond

        return respond(_click_group([]), instruction)
    args = _completion_shell_named(args)
    exc_mod = _click_exceptions()
    prog = ("vastprobe " + _command_name(args)).strip()
    try:
        rv = _click_group(args).main(args=args, prog_name="vastprobe", standalone_mode=False)
        return rv if isinstance(rv, int) else EXIT_OK
    except exc_mod.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(exc.format_message() + "\n")
            return EXIT_USAGE
        say(f"{prog}: {exc.format_message()} (see {prog} -h)")
        return EXIT_USAGE
    except exc_mod.ClickException as exc:  # a file option click itself could not open
        say(f"{prog}: {exc.format_message()}")
        return EXIT_USAGE
    except (KeyboardInterrupt, getattr(exc_mod, "Abort", typer.Abort), typer.Abort):
        say("\nvastprobe: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # whoever read stdout went away (`| head`): stop quietly, as a SIGPIPE'd tool would
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), sys.stdout.fileno())
        return EXIT_PIPE
    except SystemExit as exc:  # rich and click end a write to a closed pipe with SystemExit(1)
        code = exc.code if isinstance(exc.code, int) else 0
        return EXIT_PIPE if code == 1 else code
    except Exception as exc:
        if debug:
            import traceback

            say(traceback.format_exc().rstrip("\n"))  # escaped too: an exception may quote remote text
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        hint = "" if debug else " (run with --debug or VASTPROBE_DEBUG=1 for the traceback)"
        say(f"vastprobe: internal error: {type(exc).__name__}: {text}{hint}")
        return EXIT_FAILED


_terminated: list[bool] = []


def _on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM stops vastprobe as Ctrl-C does: what finished is printed, recorded and reported."""
    import signal

    _terminated.append(True)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started under nohup: no Ctrl-C to borrow
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)  # asyncio's Ctrl-C handling, wherever the run is


def main() -> None:
    import contextlib
    import gc
    import os
    import signal

    signal.signal(signal.SIGTERM, _on_sigterm)

    # A short-lived CLI that allocates many small objects per host: collect young objects far less
    # often (cyclic garbage stays bounded: each host's report is kept anyway).
    gc.set_threshold(50_000, 20, 20)
    args = sys.argv[1:]
    end = args.index("--") if "--" in args else len(args)
    debug = os.environ.get("VASTPROBE_DEBUG", "") not in ("", "0")
    if "--debug" in args[:end]:
        debug = True
        args = [a for i, a in enumerate(args) if not (a == "--debug" and i < end)]
    code = run(args, debug)
    if _terminated and code == EXIT_INTERRUPTED:
        code = EXIT_TERMINATED
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        code = EXIT_PIPE if code == EXIT_OK else code
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    # Everything vastprobe writes is flushed, closed or renamed into place by now (history through
    # its context manager, files through write_atomic). Interpreter teardown would free every
    # object of every report one at a time: ~0.1 s of CPU after a 20-host sweep, more for bigger
    # fleets; and leftover analysis threads past their budget end with the process.
    os._exit(code)


if __name__ == "__main__":
    main()
