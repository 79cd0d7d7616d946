"""The sweep's terminal summary: hosts grouped by verdict, identical findings across hosts folded
into one row with the host list (like `clush -b`), worst first."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import IO

from vastprobe.model import HostReport
from vastprobe.render.safe import safe
from vastprobe.rules.engine import SEVERITY_ORDER

VERDICT_ORDER = {"stalled": 0, "unknown": 1, "degraded": 2, "healthy": 3}
_NUM = re.compile(r"\d+")


def _hosts(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(safe(n) for n in names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def summary_lines(reports: list[HostReport]) -> list[str]:
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
    return out


def render_summary(reports: list[HostReport], file: IO[str]) -> None:
    for line in summary_lines(reports):
        file.write(line + "\n")
