"""The sweep's terminal summary: hosts grouped by verdict as folded host sets (`gpu[01-04,07]`,
ClusterShell's NodeSet), each stalled or degraded host on a line of its own with its vast.ai
instance and the headline of why; failures and findings that hosts share folded into one row each
(like `clush -b`), worst first. Lines that wrap keep a hanging indent.

With history, each stalled host is marked `new` or `still` (stalled since when, for how many
sweeps), and the hosts that recovered since their last record are listed; with `--group-by`, the
odd hosts out are named with what sets them apart. Other marks can be passed per target."""

from __future__ import annotations

import io
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from vastprobe.model import SEVERITY_ORDER, HostReport
from vastprobe.render.groups import (
    NUMBER,
    VERDICT_ORDER,
    failure_groups,
    fold_groups,
    fold_hosts,
    history_marks,
    minute,
    why,
)
from vastprobe.render.job_block import held_jobs, job_block
from vastprobe.render.layout import hanging
from vastprobe.render.styles import SEVERITY_STYLE, VERDICT_STYLE
from vastprobe.targets import natural_key
from vastprobe.untrusted.safe import safe

if TYPE_CHECKING:
    from vastprobe.history.store import HostMemory

LIMIT = 12


def instance(r: HostReport) -> str:
    """`#8812345 llm-train-7`: the vast.ai instance id and label, when the inventory had them."""
    iid = r.labels.get("instance_id", "")
    label = r.labels.get("label", "")
    return " ".join(x for x in (f"#{safe(iid, 40)}" if iid else "", safe(label, 80)) if x)


def recovered_lines(reports: list[HostReport], memory: Mapping[str, HostMemory]) -> list[str]:
    """Hosts stalled at their last record and healthy or degraded now."""
    back = []
    for r in reports:
        m = memory.get(r.target)
        if m is not None and m.change == "recovered":
            back.append((r.target, m.previous_verdict_since))
    if not back:
        return []
    back.sort(key=lambda b: natural_key(b[0]))
    shown = ", ".join(
        safe(t) + (f" (stalled since {minute(since)})" if since is not None else "") for t, since in back[:LIMIT]
    )
    return [f"RECOVERED ({len(back)}): {shown}" + (f" (+{len(back) - LIMIT} more)" if len(back) > LIMIT else "")]


def outlier_lines(reports: list[HostReport]) -> list[str]:
    odd = [(r.outlier_of, r.target) for r in reports if r.outlier_of is not None]
    if not odd:
        return []
    out = [f"OUTLIERS ({len(odd)}):"]
    for o, target in sorted(odd, key=lambda x: (x[0].group, natural_key(x[1]))):
        differs = "; ".join(o.differences) or "differs"
        out.append(
            f"  {safe(target)} in {safe(o.group)} ({o.majority_size} of {o.group_size} hosts alike): {safe(differs, 400)}"
        )
    return out


def render_summary(
    reports: list[HostReport],
    file: IO[str],
    memory: Mapping[str, HostMemory] | None = None,
    now: float | None = None,
    marks: Mapping[str, str] | None = None,
    elapsed: float | None = None,
    width: int | None = None,
    verbose: bool = False,
) -> None:
    """`verbose`: one line per stalled or degraded host; otherwise hosts with the same story fold
    into one line (and past MAX_GROUPS lines, the largest groups and a count of the rest)."""
    console = Console(file=file, highlight=False, soft_wrap=False, width=width)
    limit = None if verbose else max(100, 2 * console.width - 40)  # a node set's characters: two lines
    now = time.time() if now is None else now
    marks = dict(marks or {})
    since: dict[str, str] = {}
    if memory:
        from_history, since = history_marks(reports, memory, now)
        marks = {**from_history, **marks}
    by_status: dict[str, int] = defaultdict(int)
    by_verdict: dict[str, list[HostReport]] = defaultdict(list)
    for r in reports:
        by_status[r.status] += 1
        by_verdict[r.verdict].append(r)
    verdicts = {r.target: r.verdict for r in reports}
    jobs = held_jobs(reports)  # a job read across hosts: one block, under its holder's verdict
    counts = ", ".join(f"{n} {k}" for k, n in sorted(by_status.items(), key=lambda kv: (-kv[1], kv[0])))
    took = f" ({elapsed:.1f}s)" if elapsed is not None else ""
    console.print(Text(f"{len(reports)} hosts: {counts}{took}", style="bold"))
    for verdict in sorted(by_verdict, key=lambda v: VERDICT_ORDER[v]):
        hosts = by_verdict[verdict]
        head = Text()
        head.append(verdict.upper(), style=VERDICT_STYLE[verdict])
        head.append(f" ({len(hosts)}): ")
        hanging(console, "", head, Text(fold_hosts((r.target for r in hosts), limit)))
        if verdict in ("stalled", "degraded"):
            covered = set()
            for job in jobs:
                assert job.holder is not None
                if verdicts[job.holder[0]] == verdict:
                    job_block(console, job, verdicts, limit)
                    covered |= {t for t, _j in job.parts}
            ordered = sorted((r for r in hosts if r.target not in covered), key=lambda r: natural_key(r.target))
            if verbose:
                _host_lines(console, ordered, marks, since)
            else:
                _folded_host_lines(console, ordered, marks, since, memory or {}, limit)
        elif verdict == "unknown":
            _failures(console, hosts, marks, limit)
    _findings(console, reports, limit)
    for line in [*(recovered_lines(reports, memory) if memory else []), *outlier_lines(reports)]:
        _plain(console, line)


