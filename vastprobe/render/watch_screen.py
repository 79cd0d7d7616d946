"""A watch, shown: on a terminal one screen redrawn each round (rich's Live); elsewhere one NDJSON
record per round (`vastprobe.rounds/1`), then a summary record when the watch ends. Remote strings
go through `safe()` into Text objects, as in the report."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from vastprobe.clock import utc_text
from vastprobe.render.jsonable import dumps
from vastprobe.render.styles import SEVERITY_STYLE, VERDICT_STYLE
from vastprobe.rounds.loop import WatchLog
from vastprobe.rounds.motion import Round, VerdictChange
from vastprobe.units import byte_size
from vastprobe.untrusted.safe import safe

SCHEMA = "vastprobe.rounds/1"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{byte_size(int(value))}/s"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _since(change: VerdictChange | None) -> str:
    return "" if change is None else f" since {utc_text(change.wall, '%H:%M:%S')} (round {change.round})"


#: Characters of a log's path shown; a longer one gives up its middle (its file name stays).
PATH_SHOWN = 72


def _path(path: str) -> str:
    text = safe(path)
    return text if len(text) <= PATH_SHOWN else text[: PATH_SHOWN // 2 - 1] + "…" + text[-(PATH_SHOWN // 2) :]


def _findings(r: Round, verbose: bool) -> list[Text]:
    """A line a finding, warnings and worse (every one with -v, with its hint)."""
    out = []
    for f in r.report.findings:
        if f.severity == "info" and not verbose:
            continue
        line = Text("  ", no_wrap=not verbose, overflow="ellipsis")
        line.append(f"{f.severity:<8} ", style=SEVERITY_STYLE[f.severity])
        line.append(f"{f.code} {f.rule}: ", style="bold")
        line.append(safe(f.summary, 300))
        out.append(line)
        if verbose and f.hint:
            out.append(Text("           " + safe(f.hint, 300), style="dim"))
    return out


def screen(r: Round, log: WatchLog, verbose: bool = False) -> Group:
    """One round as the terminal shows it: the verdict and since when, the findings, the busiest
    processes of the job, its logs, its GPUs. A line too long for the terminal is cut, not wrapped."""
    rep = r.report
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append(safe(rep.target, 200), style="bold")
    head.append(f"  round {r.number}  {utc_text(r.wall, '%H:%M:%S')} UTC  ")
    head.append(
        rep.verdict.upper() + (f" ({rep.status})" if rep.status != "ok" else ""), style=VERDICT_STYLE[rep.verdict]
    )
    head.append(_since(log.changes[-1] if log.changes else None))
    why = Text("  " + safe(rep.headline or rep.error or "", 400), style="dim", no_wrap=not verbose, overflow="ellipsis")
    parts: list[Any] = [head, why, *_findings(r, verbose)]
    if r.gone:
        shown = ", ".join(f"{pid} ({safe(comm, 32)})" for pid, comm in r.gone[:5])
        more = f" (+{len(r.gone) - 5} more)" if len(r.gone) > 5 else ""
        parts.append(Text(f"  gone since the last round: {shown}{more}", no_wrap=True, overflow="ellipsis"))
    if r.processes:
        procs = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for name in ("PID", "CPU%", "READ", "WRITE", "GPU MiB", "STATE", "WAITS IN", "COMMAND"):
            procs.add_column(name, justify="right" if name in ("PID", "CPU%", "READ", "WRITE", "GPU MiB") else "left")
        for m in r.processes:
            procs.add_row(str(m.pid), _percent(m.cpu_percent), _rate(m.read_per_s), _rate(m.write_per_s),
                          _mib(m.gpu_memory_mib), m.state, safe(m.wchan or "", 32), safe(m.comm, 32))  # fmt: skip
        parts.append(procs)
        if r.hidden:
            parts.append(Text(f"  +{r.hidden} more processes in scope", style="dim"))
    if r.logs:
        logs = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for name in ("LOG", "SIZE", "GROWTH", "LAST WRITE"):
            logs.add_column(name, justify="left" if name == "LOG" else "right")
        for lm in r.logs:
            idle = "-" if lm.idle_s is None else f"{lm.idle_s:.0f}s ago"
            size = "-" if lm.size is None else byte_size(lm.size)
            logs.add_row(_path(lm.path), size, _rate(lm.growth_per_s), idle)
        parts.append(logs)
    if r.gpus:
        gpus = Text(
            "GPUs  " + "  ".join(f"{g.index}: {_percent(g.utilization)}% {_mib(g.memory_used_mib)} MiB" for g in r.gpus)
        )
        parts.append(gpus)
    if r.span_s is not None:
        parts.append(Text(f"rates over {r.span_s:.1f}s; Ctrl-C ends the watch", style="dim"))
    return Group(*parts)


def _change_dict(c: VerdictChange) -> dict[str, Any]:
    return {"round": c.round, "at": utc_text(c.wall, "%Y-%m-%dT%H:%M:%SZ"), "before": c.before, "after": c.after,
            "headline": c.headline}  # fmt: skip


def _r(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def record(r: Round) -> dict[str, Any]:
    """One round as an NDJSON record: what the terminal shows, as data."""
    rep = r.report
    return {
        "schema": SCHEMA,
        "round": r.number,
        "at": utc_text(r.wall, "%Y-%m-%dT%H:%M:%SZ"),
        "target": rep.target,
        "status": rep.status,
        "error": rep.error,
        "verdict": rep.verdict,
        "headline": rep.headline,
        "changed": _change_dict(r.change) if r.change is not None else None,
        "span_s": _r(r.span_s, 3),
        "findings": [{"rule": f.rule, "severity": f.severity, "summary": f.summary} for f in rep.findings],
        "processes": [
            {
                "pid": m.pid,
                "comm": m.comm,
                "state": m.state,
                "wchan": m.wchan,
                "cpu_percent": _r(m.cpu_percent),
                "read_per_s": _r(m.read_per_s, 0),
                "write_per_s": _r(m.write_per_s, 0),
                "gpu_memory_mib": m.gpu_memory_mib,
            }
            for m in r.processes
        ],
        "processes_hidden": r.hidden,
        "gone": [{"pid": pid, "comm": comm} for pid, comm in r.gone],
        "logs": [
            {"path": lm.path, "size": lm.size, "growth_per_s": _r(lm.growth_per_s, 0), "idle_s": _r(lm.idle_s)}
            for lm in r.logs
        ],
        "gpus": [
            {"index": g.index, "utilization": g.utilization, "memory_used_mib": g.memory_used_mib} for g in r.gpus
        ],
    }


def ndjson_record(r: Round) -> str:
    return dumps(record(r)) + "\n"


def summary(log: WatchLog, ended: str) -> dict[str, Any]:
    """How the watch went: rounds, every verdict change with its time, and where it ended."""
    last = log.last.report if log.last is not None else None
    return {
        "schema": SCHEMA,
        "summary": {
            "target": log.target or (last.target if last is not None else None),
            "rounds": log.rounds,
            "started": utc_text(log.started, "%Y-%m-%dT%H:%M:%SZ"),
            "ended": ended,
            "changes": [_change_dict(c) for c in log.changes],
            "verdict": last.verdict if last is not None else None,
            "headline": last.headline if last is not None else None,
        },
    }


def summary_text(log: WatchLog, ended: str) -> Text:
    out = Text()
    target = safe(log.target or (log.last.report.target if log.last is not None else "?"), 200)
    out.append(f"watched {target}: {log.rounds} round{'s' if log.rounds != 1 else ''}, ended by {ended}\n")
    for c in log.changes:
        before = c.before.upper() if c.before else "start"
        out.append(f"  {utc_text(c.wall, '%H:%M:%S')} round {c.round}: {before} -> ")
        out.append(c.after.upper(), style=VERDICT_STYLE[c.after])
        out.append(f"  {safe(c.headline or '', 200)}\n")
    return out
