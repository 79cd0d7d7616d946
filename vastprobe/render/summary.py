"""The sweep's terminal summary: hosts grouped by verdict, identical findings across hosts folded
into one row with the host list (like `clush -b`), worst first. With history, stalled hosts are
marked new or still stalled since when, and the hosts that recovered since their last record are
listed; with `--group-by`, the odd hosts out are named with what sets them apart."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING

from vastprobe.model import HostReport
from vastprobe.render.safe import safe
from vastprobe.rules.engine import SEVERITY_ORDER

if TYPE_CHECKING:
    from vastprobe.history.store import HostMemory

VERDICT_ORDER = {"stalled": 0, "unknown": 1, "degraded": 2, "healthy": 3}
_NUM = re.compile(r"\d+")
LIMIT = 12


def _hosts(names: list[str], limit: int = LIMIT) -> str:
    shown = ", ".join(safe(n) for n in names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def _minute(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _span(seconds: float) -> str:
    from vastprobe.history.timespec import span

    return span(seconds)


def stall_lines(reports: list[HostReport], memory: Mapping[str, HostMemory], now: float) -> list[str]:
    """Under STALLED: which stalls are new since each host's last record, which go on and since when."""
    new, still = [], []
    for r in reports:
        m = memory.get(r.target)
        if m is None or m.change is None:
            continue
        if m.change == "new":
            new.append(r.target)
        elif m.change == "still":
            still.append((m.verdict_since, r.target, m.verdict_sweeps))
    out = [f"  new: {_hosts(sorted(new))}"] if new else []
    for since, target, sweeps in sorted(still)[:LIMIT]:
        out.append(f"  still stalled: {safe(target)} since {_minute(since)} ({_span(now - since)}, {sweeps} sweeps)")
    if len(still) > LIMIT:
        out.append(f"  still stalled: +{len(still) - LIMIT} more")
    return out


def recovered_lines(reports: list[HostReport], memory: Mapping[str, HostMemory]) -> list[str]:
    """Hosts stalled at their last record and healthy or degraded now."""
    back = []
    for r in reports:
        m = memory.get(r.target)
        if m is not None and m.change == "recovered":
            back.append((r.target, m.previous_verdict_since))
    if not back:
        return []
    back.sort()
    shown = ", ".join(
        safe(t) + (f" (stalled since {_minute(since)})" if since is not None else "") for t, since in back[:LIMIT]
    )
    return [f"RECOVERED ({len(back)}): {shown}" + (f" (+{len(back) - LIMIT} more)" if len(back) > LIMIT else "")]


def outlier_lines(reports: list[HostReport]) -> list[str]:
    odd = [(r.outlier_of, r.target) for r in reports if r.outlier_of is not None]
    if not odd:
        return []
    out = [f"OUTLIERS ({len(odd)}):"]
    for o, target in sorted(odd, key=lambda x: (x[0].group, x[1])):
        why = "; ".join(o.differences) or "differs"
        out.append(
            f"  {safe(target)} in {safe(o.group)} ({o.majority_size} of {o.group_size} hosts alike): {safe(why, 400)}"
        )
    return out


def summary_lines(
    reports: list[HostReport], memory: Mapping[str, HostMemory] | None = None, now: float | None = None
) -> list[str]:
    now = time.time() if now is None else now
    by_status: dict[str, list[str]] = defaultdict(list)
    by_verdict: dict[str, list[str]] = defaultdict(list)
    for r in reports:
        by_status[r.status].append(r.target)
        by_verdict[r.verdict].append(r.target)
    out = [
        f"{len(reports)} hosts: "
        + ", ".join(f"{len(v)} {k}" for k, v in sorted(by_status.items(), key=lambda kv: (-len(kv[1]), kv[0])))
    ]
    for verdict in sorted(by_verdict, key=lambda v: VERDICT_ORDER[v]):
        out.append(f"{verdict.upper()} ({len(by_verdict[verdict])}): {_hosts(sorted(by_verdict[verdict]))}")
        if verdict == "stalled" and memory:
            out += stall_lines(reports, memory, now)
    # findings that differ only in numbers (pids, sizes, times) fold into one row; the row shows
    # the text itself when every host said exactly the same
    rows: dict[tuple[str, str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for r in reports:
        for f in r.findings:
            rows[(f.severity, f.code, f.rule, _NUM.sub("N", f.summary))].append((r.target, f.summary))
    for (sev, code, rule, folded), seen in sorted(
        rows.items(), key=lambda kv: (-SEVERITY_ORDER[kv[0][0]], -len({t for t, _ in kv[1]}), kv[0][1])
    ):
        hosts = sorted({t for t, _ in seen})
        texts = {text for _, text in seen}
        shown = next(iter(texts)) if len(texts) == 1 else folded
        out.append(f"  {sev:<8} {code} {rule}: {safe(shown, 160)}  [{len(hosts)}: {_hosts(hosts)}]")
    failures: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for r in reports:
        if r.error:  # a failed probe, a skipped row, or an undiagnosed host (status ok, verdict unknown)
            text = r.error.replace(r.target, "HOST")
            label = r.status if r.status != "ok" else r.verdict
            failures[(label, _NUM.sub("N", text))].append((r.target, text))
    for (status, folded), seen in sorted(failures.items(), key=lambda kv: -len(kv[1])):
        texts = {text for _, text in seen}
        shown = next(iter(texts)) if len(texts) == 1 else folded
        out.append(f"  {status}: {safe(shown, 160)}  [{len(seen)}: {_hosts(sorted(t for t, _ in seen))}]")
    if memory:
        out += recovered_lines(reports, memory)
    return out + outlier_lines(reports)


def render_summary(
    reports: list[HostReport], file: IO[str], memory: Mapping[str, HostMemory] | None = None, now: float | None = None
) -> None:
    for line in summary_lines(reports, memory, now):
        file.write(line + "\n")
