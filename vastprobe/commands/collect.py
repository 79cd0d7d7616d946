"""`vastprobe collect` saves a probe's raw snapshot; `vastprobe analyze` runs the rules on saved
captures, offline: the two halves of diagnose, split across time or machines."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from vastprobe.commands import checks
from vastprobe.commands.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_UNPROBED, EXIT_USAGE, exit_code, usage_error
from vastprobe.commands.option_groups import with_groups
from vastprobe.commands.options import (
    P_OUTPUT,
    PROBE_GROUP,
    REPORT_GROUP,
    RULE_GROUP,
    SSH_GROUP,
    TARGET_HELP,
    LongOptionOpt,
    ProbeFlags,
    ReportFlags,
    ReportVerboseOpt,
    RuleFlags,
    SshFlags,
    VerboseOpt,
    complete_targets,
)
from vastprobe.commands.settings import probe_options, report_format, ssh_options
from vastprobe.notices import say


@with_groups(probe=PROBE_GROUP, ssh=SSH_GROUP.but(config_options=LongOptionOpt))
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
    probe: ProbeFlags,
    ssh: SshFlags,
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
    from vastprobe.pipeline import collect_target, snapshot_of
    from vastprobe.render.jsonable import dumps

    options = probe_options(probe, timeout=ssh.timeout, targets=(target,))
    reached = ssh_options([target], ssh, verbose)
    try:
        cap = collect_target(target, replace(options, ssh=reached))
    except KeyboardInterrupt:
        say("\nvastprobe: interrupted: nothing was collected or written")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    cap = replace(cap, pids=options.pids, matches=options.matches)
    if cap.status != "ok":
        say(f"vastprobe: {cap.error or cap.status}")
    snap = snapshot_of(cap)[0] if cap.status == "ok" else None
    text = dumps(capture_to_dict(cap, snap), indent=1) + "\n"
    if str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        from vastprobe.commands.common import write_or_say

        written = output.expanduser()
        if not write_or_say(written, text, "-o"):
            raise typer.Exit(EXIT_USAGE)  # nothing was saved: a full disk was an "internal error" (found by a helper)
        if cap.status == "ok":
            say(f"saved {target} ({len(cap.output)} bytes of probe output) to {written}")
        else:  # the record of a failed try (`analyze` reads it as that status), not a snapshot
            say(f"saved the failed try ({cap.status}, no snapshot) to {written}")
    raise typer.Exit(EXIT_OK if cap.status == "ok" else EXIT_UNPROBED)


@with_groups(
    scope=PROBE_GROUP.only("pid", "match"), rules=RULE_GROUP, report=REPORT_GROUP.but(verbose=ReportVerboseOpt)
)
def analyze(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE...", help="Capture files written by `collect` ('-' for stdin).")
    ],
    scope: ProbeFlags,
    rules: RuleFlags,
    report: ReportFlags,
) -> None:
    """Run the rules on saved captures, offline.

    The scope is the capture's own (`collect --pid/--match`) unless --pid/--match are given here.
    A capture whose raw bytes do not match their recorded sha256 is reported as an error, not analysed.
    Captures of several hosts are read together, as a sweep of them would be.

    [b]Examples[/b]
      vastprobe analyze snap.json
      vastprobe analyze snap.json --pid 4242 --format json
      gunzip -c snap.json.gz | vastprobe analyze -
      vastprobe analyze a.json b.json c.json   # three hosts of one job, joined
    """
    from dataclasses import replace

    from vastprobe.capture import CaptureError, load_captures
    from vastprobe.pipeline import report_of
    from vastprobe.render.documents import ReportsDocument
    from vastprobe.render.formats import emit

    if sum(str(f) == "-" for f in files) > 1:
        usage_error("stdin ('-') can be read once")
    chosen = report_format(report)
    base = probe_options(scope, rules)
    caps = []
    for f in files:
        try:
            caps += load_captures(f)
        except CaptureError as exc:
            usage_error(str(exc))
    reports = []
    for cap in caps:
        scope_pids, scope_matches = (base.pids, base.matches) if (scope.pid or scope.match) else (cap.pids, cap.matches)
        try:
            checks.regexes(list(scope_matches))
        except typer.BadParameter as exc:
            usage_error(f"capture of {cap.target}: scope {exc.format_message()}")
        opts = replace(base, params=cap.params, pids=scope_pids, matches=scope_matches)
        reports.append(report_of(cap, opts))
    if len({r.target for r in reports}) == len(reports):  # a run's hosts, read as one story as a sweep reads them
        from vastprobe.report.joins import join_hosts

        reports = join_hosts(reports)
    code = exit_code(reports)
    emit(ReportsDocument(reports, code, 0, report.snapshot, report.verbose, report.brief), chosen)
    raise typer.Exit(code)
