"""The sweep's terminal summary: hosts grouped by verdict as folded host sets (`gpu[01-04,07]`,
ClusterShell's NodeSet), each stalled host on a line of its own with its vast.ai instance and the
headline of why; failures and findings that hosts share folded into one row each (like
`clush -b`), worst first. Lines that wrap keep a hanging indent.

A per-host `mark` (a short word such as "new" or "recovered", from the sweep history) can be
given for any target; it is shown before the target on that host's line."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import IO

from rich.console import Console
from rich.text import Text

from vastprobe.model import HostReport
from vastprobe.render.layout import hanging
from vastprobe.render.safe import safe

VERDICT_ORDER = {"stalled": 0, "unknown": 1, "degraded": 2, "healthy": 3}
VERDICT_STYLE = {"healthy": "bold green", "degraded": "bold yellow", "stalled": "bold red", "unknown": "bold magenta"}
SEVERITY_ORDER = {"info": 0, "warning": 1, "error": 2, "critical": 3}
SEVERITY_STYLE = {"info": "cyan", "warning": "yellow", "error": "red", "critical": "bold red"}
_NUM = re.compile(r"\d+")
#: Names NodeSet can fold as they are: no brackets, commas, spaces or set operators.
_FOLDABLE = re.compile(r"[A-Za-z0-9._@:-]{1,253}")


def natural_key(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def fold_hosts(names: Iterable[str]) -> str:
    """`gpu[01-04,07],other`: ranges where names differ only in numbers, natural order."""
    unique = sorted(set(names), key=natural_key)
    foldable = [n for n in unique if _FOLDABLE.fullmatch(n)]
    rest = [safe(n) for n in unique if not _FOLDABLE.fullmatch(n)]
    if not foldable:
        return ",".join(rest)
    try:
        from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

        folded = str(NodeSet.fromlist(foldable, resolver=RESOLVER_NOGROUP))
    except Exception:  # an odd name NodeSet refuses: list them as they are
        folded = ",".join(foldable)
    return ",".join([folded, *rest]) if rest else folded


def instance(r: HostReport) -> str:
    """`#8812345 llm-train-7`: the vast.ai instance id and label, when the inventory had them."""
    iid = r.labels.get("instance_id", "")
    label = r.labels.get("label", "")
    return " ".join(x for x in (f"#{safe(iid, 40)}" if iid else "", safe(label, 80)) if x)


def render_summary(
    reports: list[HostReport],
    file: IO[str],
    marks: Mapping[str, str] | None = None,
    elapsed: float | None = None,
    width: int | None = None,
) -> None:
    console = Console(file=file, highlight=False, soft_wrap=False, width=width)
    marks = marks or {}
    by_status: dict[str, int] = defaultdict(int)
    by_verdict: dict[str, list[HostReport]] = defaultdict(list)
    for r in reports:
        by_status[r.status] += 1
        by_verdict[r.verdict].append(r)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(by_status.items(), key=lambda kv: (-kv[1], kv[0])))
    took = f" ({elapsed:.1f}s)" if elapsed is not None else ""
    console.print(Text(f"{len(reports)} hosts: {counts}{took}", style="bold"))
    for verdict in sorted(by_verdict, key=lambda v: VERDICT_ORDER[v]):
        hosts = by_verdict[verdict]
        head = Text()
        head.append(verdict.upper(), style=VERDICT_STYLE[verdict])
        head.append(f" ({len(hosts)}): ")
        hanging(console, "", head, Text(fold_hosts(r.target for r in hosts)))
        if verdict in ("stalled", "degraded"):
            _host_lines(console, sorted(hosts, key=lambda r: natural_key(r.target)), marks)
        elif verdict == "unknown":
            _failures(console, hosts, marks)
    _findings(console, reports)


def _host_lines(console: Console, hosts: list[HostReport], marks: Mapping[str, str]) -> None:
    """One line per host: mark, target, vast.ai instance, then the headline under a hanging indent."""
    heads = []
    for r in hosts:
        head = Text("  ")
        mark = marks.get(r.target)
        if mark:
            head.append(f"{safe(mark, 20)} ", style="bold")
        head.append(safe(r.target, 120), style="bold")
        inst = instance(r)
        if inst:
            head.append(f" {inst}", style="cyan")
        heads.append(head)
    # one column for every host's why, unless a long name would squeeze it
    column = max(h.cell_len for h in heads) + 2 if heads else 0
    for r, head in zip(hosts, heads, strict=True):
        if column * 3 <= console.width:
            head.append(" " * (column - head.cell_len))
        else:
            head.append("  ")
        hanging(console, "", head, Text(safe(r.headline or r.error or "", 600)))


def _failures(console: Console, hosts: list[HostReport], marks: Mapping[str, str]) -> None:
    """Failed probes, skipped rows, undiagnosed hosts: one row per reason, the hosts folded. The
    text is the host's own when all of them said the same; otherwise the target in it is folded
    (HOST), and the numbers too (N) only when that is not enough."""
    groups: dict[tuple[str, str], list[HostReport]] = defaultdict(list)
    for r in hosts:
        text = (r.error or r.headline or "").replace(r.target, "HOST")
        label: str = r.status if r.status != "ok" else r.verdict
        groups[(label, _NUM.sub("N", text))].append(r)
    for (label, folded), rs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        texts = {r.error or r.headline or "" for r in rs}
        hosted = {(r.error or r.headline or "").replace(r.target, "HOST") for r in rs}
        shown = next(iter(texts)) if len(texts) == 1 else next(iter(hosted)) if len(hosted) == 1 else folded
        where = fold_hosts(r.target for r in rs)
        marked = sorted({marks[r.target] for r in rs if r.target in marks})
        head = Text(f"  {label}{' (' + ', '.join(marked) + ')' if marked else ''}: ", style="bold")
        hanging(console, "", head, Text(f"{safe(shown, 300)}  [{len(rs)}: {where}]"))
        if len(rs) <= 3:
            for r in rs:
                inst = instance(r)
                if inst:
                    console.print(Text(f"    {safe(r.target, 120)} {inst}", style="dim"), overflow="fold")


def _findings(console: Console, reports: list[HostReport]) -> None:
    """Findings that differ only in numbers (pids, sizes, times) fold into one row; the row shows
    the text itself when every host said exactly the same."""
    rows: dict[tuple[str, str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for r in reports:
        for f in r.findings:
            rows[(f.severity, f.code, f.rule, _NUM.sub("N", f.summary))].append((r.target, f.summary))
    if not rows:
        return
    console.print(Text("findings across hosts:", style="bold"))
    for (sev, code, rule, folded), seen in sorted(
        rows.items(), key=lambda kv: (-SEVERITY_ORDER[kv[0][0]], -len({t for t, _ in kv[1]}), kv[0][1])
    ):
        hosts = sorted({t for t, _ in seen})
        texts = {text for _, text in seen}
        shown = next(iter(texts)) if len(texts) == 1 else folded
        head = Text("  ")
        head.append(f"{sev:<8} ", style=SEVERITY_STYLE[sev])
        head.append(f"{code} {rule}: ", style="bold")
        body = Text(f"{safe(shown, 300)}  [{len(hosts)}: {fold_hosts(hosts)}]")
        hanging(console, "", head, body, hang=len("  error    "))
