"""`vastprobe diagnose`: probe each target once, classify its stall, print a report."""

from __future__ import annotations

from typing import Annotated

import typer

from vastprobe.commands.common import exit_code, interrupted_code, run_entries, say_interrupted, unique, usage_error
from vastprobe.commands.fleet import FleetMemory, history_location
from vastprobe.commands.option_groups import with_groups
from vastprobe.commands.options import (
    FLEET_GROUP,
    PROBE_GROUP,
    REPORT_GROUP,
    RULE_GROUP,
    SSH_GROUP,
    TARGET_HELP,
    FailOn,
    FailOnOpt,
    FleetFlags,
    ProbeFlags,
    ReportFlags,
    RuleFlags,
    SshFlags,
    complete_targets,
)
from vastprobe.commands.settings import probe_options, report_format, ssh_options


@with_groups(
    probe=PROBE_GROUP, rules=RULE_GROUP, report=REPORT_GROUP, ssh=SSH_GROUP, fleet=FLEET_GROUP.only("history", "keep")
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
    probe: ProbeFlags,
    rules: RuleFlags,
    report: ReportFlags,
    ssh: SshFlags,
    fleet: FleetFlags,
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
    chosen = report_format(report)
    options = probe_options(probe, rules, timeout=ssh.timeout, targets=tuple(expanded))
    reached = ssh_options(expanded, ssh, report.verbose)
    entries = [InventoryEntry(t) for t in expanded]
    memory = (  # only when asked
        FleetMemory(history_location(fleet.history), fleet.keep) if fleet.history is not None else None
    )
    done, interrupted = run_entries(entries, replace(options, ssh=reached), len(entries), lambda r: None)
    order = {t: i for i, t in enumerate(expanded)}
    reports = sorted(done, key=lambda r: order.get(r.target, len(order)))
    if memory is not None:
        reports = memory.finish(reports, kind="diagnose", complete=not interrupted)
    code = interrupted_code() if interrupted else exit_code(reports, fail_on)
    if memory is not None:  # a shared history that could not be written fails the run (exit 2)
        code = memory.exit_code(code)
    left = len(entries) - len(done)
    emit(ReportsDocument(reports, code, left, report.snapshot, report.verbose, report.brief), chosen)
    _say_unmatched(reports, options.pids)
    if interrupted:
        say_interrupted(done, entries, "targets")
    raise typer.Exit(code)


def _say_unmatched(reports: list, pids: tuple[int, ...]) -> None:
    """A --pid that matched no process, beside others that did: the diagnosis is of the others, and a
    mistyped PID went unsaid (found by a helper). One line each host."""
    from vastprobe.commands.common import say

    for r in reports:
        if r.status != "ok" or not r.scope:
            continue
        scope = set(r.scope)
        missed = [p for p in pids if p not in scope]
        if missed:
            which = ", ".join(f"--pid {p}" for p in missed)
            say(f"vastprobe: warning: {r.target}: {which} matched no process; diagnosed the rest of the scope")
