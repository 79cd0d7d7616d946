"""The terminal report. Every remote string goes through `safe()` and into a Text object, so
neither rich markup nor escape sequences from a target reach the terminal."""

from __future__ import annotations

from typing import IO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from vastprobe.analysis.progress import progress
from vastprobe.model import HostReport, Unavailable
from vastprobe.render.safe import safe

VERDICT_STYLE = {"healthy": "bold green", "degraded": "bold yellow", "stalled": "bold red", "unknown": "bold magenta"}
SEVERITY_STYLE = {"info": "cyan", "warning": "yellow", "error": "red", "critical": "bold red"}


def render_reports(reports: list[HostReport], file: IO[str] | None = None) -> None:
    console = Console(file=file, highlight=False, soft_wrap=False)
    for r in reports:
        _render_host(console, r)


def _render_host(console: Console, r: HostReport) -> None:
    head = Text()
    head.append(safe(r.target), style="bold")
    head.append("  ")
    head.append(r.verdict.upper(), style=VERDICT_STYLE[r.verdict])
    head.append(f"  status={r.status}")
    if r.snapshot is not None:
        h = r.snapshot.host
        head.append(f"  host={safe(h.hostname)} kernel={safe(h.kernel)} window={r.snapshot.sample_window:.1f}s")
    console.print(head)
    if r.error:
        console.print(Text("  " + safe(r.error), style="red"))
    for f in r.findings:
        line = Text("  ")
        line.append(f"{f.severity:<8}", style=SEVERITY_STYLE[f.severity])
        line.append(f" {f.code} {f.rule}: ", style="bold")
        line.append(safe(f.summary))
        console.print(line)
        for e in f.evidence:
            console.print(Text(f"      {safe(e.source)}: {safe(e.detail, 300)}", style="dim"))
        if f.hint:
            console.print(Text(f"      hint: {safe(f.hint)}", style="italic"))
    snap = r.snapshot
    if snap is None:
        return
    table = Table(title=Text(f"processes in scope ({len(r.scope)})"), show_edge=False, pad_edge=False)
    for col, just, width in (
        ("pid", "right", 7),
        ("ppid", "right", 7),
        ("st", "left", 2),
        ("wchan", "left", 20),
        ("cpu Δ", "right", 7),
    ):
        table.add_column(col, justify=just, no_wrap=True, width=width)  # type: ignore[arg-type]
    table.add_column("command", no_wrap=True)
    room = max(20, console.width - (7 + 7 + 2 + 20 + 7) - 6 * 3)  # the fixed columns and separators
    scope = set(r.scope)
    for p in snap.processes:
        if p.pid not in scope:
            continue
        pr = progress(p)
        cpu = f"{pr.cpu_ticks / snap.host.clk_tck:.2f}s" if pr.sampled else "-"
        wchan = p.wchan if not isinstance(p.wchan, Unavailable) else "?"
        table.add_row(
            Text(str(p.pid)),
            Text(str(p.ppid)),
            Text(p.state),
            Text(safe(wchan, 28)),
            Text(cpu),
            Text(safe(p.command, room)),
        )
    console.print(table)
    console.print()