def summary_lines(
    reports: list[HostReport],
    memory: Mapping[str, HostMemory] | None = None,
    now: float | None = None,
    width: int = 120,
) -> list[str]:
    """The summary as plain lines (no colour) at this width."""
    buf = io.StringIO()
    render_summary(reports, buf, memory, now, width=width)
    return buf.getvalue().splitlines()


def _plain(console: Console, line: str) -> None:
    """A line already escaped, wrapping under the text after its first `: `."""
    head, sep, body = line.partition(": ")
    if not sep:
        console.print(Text(line), overflow="fold")
        return
    hanging(console, "", Text(head + sep), Text(body))


def _host_lines(console: Console, hosts: list[HostReport], marks: Mapping[str, str], since: Mapping[str, str]) -> None:
    """One line per host: mark, target, vast.ai instance, then its why under a hanging indent."""
    width = max((len(safe(marks[r.target], 20)) for r in hosts if r.target in marks), default=0)
    heads = []
    for r in hosts:
        head = Text("  ")
        if width:
            head.append(f"{safe(marks.get(r.target, ''), 20):<{width}} ", style="bold")
        head.append(safe(r.target, 120), style="bold")
        inst = instance(r)
        if inst:
            head.append(f" {inst}", style="cyan")
        heads.append(head)
    # one column for every host's why, unless a long name would squeeze it
    column = max(h.cell_len for h in heads) + 2 if heads else 0
    for r, head in zip(hosts, heads, strict=True):
        head.append(" " * (column - head.cell_len) if column * 3 <= console.width else "  ")
        text = why(r)
        if r.target in since:
            text = f"{since[r.target]}: {text}"
        hanging(console, "", head, Text(safe(text, 700)))


#: Lines a verdict's folded host list may take before the rest is counted ("--verbose lists them").
MAX_GROUPS = 8


def _folded_host_lines(
    console: Console,
    hosts: list[HostReport],
    marks: Mapping[str, str],
    since: Mapping[str, str],
    memory: Mapping[str, HostMemory],
    limit: int | None = None,
) -> None:
    """One line per group (fold_groups) with its node set and count; past MAX_GROUPS, a count of
    the rest. A single host keeps its own line (its instance too)."""
    ordered = fold_groups(hosts, marks, since, memory)
    for g in ordered[:MAX_GROUPS]:
        if len(g.hosts) == 1:
            _host_lines(console, list(g.hosts), marks, since)
            continue
        varies = " (pids and numbers vary by host)" if g.varies else ""
        head = Text("  ")
        if g.mark:
            head.append(f"{safe(g.mark, 20)} ", style="bold")
        if g.since is not None:
            head.append(f"since {minute(g.since)} ({g.sweeps} sweeps) ")
        hosts_text = f"[{len(g.hosts)}: {fold_hosts((r.target for r in g.hosts), limit)}]: "
        if head.cell_len + len(hosts_text) <= console.width // 2:  # the why hangs under itself
            head.append(hosts_text, style="bold")
            hanging(console, "", head, Text(safe(g.text, 700) + varies))
        else:  # a long node set wraps on lines of its own, never cut; the why under it
            hanging(console, "", head, Text(hosts_text.rstrip(": "), style="bold"))
            hanging(console, "", Text("    "), Text(safe(g.text, 700) + varies))
    rest = ordered[MAX_GROUPS:]
    if rest:
        n = sum(len(g.hosts) for g in rest)
        console.print(Text(f"  and {len(rest)} more group(s) ({n} hosts); --verbose lists them", style="dim"))


def _failures(console: Console, hosts: list[HostReport], marks: Mapping[str, str], limit: int | None = None) -> None:
    """One row per reason (failure_groups), the hosts folded."""
    for (label, shown), rs in failure_groups(hosts):
        where = fold_hosts((r.target for r in rs), limit)
        marked = sorted({marks[r.target] for r in rs if r.target in marks})
        head = Text(f"  {label}{' (' + ', '.join(marked) + ')' if marked else ''}: ", style="bold")
        hanging(console, "", head, Text(f"{safe(shown, 300)}  [{len(rs)}: {where}]"))
        if len(rs) <= 3:
            for r in rs:
                inst = instance(r)
                if inst:
                    console.print(Text(f"    {safe(r.target, 120)} {inst}", style="dim"), overflow="fold")


def _findings(console: Console, reports: list[HostReport], limit: int | None = None) -> None:
    """Findings that differ only in numbers (pids, sizes, times) fold into one row, shown in the
    words most hosts used, marked when the numbers vary by host."""
    rows: dict[tuple[str, str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for r in reports:
        for f in r.findings:
            rows[(f.severity, f.code, f.rule, NUMBER.sub("N", f.summary))].append((r.target, f.summary))
    if not rows:
        return
    console.print(Text("findings across hosts:", style="bold"))
    for (sev, code, rule, _folded), seen in sorted(
        rows.items(), key=lambda kv: (-SEVERITY_ORDER[kv[0][0]], -len({t for t, _ in kv[1]}), kv[0][1])
    ):
        hosts = sorted({t for t, _ in seen})
        texts = Counter(text for _, text in seen)
        # one host's own words (a date or a PID folded into "N" tells nothing), said to vary
        shown = texts.most_common(1)[0][0] + ("" if len(texts) == 1 else " (numbers vary by host)")
        head = Text("  ")
        head.append(f"{sev:<8} ", style=SEVERITY_STYLE[sev])
        head.append(f"{code} {rule}: ", style="bold")
        body = Text(f"{safe(shown, 300)}  [{len(hosts)}: {fold_hosts(hosts, limit)}]")
        hanging(console, "", head, body, hang=len("  error    "))
