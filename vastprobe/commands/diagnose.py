"""`vastprobe diagnose`: probe each target once, classify its stall, print a report."""

from __future__ import annotations

from typing import Annotated

import typer

from vastprobe.commands.common import exit_code, interrupted_code, run_entries, say_interrupted, unique, usage_error
from vastprobe.commands.fleet import FleetMemory, history_location
from vastprobe.commands.options import (
    TARGET_HELP,
    ArtOpt,
    BriefOpt,
    ConfigOpt,
    ConnectTimeoutOpt,
    ContextOpt,
    FailOn,
    FailOnOpt,
    FormatOpt,
    GpuOpt,
    GpusOpt,
    HistoryOpt,
    HostKeyOpt,
    IdentityOpt,
    JsonOpt,
    JumpOpt,
    KeepOpt,
    KnownHostsOpt,
    LogOpt,
    MatchOpt,
    OptionOpt,
    PidOpt,
    PortOpt,
    PySpyOpt,
    SampleOpt,
    SnapshotOpt,
    StaleOpt,
    TimeoutOpt,
    UserOpt,
    VerboseOpt,
    complete_targets,
    probe_options,
    report_format,
    ssh_options,
)


def diagnose(
    targets: Annotated[
        list[str],
        typer.Argument(
            metavar="TARGET...",
            help=TARGET_HELP + ", or a range like gpu\\[01-04].",
            autocompletion=complete_targets,
        ),
    ],
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
    keep: KeepOpt = "30d",
    fail_on: FailOnOpt = FailOn.stalled,
) -> None:
    """Probe each target once, classify its stall, print a report.

    [b]Examples[/b]
      vastprobe diagnose local --pid 1234 --log /workspace/run.log
      vastprobe diagnose root@203.0.113.7:41234 -i ~/.ssh/vast
      vastprobe diagnose gpu-box -J bastion --format json
    """
    from dataclasses import replace

    from vastprobe.render.documents import ReportsDocument
    from vastprobe.render.formats import emit
    from vastprobe.targets import InventoryEntry, InventoryError, expand_nodeset

    try:
        expanded = [t for text in targets for t in expand_nodeset(text)]  # gpu[01-04]
    except InventoryError as exc:
        usage_error(str(exc))
    expanded = unique(expanded)
    chosen = report_format(fmt, json_flag, brief, snapshot)
    options = probe_options(sample=sample, pid=pid, match=match, log=log, artifacts=artifacts,
                            stale_after=stale_after, expect_gpu=expect_gpu, timeout=timeout,
                            expect_gpus=expect_gpus, py_spy=py_spy, context=context,
                            targets=tuple(expanded))  # fmt: skip
    ssh = ssh_options(expanded, port=port, user=user, identity=identity, ssh_config=ssh_config,
                      known_hosts=known_hosts, host_key_check=host_key_check, connect_timeout=connect_timeout,
                      timeout=timeout, config_options=config_options, jump=jump, verbose=verbose)  # fmt: skip
    entries = [InventoryEntry(t) for t in expanded]
    fleet = FleetMemory(history_location(history), keep) if history is not None else None  # only when asked
    done, interrupted = run_entries(entries, replace(options, ssh=ssh), len(entries), lambda r: None)
    order = {t: i for i, t in enumerate(expanded)}
    reports = sorted(done, key=lambda r: order.get(r.target, len(order)))
    if fleet is not None:
        reports = fleet.finish(reports, kind="diagnose", complete=not interrupted)
    code = interrupted_code() if interrupted else exit_code(reports, fail_on)
    if fleet is not None:  # a shared history that could not be written fails the run (exit 2)
        code = fleet.exit_code(code)
    emit(ReportsDocument(reports, code, len(entries) - len(done), snapshot, verbose, brief), chosen)
    if interrupted:
        say_interrupted(done, entries, "targets")
    raise typer.Exit(code)
