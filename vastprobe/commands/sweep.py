"""`vastprobe sweep`: the diagnosis over a fleet, hosts streamed as they finish, with the fleet's
memory (history, outliers, shards: commands/fleet.py); and its inventory, read as clush reads one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from vastprobe.commands import checks
from vastprobe.commands.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    exit_code,
    interrupted_code,
    run_entries,
    say_interrupted,
    usage_error,
)
from vastprobe.commands.fleet import FleetMemory, default_history, history_location
from vastprobe.commands.options import (
    P_INVENTORY,
    P_OUTPUT,
    ArtOpt,
    BriefOpt,
    ConcurrencyOpt,
    ConfigOpt,
    ConnectTimeoutOpt,
    ContextOpt,
    FailOn,
    FailOnOpt,
    FormatOpt,
    GpuOpt,
    GpusOpt,
    GroupByOpt,
    HistoryOpt,
    HostKeyOpt,
    IdentityOpt,
    JsonOpt,
    JumpOpt,
    KeepOpt,
    KnownHostsOpt,
    LogOpt,
    MatchOpt,
    NoHistoryOpt,
    OptionOpt,
    PidOpt,
    PortOpt,
    PySpyOpt,
    SampleOpt,
    ShardOpt,
    ShardsOpt,
    SnapshotOpt,
    StaleOpt,
    TimeoutOpt,
    UserOpt,
    VerboseOpt,
    complete_targets,
    per_kind,
    probe_options,
    report_format,
    ssh_options,
)
from vastprobe.notices import say


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


def inventory_entries(
    inventory: Optional[str],
    nodes: list[str],
    hostfiles: list[Path],
    excluded: list[str],
    listed: Optional[list[str]] = None,
    context: Optional[str] = None,
) -> list:  # -> list[InventoryEntry]
    """Positional INVENTORY (an existing file, '-', or a node set), -w node sets, --hostfile files
    and the containers and pods --from lists, in that order; then -x; then each target once."""
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
    if listed:
        from vastprobe.targets import TargetError
        from vastprobe.transport.base import TransportSettings
        from vastprobe.transport.registry import list_targets

        settings = TransportSettings(per_kind=per_kind(context))
    for spec in listed or ():
        try:
            running = list_targets(spec, settings)
        except TargetError as exc:
            usage_error(str(exc))
        if not running:
            say(f"vastprobe sweep: --from {spec}: nothing running matches")
        entries.extend(InventoryEntry(t) for t in running)
    if not entries and listed and inventory is None and not nodes and not hostfiles:
        say("vastprobe sweep: nothing to sweep")  # no container running now: no error for a cron sweep
        raise typer.Exit(EXIT_OK)
    if not entries:
        usage_error("no targets: give an INVENTORY, -w NODES, --hostfile FILE or --from KIND[:QUERY]")
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


def sweep(
    inventory: Annotated[
        Optional[str],
        typer.Argument(
            metavar="[INVENTORY]",
            help="An inventory file (plain list or vast.ai JSON), '-' for stdin, or a node set like 'gpu\\[01-16]'.",
            autocompletion=complete_targets,
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
            autocompletion=complete_targets,
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
    listed: Annotated[
        Optional[list[str]],
        typer.Option(
            "--from",
            metavar="KIND[:QUERY]",
            callback=checks.texts,
            rich_help_panel=P_INVENTORY,
            help="The running containers or pods a runtime lists: docker\\[:FILTER,...] and podman\\[:FILTER,...] "
            "(docker ps --filter), kubectl\\[:SELECTOR] (pods of every namespace; --context) (repeatable).",
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
            autocompletion=complete_targets,
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
    context: ContextOpt = None,
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
    fail_on: FailOnOpt = FailOn.stalled,
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

    chosen = report_format(fmt, json_flag, brief, snapshot)
    entries = inventory_entries(inventory, nodes or [], hostfile or [], exclude_nodes or [], listed or [], context)
    where = None if no_history else history_location(history) if history is not None else default_history()
    fleet = FleetMemory(where, keep, group_by, shard, shards)
    entries = fleet.select(entries)
    options = probe_options(sample=sample, pid=pid, match=match, log=log, artifacts=artifacts,
                            stale_after=stale_after, expect_gpu=expect_gpu, timeout=timeout,
                            expect_gpus=expect_gpus, py_spy=py_spy, context=context,
                            targets=tuple(e.target for e in entries))  # fmt: skip
    probed = [e.target for e in entries if e.skip is None]
    ssh = ssh_options(probed or ["local"], port=port, user=user, identity=identity, ssh_config=ssh_config,
                      known_hosts=known_hosts, host_key_check=host_key_check, connect_timeout=connect_timeout,
                      timeout=timeout, config_options=config_options, jump=jump, verbose=verbose)  # fmt: skip
    options = replace(options, ssh=ssh)
    p = plan(len(probed), concurrency, timeout)
    if p.warning:
        say(f"vastprobe: warning: {p.warning}")
    from vastprobe.render.documents import FleetDocument
    from vastprobe.render.formats import document_text, emit

    t0 = time.monotonic()
    progress = None
    if sys.stderr.isatty():
        from vastprobe.render.progress import progress_for

        progress = progress_for(len(entries))  # 0/N at once, then redrawn with the time and hosts in flight

    stream = chosen.stream if fleet.group_by is None else None  # outliers need the whole group first
    live = FleetDocument([], EXIT_OK, snapshot=snapshot)  # a host's line as it finishes needs no summary

    sent: dict = {}  # target -> the findings its streamed line had

    def on_report(r) -> None:  # type: ignore[no-untyped-def]
        if stream is not None:
            sys.stdout.write(stream(live, r))
            sys.stdout.flush()
            sent[r.target] = r.findings
        if progress is not None:
            progress.finished(r.status, probed=r.status != "skipped")

    try:
        # the snapshots are kept for the end only when something there prints them or compares hosts by them
        snapshots = fleet.group_by is not None or (not brief and chosen.shows_snapshot and (
            chosen.stream is None or output is not None))  # fmt: skip
        reports, interrupted = run_entries(
            entries, options, p.concurrency, on_report, progress.started if progress is not None else None, snapshots
        )
    finally:
        if progress is not None:
            progress.stop()
    elapsed = time.monotonic() - t0
    reports = fleet.finish(reports, complete=not interrupted)
    code = interrupted_code() if interrupted else fleet.exit_code(exit_code(reports, fail_on))
    unfinished = len(entries) - len(reports)
    doc = FleetDocument(reports, code, unfinished, snapshot, verbose, memory=fleet.memory, elapsed=elapsed)
    if stream is not None:  # a host another host's report changed (analysis/joins.py) goes out again, joined
        again = [r for r in reports if r.target in sent and sent[r.target] is not r.findings
                 and sent[r.target] != r.findings]  # fmt: skip
        sys.stdout.write("".join(stream(live, r) for r in again))
    emit(doc, chosen, streamed=stream is not None)  # the hosts' lines went out as they finished
    if interrupted:
        say_interrupted(reports, entries)
        if output is not None or prom is not None:
            say("vastprobe: --output/--prom not written: the sweep did not finish")
        raise typer.Exit(EXIT_INTERRUPTED)
    from vastprobe.fileio import write_atomic

    if output is not None:
        write_atomic(output.expanduser(), document_text(replace(doc, verbose=0), chosen))
    if prom is not None:
        from vastprobe.render.prometheus import render_prometheus

        # 0644: node_exporter reads it as another user, and it holds no secret (targets, statuses,
        # rule slugs and severities: no argv, no path)
        write_atomic(prom.expanduser(), render_prometheus(reports, memory=fleet.memory, shard=fleet.shard), mode=0o644)
    raise typer.Exit(code)
