"""`vastprobe collect` saves a probe's raw snapshot; `vastprobe analyze` runs the rules on saved
captures, offline: the two halves of diagnose, split across time or machines."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from vastprobe.commands import checks
from vastprobe.commands.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_UNPROBED, exit_code, usage_error
from vastprobe.commands.options import (
    P_OUTPUT,
    TARGET_HELP,
    ArtOpt,
    BriefOpt,
    ConfigOpt,
    ConnectTimeoutOpt,
    ContextOpt,
    FormatOpt,
    GpuOpt,
    GpusOpt,
    HostKeyOpt,
    IdentityOpt,
    JsonOpt,
    JumpOpt,
    KnownHostsOpt,
    LogOpt,
    LongOptionOpt,
    MatchOpt,
    PidOpt,
    PortOpt,
    PySpyOpt,
    ReportVerboseOpt,
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
from vastprobe.notices import say


def collect(
    target: Annotated[
        str,
        typer.Argument(metavar="TARGET", help=TARGET_HELP + ".", autocompletion=complete_targets),
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
    context: ContextOpt = None,
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

    options = probe_options(sample=sample, pid=pid, match=match, log=log, artifacts=artifacts, timeout=timeout,
                            py_spy=py_spy, context=context, targets=(target,))  # fmt: skip
    ssh = ssh_options([target], port=port, user=user, identity=identity, ssh_config=ssh_config,
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
        if cap.status == "ok":
            say(f"saved {target} ({len(cap.output)} bytes of probe output) to {written}")
        else:  # the record of a failed try (`analyze` reads it as that status), not a snapshot
            say(f"saved the failed try ({cap.status}, no snapshot) to {written}")
    raise typer.Exit(EXIT_OK if cap.status == "ok" else EXIT_UNPROBED)


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
    from vastprobe.render.documents import ReportsDocument
    from vastprobe.render.formats import emit

    if sum(str(f) == "-" for f in files) > 1:
        usage_error("stdin ('-') can be read once")
    chosen = report_format(fmt, json_flag, brief, snapshot)
    base = probe_options(
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
    emit(ReportsDocument(reports, code, 0, snapshot, verbose, brief), chosen)
    raise typer.Exit(code)
