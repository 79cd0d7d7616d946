"""The command line: options -> targets -> pipeline -> renderer -> exit code. Nothing else."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Optional

import typer

from vastprobe import __version__

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Find out why a GPU host went quiet: one read-only probe per host, classified with evidence.",
)

EXIT_OK, EXIT_STALLED, EXIT_USAGE, EXIT_UNPROBED = 0, 1, 2, 3


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    ndjson = "ndjson"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vastprobe {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    pass


def _format(fmt: Optional[OutputFormat], json_flag: bool) -> OutputFormat:
    if json_flag:
        return OutputFormat.json
    if fmt is not None:
        return fmt
    return OutputFormat.table if sys.stdout.isatty() else OutputFormat.json


def exit_code(reports: list) -> int:
    if any(r.verdict == "stalled" for r in reports):
        return EXIT_STALLED
    if any(r.status not in ("ok", "skipped") for r in reports):
        return EXIT_UNPROBED
    return EXIT_OK


SampleOpt = Annotated[
    float, typer.Option("--sample", min=0, max=600, help="Seconds between the probe's two samples (0 = one sample).")
]
PidOpt = Annotated[Optional[list[int]], typer.Option("--pid", help="Root process of interest (repeatable).")]
MatchOpt = Annotated[Optional[list[str]], typer.Option("--match", help="Regex over command lines (repeatable).")]
LogOpt = Annotated[Optional[list[str]], typer.Option("--log", help="Log file the workload keeps writing (repeatable).")]
ArtOpt = Annotated[
    Optional[list[str]], typer.Option("--artifacts", help="Remote glob to list (repeatable; default /tmp/*).")
]
StaleOpt = Annotated[float, typer.Option("--stale-after", min=0, help="A log not written for this long is stale.")]
GpuOpt = Annotated[
    Optional[bool],
    typer.Option("--expect-gpu/--no-expect-gpu", help="Whether the workload should use GPUs (default: auto)."),
]
FormatOpt = Annotated[Optional[OutputFormat], typer.Option("--format", help="table on a terminal, json otherwise.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Short for --format json.")]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", min=1, help="Bound on one host's whole probe, connect included.")
]
ConnectTimeoutOpt = Annotated[
    float, typer.Option("--connect-timeout", min=1, help="TCP connect + SSH handshake + auth bound.")
]
PortOpt = Annotated[Optional[int], typer.Option("-p", "--port", help="SSH port.")]
UserOpt = Annotated[Optional[str], typer.Option("-l", "--user", help="SSH user.")]
IdentityOpt = Annotated[Optional[list[Path]], typer.Option("-i", "--identity", help="SSH private key (repeatable).")]
ConfigOpt = Annotated[Optional[Path], typer.Option("-F", "--ssh-config", help="ssh_config file.")]
KnownHostsOpt = Annotated[
    Optional[Path], typer.Option("--known-hosts", help="known_hosts file to verify host keys against.")
]
HostKeyOpt = Annotated[str, typer.Option("--host-key-check", help="strict | accept-new | off")]


def _options(
    sample: float,
    pid: Optional[list[int]],
    match: Optional[list[str]],
    log: Optional[list[str]],
    artifacts: Optional[list[str]],
    stale_after: float,
    expect_gpu: Optional[bool],
    timeout: float,
):  # -> DiagnoseOptions
    import re

    from vastprobe.options import RuleOptions
    from vastprobe.pipeline import DiagnoseOptions
    from vastprobe.probe.render import DEFAULT_ARTIFACTS, ProbeParams

    for m in match or ():
        try:
            re.compile(m)
        except re.error as exc:
            raise typer.BadParameter(f"--match {m!r}: {exc}") from exc
    deadline = max(10, int(timeout) + 5)
    params = ProbeParams(
        sample=sample,
        logs=tuple(log or ()),
        artifacts=tuple(artifacts or DEFAULT_ARTIFACTS),
        deadline=deadline,
    )
    return DiagnoseOptions(
        params=params,
        timeout=timeout,
        pids=tuple(pid or ()),
        matches=tuple(match or ()),
        rules=RuleOptions(stale_after=stale_after, expect_gpu=expect_gpu),
    )


def _emit(reports: list, fmt: OutputFormat) -> None:
    if fmt is OutputFormat.table:
        from vastprobe.render.table import render_reports

        render_reports(reports)
        return
    from vastprobe.render.jsonable import dumps, host_report_dict, report_document

    if fmt is OutputFormat.ndjson:
        for r in reports:
            sys.stdout.write(dumps(host_report_dict(r)) + "\n")
    else:
        indent = 1 if sys.stdout.isatty() else None  # compact for pipes: smaller and faster
        sys.stdout.write(dumps(report_document(reports), indent=indent) + "\n")
    sys.stdout.flush()


def _ssh_options(
    port: Optional[int],
    user: Optional[str],
    identity: Optional[list[Path]],
    ssh_config: Optional[Path],
    known_hosts: Optional[Path],
    host_key_check: str,
    connect_timeout: float,
    timeout: float,
    targets: list[str],
):  # -> SshOptions, or None when every target is local
    if host_key_check not in ("strict", "accept-new", "off"):
        raise typer.BadParameter(f"--host-key-check must be strict, accept-new or off, not {host_key_check!r}")
    if all(t == "local" for t in targets):
        return None
    from vastprobe.transport.ssh import SshOptions, TargetError, parse_target

    for t in targets:
        if t != "local":
            try:
                parse_target(t)
            except TargetError as exc:
                raise typer.BadParameter(str(exc)) from exc
    return SshOptions(
        port=port,
        user=user,
        identities=tuple(str(p.expanduser()) for p in identity or ()),
        ssh_config=str(ssh_config) if ssh_config else None,
        known_hosts=str(known_hosts) if known_hosts else None,
        host_key_check=host_key_check,  # type: ignore[arg-type]
        connect_timeout=min(connect_timeout, timeout),
        timeout=timeout,
    )


@app.command()
def diagnose(
    targets: Annotated[list[str], typer.Argument(help="`local`, or [user@]host[:port].")],
    sample: SampleOpt = 1.0,
    pid: PidOpt = None,
    match: MatchOpt = None,
    log: LogOpt = None,
    artifacts: ArtOpt = None,
    stale_after: StaleOpt = 300.0,
    expect_gpu: GpuOpt = None,
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
    timeout: TimeoutOpt = 60.0,
    connect_timeout: ConnectTimeoutOpt = 10.0,
    port: PortOpt = None,
    user: UserOpt = None,
    identity: IdentityOpt = None,
    ssh_config: ConfigOpt = None,
    known_hosts: KnownHostsOpt = None,
    host_key_check: HostKeyOpt = "strict",
    history: HistoryOpt = None,
    keep: KeepOpt = "30d",
) -> None:
    """Probe each target once, classify its stall, print a report."""
    import time
    from dataclasses import replace

    from vastprobe.pipeline import diagnose_targets
    from vastprobe.targets import InventoryError, expand_ranges

    try:
        targets = [t for text in targets for t in expand_ranges(text)]  # gpu[01-04]
    except InventoryError as exc:
        raise typer.BadParameter(str(exc)) from exc
    options = _options(sample, pid, match, log, artifacts, stale_after, expect_gpu, timeout)
    ssh = _ssh_options(port, user, identity, ssh_config, known_hosts, host_key_check, connect_timeout, timeout, targets)
    fleet = _FleetMemory(history.expanduser(), keep) if history is not None else None
    started_at = time.time()
    reports = diagnose_targets(targets, replace(options, ssh=ssh))
    if fleet is not None:
        reports = fleet.finish(reports, started_at, kind="diagnose")
    _emit(reports, _format(fmt, json_flag))
    raise typer.Exit(exit_code(reports))


def _read_inventory(inventory: str) -> list:
    from vastprobe.targets import InventoryError, parse_inventory, parse_plain

    try:
        if inventory == "-":
            return parse_inventory(sys.stdin.read())
        path = Path(inventory)
        if path.exists():
            return parse_inventory(path.read_text(encoding="utf-8"))
        return parse_plain(inventory.replace(",", " ") if "[" not in inventory else inventory)
    except (InventoryError, OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"{inventory}: {exc}") from exc


@app.command()
def sweep(
    inventory: Annotated[
        str, typer.Argument(help="Inventory file ('-' for stdin), or targets/ranges like 'gpu[01-16]'.")
    ],
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, max=4096, help="Hosts probed at once.")] = 32,
    output: Annotated[Optional[Path], typer.Option("--output", help="Also write the report here (atomically).")] = None,
    prom: Annotated[
        Optional[Path], typer.Option("--prom", help="Prometheus textfile-collector file to write (atomically).")
    ] = None,
    sample: SampleOpt = 1.0,
    pid: PidOpt = None,
    match: MatchOpt = None,
    log: LogOpt = None,
    artifacts: ArtOpt = None,
    stale_after: StaleOpt = 300.0,
    expect_gpu: GpuOpt = None,
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
    timeout: TimeoutOpt = 60.0,
    connect_timeout: ConnectTimeoutOpt = 10.0,
    port: PortOpt = None,
    user: UserOpt = None,
    identity: IdentityOpt = None,
    ssh_config: ConfigOpt = None,
    known_hosts: KnownHostsOpt = None,
    host_key_check: HostKeyOpt = "strict",
    history: HistoryOpt = None,
    no_history: NoHistoryOpt = False,
    keep: KeepOpt = "30d",
    group_by: GroupByOpt = None,
    shard: ShardOpt = None,
) -> None:
    """The same diagnosis over a fleet: bounded concurrency, results streamed as hosts finish."""
    import asyncio
    import io
    import time
    from dataclasses import replace

    from vastprobe.sweep import plan, progress_printer
    from vastprobe.sweep import sweep as run_sweep

    entries = _read_inventory(inventory)
    if not entries:
        raise typer.BadParameter(f"{inventory}: no targets")
    fleet = _FleetMemory(_sweep_history(history, no_history), keep, group_by, shard)
    entries = fleet.select(entries)
    options = _options(sample, pid, match, log, artifacts, stale_after, expect_gpu, timeout)
    probed = [e.target for e in entries if e.skip is None]
    ssh = _ssh_options(
        port, user, identity, ssh_config, known_hosts, host_key_check, connect_timeout, timeout, probed or ["local"]
    )
    options = replace(options, ssh=ssh)
    p = plan(len(probed), concurrency, timeout)
    if p.warning:
        typer.echo(f"vastprobe: warning: {p.warning}", err=True)
    chosen = _format(fmt, json_flag)
    from vastprobe.render.jsonable import dumps, host_report_dict, report_document

    tick = progress_printer(len(entries))
    done: list = []

    def on_report(r) -> None:
        done.append(r)
        if chosen is OutputFormat.ndjson and fleet.group_by is None:  # outliers need the whole group first
            sys.stdout.write(dumps(host_report_dict(r)) + "\n")
            sys.stdout.flush()
        if tick is not None:
            tick(r)

    interrupted = False
    if probed and any(t != "local" for t in probed):
        from vastprobe.pipeline import warm_analysis

        warm_analysis()
    started_at = time.time()
    try:
        asyncio.run(run_sweep(entries, options, p.concurrency, on_report))
    except KeyboardInterrupt:
        interrupted = True
        typer.echo(f"\nvastprobe: interrupted; {len(done)} of {len(entries)} hosts finished", err=True)
    reports = fleet.finish(done, started_at, complete=not interrupted)
    if chosen is OutputFormat.ndjson and fleet.group_by is not None:
        sys.stdout.write("".join(dumps(host_report_dict(r)) + "\n" for r in reports))
    if chosen is OutputFormat.json:
        sys.stdout.write(dumps(report_document(reports), indent=1 if sys.stdout.isatty() else None) + "\n")
    elif chosen is OutputFormat.table:
        from vastprobe.render.summary import render_summary

        render_summary(reports, sys.stdout, fleet.memory)
    from vastprobe.render.prometheus import render_prometheus, write_atomic

    if output is not None:
        if chosen is OutputFormat.ndjson:
            text = "".join(dumps(host_report_dict(r)) + "\n" for r in reports)
        elif chosen is OutputFormat.json:
            text = dumps(report_document(reports)) + "\n"
        else:
            from vastprobe.render.summary import render_summary

            buf = io.StringIO()
            render_summary(reports, buf, fleet.memory)
            text = buf.getvalue()
        write_atomic(output, text)
    if prom is not None and not interrupted:
        write_atomic(prom, render_prometheus(reports, memory=fleet.memory, shard=fleet.shard))
    raise typer.Exit(exit_code(reports))


@app.command()
def collect(
    target: Annotated[str, typer.Argument(help="`local`, or [user@]host[:port].")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Capture file to write ('-' for stdout).")],
    sample: SampleOpt = 1.0,
    log: LogOpt = None,
    artifacts: ArtOpt = None,
    timeout: TimeoutOpt = 60.0,
    connect_timeout: ConnectTimeoutOpt = 10.0,
    port: PortOpt = None,
    user: UserOpt = None,
    identity: IdentityOpt = None,
    ssh_config: ConfigOpt = None,
    known_hosts: KnownHostsOpt = None,
    host_key_check: HostKeyOpt = "strict",
) -> None:
    """Probe and save the raw snapshot (no rules), for `analyze` later or elsewhere."""
    from dataclasses import replace

    from vastprobe.capture import capture_to_dict
    from vastprobe.pipeline import collect_target, parse_capture
    from vastprobe.render.jsonable import dumps

    options = _options(sample, None, None, log, artifacts, 300.0, None, timeout)
    ssh = _ssh_options(
        port, user, identity, ssh_config, known_hosts, host_key_check, connect_timeout, timeout, [target]
    )
    cap = collect_target(target, replace(options, ssh=ssh))
    if cap.status != "ok":
        from vastprobe.render.safe import safe

        typer.echo(f"vastprobe: {safe(cap.error or '')}", err=True)  # the server's words may hold escapes
    snap = parse_capture(cap)[0] if cap.status == "ok" else None
    text = dumps(capture_to_dict(cap, snap), indent=1) + "\n"
    if str(output) == "-":
        sys.stdout.write(text)
    else:
        tmp = output.with_name(output.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output)
        typer.echo(f"saved {target} ({len(cap.output)} bytes of probe output) to {output}", err=True)
    raise typer.Exit(EXIT_OK if cap.status == "ok" else EXIT_UNPROBED)


@app.command()
def analyze(
    files: Annotated[list[Path], typer.Argument(help="Capture files written by `collect`.")],
    pid: PidOpt = None,
    match: MatchOpt = None,
    stale_after: StaleOpt = 300.0,
    expect_gpu: GpuOpt = None,
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
) -> None:
    """Run the rules on saved captures, offline."""
    from dataclasses import replace

    from vastprobe.capture import CaptureError, load_captures
    from vastprobe.pipeline import report_from_capture

    base = _options(1.0, pid, match, None, None, stale_after, expect_gpu, 60.0)
    reports = []
    for f in files:
        try:
            caps = load_captures(f)
        except CaptureError as exc:
            typer.echo(f"vastprobe: {exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from exc
        for cap in caps:
            reports.append(report_from_capture(cap, replace(base, params=cap.params)))
    _emit(reports, _format(fmt, json_flag))
    raise typer.Exit(exit_code(reports))


@app.command()
def rules(
    name: Annotated[Optional[str], typer.Argument(help="A slug or code: explain that rule.")] = None,
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
) -> None:
    """The rule catalogue: slug, code, severity, one line each; with a name, what that rule does."""
    from vastprobe.rules import RULES, find_rule

    if name is not None:
        rule = find_rule(name)
        if rule is None:
            raise typer.BadParameter(f"no rule {name!r}; `vastprobe rules` lists them")
        doc = sys.modules[rule.check.__module__].__doc__ or ""
        m = rule.meta
        typer.echo(f"{m.code} {m.slug} ({m.severity}): {m.summary}\n\n{doc.strip()}")
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


@app.command("probe-script")
def probe_script(
    sample: SampleOpt = 1.0,
    log: LogOpt = None,
    artifacts: ArtOpt = None,
) -> None:
    """Print the exact script that runs on targets, for audit."""
    options = _options(sample, None, None, log, artifacts, 300.0, None, 60.0)
    from vastprobe.probe.render import render_script

    sys.stdout.write(render_script(options.params))


# ---------------------------------------------------------------- fleet memory: history, --group-by, --shard
# (issue 14; self-contained: the options, their checks and the one call each command makes)

HistoryOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--history",
        help="History file (SQLite). sweep: default ${XDG_STATE_HOME:-~/.local/state}/vastprobe/history.sqlite.",
    ),
]
NoHistoryOpt = Annotated[bool, typer.Option("--no-history", help="Record nothing in the history.")]
KeepOpt = Annotated[str, typer.Option("--keep", help="Prune history older than this as it writes (e.g. 30d, 12h).")]
GroupByOpt = Annotated[
    Optional[str],
    typer.Option(
        "--group-by", help="'label' (vast.ai label) or a regex over the target whose first group names the job."
    ),
]
ShardOpt = Annotated[
    Optional[str], typer.Option("--shard", help="K/N: sweep only this controller's share of the inventory.")
]


class _FleetMemory:
    """The checked history, group and shard options of one run (checked before anything connects)."""

    def __init__(
        self, history: Optional[Path], keep: str, group_by: Optional[str] = None, shard: Optional[str] = None
    ) -> None:
        from vastprobe.history.outliers import GroupByError, group_key
        from vastprobe.history.shard import ShardError, parse_shard
        from vastprobe.history.timespec import TimeSpecError, parse_duration

        try:
            self.keep = parse_duration(keep)
            self.shard = parse_shard(shard) if shard is not None else None
            if group_by is not None:
                group_key(group_by)
        except (TimeSpecError, ShardError, GroupByError) as exc:
            raise typer.BadParameter(str(exc)) from exc
        self.history = history
        self.group_by = group_by
        self.memory: Mapping = {}

    def select(self, entries: list) -> list:
        if self.shard is None:
            return entries
        from vastprobe.history.shard import in_shard

        return in_shard(entries, [e.target for e in entries], *self.shard)

    def finish(self, reports: list, started_at: float, kind: str = "sweep", complete: bool = True) -> list:
        """Outliers marked, the run recorded; a history failure is one warning line, nothing more."""
        if self.group_by is not None:
            from vastprobe.history.outliers import mark_outliers

            reports = mark_outliers(reports, self.group_by)
        from vastprobe.sweep import remember

        shard = f"{self.shard[0]}/{self.shard[1]}" if self.shard else None
        self.memory, warning = remember(
            reports, self.history, started_at=started_at, keep=self.keep, kind=kind, shard=shard, complete=complete
        )
        if warning:
            from vastprobe.render.safe import safe

            typer.echo(f"vastprobe: warning: {safe(warning, 400)}", err=True)
        return reports


def _sweep_history(history: Optional[Path], no_history: bool) -> Optional[Path]:
    if no_history:
        return None
    if history is not None:
        return history.expanduser()
    from vastprobe.history.store import default_path

    return default_path()


@app.command("history")
def history_command(
    targets: Annotated[
        Optional[list[str]], typer.Argument(help="Targets or node sets (gpu[01-04]) as swept; all when none.")
    ] = None,
    history: HistoryOpt = None,
    since: Annotated[
        str,
        typer.Option("--since", help="Window for transitions: back from now (24h, 7d) or a time (2026-12-02T14:00)."),
    ] = "24h",
    fmt: FormatOpt = None,
    json_flag: JsonOpt = False,
) -> None:
    """What the recorded sweeps say per host: state and since when, last healthy, transitions, flapping."""
    import time

    from vastprobe.history.queries import host_histories
    from vastprobe.history.render import history_document, history_lines
    from vastprobe.history.store import HistoryError, default_path, open_history
    from vastprobe.history.timespec import TimeSpecError, parse_since
    from vastprobe.render.jsonable import dumps
    from vastprobe.render.safe import safe
    from vastprobe.targets import InventoryError, expand_ranges

    now = time.time()
    try:
        start = parse_since(since, now)
        words = [t for text in targets or () for t in expand_ranges(text)]
    except (TimeSpecError, InventoryError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    path = history.expanduser() if history is not None else default_path()
    try:
        con = open_history(path, readonly=True)
        try:
            found, missing = host_histories(con, words, start)
        finally:
            con.close()
    except HistoryError as exc:
        typer.echo(f"vastprobe: {safe(str(exc), 400)}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc
    if missing:
        typer.echo(f"vastprobe: no history for {safe(', '.join(missing), 400)} in {safe(str(path))}", err=True)
        if not found:
            raise typer.Exit(EXIT_USAGE)
    chosen = _format(fmt, json_flag)
    if chosen is OutputFormat.table:
        sys.stdout.write("".join(line + "\n" for line in history_lines(found, start, now)))
    elif chosen is OutputFormat.ndjson:
        doc = history_document(found, start, now, missing)
        sys.stdout.write("".join(dumps(h) + "\n" for h in doc["hosts"]))
    else:
        sys.stdout.write(
            dumps(history_document(found, start, now, missing), indent=1 if sys.stdout.isatty() else None) + "\n"
        )
    raise typer.Exit(EXIT_OK)


def main() -> None:
    import gc

    # A short-lived CLI that allocates many small objects per host: collect young objects far less
    # often (cyclic garbage stays bounded: each host's report is kept anyway).
    gc.set_threshold(50_000, 20, 20)
    app()


if __name__ == "__main__":
    main()
