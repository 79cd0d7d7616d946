"""The terminal report. Every remote string goes through `safe()` and into a Text object, so
neither rich markup nor escape sequences from a target reach the terminal. rich itself drops
colour for NO_COLOR and for output that is not a terminal."""

from __future__ import annotations

from typing import IO

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from vastprobe.analysis.logs import log_health
from vastprobe.analysis.progress import progress
from vastprobe.clock import utc_text
from vastprobe.model import Finding, HostReport, HostSnapshot, Process, Unavailable
from vastprobe.render.safe import safe

VERDICT_STYLE = {"healthy": "bold green", "degraded": "bold yellow", "stalled": "bold red", "unknown": "bold magenta"}
SEVERITY_STYLE = {"info": "cyan", "warning": "yellow", "error": "red", "critical": "bold red"}


def render_reports(reports: list[HostReport], file: IO[str] | None = None) -> None:
    console = Console(file=file, highlight=False, soft_wrap=False)
    for r in reports:
        _render_host(console, r)


def _proc_line(snap: HostSnapshot, p: Process) -> Text:
    pr = progress(p)
    cpu = f"{pr.cpu_ticks / snap.host.clk_tck:.2f}s cpu" if pr.sampled else "not sampled"
    wchan = p.wchan if not isinstance(p.wchan, Unavailable) else "?"
    t = Text()
    t.append(f"{p.pid} ", style="bold")
    t.append(safe(p.comm, 32))
    t.append(f"  {p.state} {safe(wchan, 40)}  {cpu}  ", style="dim")
    t.append(safe(p.command, 80), style="dim")
    return t


def _finding(console: Console, f: Finding, snap: HostSnapshot | None) -> None:
    line = Text("  ")
    line.append(f"{f.severity:<8}", style=SEVERITY_STYLE[f.severity])
    line.append(f" {f.code} {f.rule}: ", style="bold")
    line.append(safe(f.summary))
    console.print(line)
    if f.caused_by:
        console.print(Text(f"      follows from: {f.caused_by}", style="italic"))
    if f.rule == "do-wait-orphan" and snap is not None and f.pids:
        by_pid = {p.pid: p for p in snap.processes}
        root = by_pid.get(f.pids[0])
        if root is not None:
            tree = Tree(_proc_line(snap, root), guide_style="dim")
            node = tree
            rest = [by_pid[pid] for pid in f.pids[1:] if pid in by_pid]
            for p in rest:
                if p.ppid in (root.pid, *[q.pid for q in rest]) and p.ppid != 1:
                    node = node.add(_proc_line(snap, p))
                else:  # an orphan writer: not in the chain's tree
                    tree.add(Text("holds the pipe: ", style="yellow") + _proc_line(snap, p))
            console.print(Text("      wait chain:"))
            console.print(Padding(tree, (0, 0, 0, 8)), overflow="ellipsis", crop=True)
    for e in f.evidence:
        if f.rule == "do-wait-orphan" and e.source == "wait chain":
            continue
        console.print(Text(f"      {safe(e.source)}: {safe(e.detail, 300)}", style="dim"))
    if f.hint:
        console.print(Text(f"      hint: {safe(f.hint)}", style="italic"))


def _render_host(console: Console, r: HostReport) -> None:
    head = Text()
    head.append(safe(r.target), style="bold")
    head.append("  ")
    head.append(r.verdict.upper(), style=VERDICT_STYLE[r.verdict])
    head.append(f"  status={r.status}")
    snap = r.snapshot
    if snap is not None:
        h = snap.host
        head.append(f"  host={safe(h.hostname)} kernel={safe(h.kernel)} window={snap.sample_window:.1f}s")
    console.print(head)
    if r.error:
        console.print(Text("  " + safe(r.error), style="red"))
    for f in r.findings:
        _finding(console, f, snap)
    if snap is None:
        console.print()
        return
    _processes(console, r, snap)
    _gpus(console, snap)
    _logs(console, snap)
    _artifacts(console, snap)
    console.print()


def _processes(console: Console, r: HostReport, snap: HostSnapshot) -> None:
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
            Text(safe(wchan, 20)),
            Text(cpu),
            Text(safe(p.command, room)),
        )
    console.print(table)


def _gpus(console: Console, snap: HostSnapshot) -> None:
    g = snap.gpus
    if not g.present:
        console.print(Text("  GPUs: no nvidia-smi on the target", style="dim"))
        return
    if g.error:
        console.print(Text(f"  GPUs: {safe(g.error)}", style="red"))
    for sample_rows in g.samples[-1:]:
        for row in sample_rows:
            utils = [s.utilization_gpu for samp in g.samples for s in samp if s.index == row.index]
            text = ", ".join("n/a" if u is None else f"{u:.0f}%" for u in utils)
            mem = (
                f"{row.memory_used_mib:.0f}/{row.memory_total_mib:.0f} MiB"
                if row.memory_used_mib is not None and row.memory_total_mib
                else "n/a"
            )
            console.print(Text(f"  GPU {row.index} {safe(row.name)}  util {text}  mem {mem}"))


def _logs(console: Console, snap: HostSnapshot) -> None:
    now = None
    if isinstance(snap.host.btime, int) and snap.probe.sample_uptimes:
        now = snap.host.btime + snap.probe.sample_uptimes[-1]
    for log in snap.logs:
        h = log_health(log, now, float("inf"))
        age = f", last written {h.age:.0f}s ago" if h.age is not None else ""
        console.print(Text(f"  log {safe(log.path)}: {h.state}{age}" + (", growing" if h.grew else "")))


def _artifacts(console: Console, snap: HostSnapshot) -> None:
    for a in snap.artifacts:
        newest = sorted(a.entries, key=lambda e: e.mtime, reverse=True)[:5]
        line = Text(f"  artifacts {safe(a.pattern)}: {a.matched} match(es)")
        if a.error:
            line.append(f" ({safe(a.error, 120)})", style="dim")
        console.print(line)
        for e in newest:
            when = utc_text(e.mtime)  # a target can send any mtime (2^62): never raises
            console.print(Text(f"    {when}  {e.size:>12}  {safe(e.path, 100)}", style="dim"))
