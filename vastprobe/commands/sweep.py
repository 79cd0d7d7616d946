"""`vastprobe sweep`: the diagnosis over a fleet, hosts streamed as they finish, with the fleet's
memory (history, outliers, shards: commands/fleet.py); its inventory is commands/inventory.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from vastprobe.commands import checks
from vastprobe.commands.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STALLED,
    EXIT_USAGE,
    exit_code,
    interrupted_code,
    run_entries,
    say_interrupted,
)
from vastprobe.commands.fleet import FleetMemory, default_history, history_location
from vastprobe.commands.inventory import InventoryFlags, inventory_entries
from vastprobe.commands.option_groups import OptionGroup, with_groups
from vastprobe.commands.options import (
    FLEET_GROUP,
    P_OUTPUT,
    PROBE_GROUP,
    REPORT_GROUP,
    RULE_GROUP,
    SSH_GROUP,
    ConcurrencyOpt,
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
from vastprobe.notices import say

OutputFileOpt = Annotated[
    Optional[Path],
    typer.Option("--output", metavar="FILE", callback=checks.output_file, rich_help_panel=P_OUTPUT,
                 help="Also write the report here (atomically; not on Ctrl-C)."),
]  # fmt: skip
PromOpt = Annotated[
    Optional[Path],
    typer.Option("--prom", metavar="FILE", callback=checks.output_file, rich_help_panel=P_OUTPUT,
                 help="Prometheus textfile-collector file to write (atomically; not on Ctrl-C)."),
]  # fmt: skip


@with_groups(
    where=OptionGroup(InventoryFlags),
    probe=PROBE_GROUP,
    rules=RULE_GROUP,
    report=REPORT_GROUP,
    ssh=SSH_GROUP,
    fleet=FLEET_GROUP,
)
def sweep(
    inventory: Annotated[
        Optional[str],
        typer.Argument(
            metavar="[INVENTORY]",
            help="An inventory file (plain list or vast.ai JSON), '-' for stdin, or a node set like 'gpu\\[01-16]'.",
            autocompletion=complete_targets,
        ),
    ] = None,
    *,
    where: InventoryFlags,
    concurrency: ConcurrencyOpt = 32,
    output: OutputFileOpt = None,
    prom: PromOpt = None,
    probe: ProbeFlags,
    rules: RuleFlags,
    report: ReportFlags,
    ssh: SshFlags,
    fleet: FleetFlags,
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

    from vastprobe.fanout import plan
    from vastprobe.render.documents import FleetDocument
    from vastprobe.render.formats import emit

    chosen = report_format(report)
    entries = inventory_entries(inventory, where, probe.context)
    history = (
        None
        if fleet.no_history
        else history_location(fleet.history)
        if fleet.history is not None
        else default_history()
    )
    memory = FleetMemory(history, fleet.keep, fleet.group_by, fleet.shard, fleet.shards)
    entries = memory.select(entries)
    options = probe_options(probe, rules, timeout=ssh.timeout, targets=tuple(e.target for e in entries))
    probed = [e.target for e in entries if e.skip is None]
    options = replace(options, ssh=ssh_options(probed or ["local"], ssh, report.verbose))
    p = plan(len(probed), concurrency, ssh.timeout)
    if p.warning:
        say(f"vastprobe: warning: {p.warning}")
    t0 = time.monotonic()
    stream = chosen.stream if memory.group_by is None else None  # outliers need the whole group first
    # the snapshots are kept for the end only when something there prints them or compares hosts by them
    snapshots = memory.group_by is not None or (not report.brief and chosen.shows_snapshot and (
        chosen.stream is None or output is not None))  # fmt: skip
    lines = _Lines(stream, report.snapshot)
    reports, interrupted = _run_with_progress(entries, options, p.concurrency, lines, snapshots)
    elapsed = time.monotonic() - t0
    reports = memory.finish(reports, complete=not interrupted)
    code = interrupted_code() if interrupted else memory.exit_code(exit_code(reports, fail_on))
    unfinished = len(entries) - len(reports)
    doc = FleetDocument(reports, code, unfinished, report.snapshot, report.verbose, memory=memory.memory,
                        elapsed=elapsed)  # fmt: skip
    lines.send_changed(reports)
    emit(doc, chosen, streamed=stream is not None)  # the hosts' lines went out as they finished
    if interrupted:
        say_interrupted(reports, entries)
        if output is not None or prom is not None:
            say("vastprobe: --output/--prom not written: the sweep did not finish")
        raise typer.Exit(EXIT_INTERRUPTED)
    if not _write_files(doc, chosen, memory, output, prom) and code != EXIT_STALLED:
        code = EXIT_USAGE  # an output that could not be written fails the run, unless a stall was found
    raise typer.Exit(code)


class _Lines:
    """Each host's line written as it finishes; at the end, again each host whose report another
    host's changed (report/joins.py)."""

    def __init__(self, stream, snapshot: bool) -> None:  # type: ignore[no-untyped-def]
        from vastprobe.render.documents import FleetDocument

        self.stream = stream
        self.live = FleetDocument([], EXIT_OK, snapshot=snapshot)  # a host's line as it finishes needs no summary
        self.sent: dict = {}  # target -> the findings its streamed line had

    def send(self, r) -> None:  # type: ignore[no-untyped-def]
        if self.stream is not None:
            sys.stdout.write(self.stream(self.live, r))
            sys.stdout.flush()
            self.sent[r.target] = r.findings

    def send_changed(self, reports) -> None:  # type: ignore[no-untyped-def]
        if self.stream is None:
            return
        sent = self.sent
        again = [r for r in reports if r.target in sent and sent[r.target] is not r.findings
                 and sent[r.target] != r.findings]  # fmt: skip
        sys.stdout.write("".join(self.stream(self.live, r) for r in again))


def _run_with_progress(entries, options, concurrency: int, lines: _Lines, snapshots: bool):  # type: ignore[no-untyped-def]
    """Every entry probed, its line sent as it finishes, with a progress line on a terminal's stderr."""
    progress = None
    if sys.stderr.isatty():
        from vastprobe.render.progress import progress_for

        progress = progress_for(len(entries))  # 0/N at once, then redrawn with the time and hosts in flight

    def on_report(r) -> None:  # type: ignore[no-untyped-def]
        lines.send(r)
        if progress is not None:
            progress.finished(r.status, probed=r.status != "skipped")

    try:
        return run_entries(
            entries, options, concurrency, on_report, progress.started if progress is not None else None, snapshots
        )
    finally:
        if progress is not None:
            progress.stop()


def _write_files(doc, chosen, memory: FleetMemory, output: Optional[Path], prom: Optional[Path]) -> bool:  # type: ignore[no-untyped-def]
    """--output and --prom, each written whole or not at all; False (and one line each) where one could
    not be written (a full disk was an "internal error", exit 4; found by a helper)."""
    from dataclasses import replace

    from vastprobe.commands.common import write_or_say
    from vastprobe.render.formats import document_text

    ok = True
    if output is not None:
        ok = write_or_say(output.expanduser(), document_text(replace(doc, verbose=0), chosen), "--output")
    if prom is not None:
        from vastprobe.render.prometheus import render_prometheus

        # 0644: node_exporter reads it as another user, and it holds no secret (targets, statuses,
        # rule slugs and severities: no argv, no path)
        reports = doc.reports
        text = render_prometheus(reports, memory=memory.memory, shard=memory.shard)
        ok = write_or_say(prom.expanduser(), text, "--prom", mode=0o644) and ok
    return ok
