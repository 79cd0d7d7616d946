"""Hosts with the same story, folded: the sweep table's lines (render/summary.py) and the JSON
summary's `groups` come from here, so a dashboard reads the causes the operator sees. No rich:
a JSON run does not load the terminal renderer."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vastprobe.model import HostReport
from vastprobe.targets import natural_key, vast_order
from vastprobe.untrusted.safe import safe

if TYPE_CHECKING:
    from vastprobe.history.store import HostMemory

VERDICT_ORDER = {"stalled": 0, "unknown": 1, "degraded": 2, "healthy": 3}
AT_RISK = ("warning", "error", "critical")  # severities whose rules say what a host's trouble is
NUMBER = re.compile(r"\d+")
#: Digits inside a word (`ED25519`, `SHA256`, a fingerprint): folding them to N reads as noise.
_INSIDE_WORD = re.compile(r"[A-Za-z][0-9]|[0-9][A-Za-z]")
#: Names NodeSet can fold as they are: no brackets, commas, spaces or set operators.
_FOLDABLE = re.compile(r"[A-Za-z0-9._@:-]{1,253}")


def _spaced(nodeset: str) -> str:
    """NodeSet's top-level commas as ", ": a terminal wraps a long list between hosts, not inside
    one (`-w` reads it back either way)."""
    out, depth = [], 0
    for ch in nodeset:
        depth += ch == "["
        depth -= ch == "]"
        out.append(", " if ch == "," and depth == 0 else ch)
    return "".join(out)


def fold_hosts(names: Iterable[str], limit: int | None = None) -> str:
    """`gpu[01-04,07], other`: ranges where names differ only in numbers, natural order.

    `limit` (characters): the first hosts whose folded set fits, then `… +N more`. A fleet's
    scattered hosts fold poorly (5,000 hosts on 100 addresses made 50 lines for one verdict) and
    NodeSet's fold grows faster than the names (2 s for 5,000): a table shows what fits, and
    --verbose or the JSON every host."""
    unique = sorted(set(names), key=natural_key)
    if limit is None:
        return _fold(unique)
    k = len(unique) if len(unique) <= WHOLE else FIRST
    text = _fold(unique[:k])
    if len(text) > limit and k > FIRST:
        k = FIRST
        text = _fold(unique[:k])
    while len(text) > limit and k > 1:
        k = max(1, min(k - 1, k * limit // max(len(text), 1)))
        text = _fold(unique[:k])
    more = len(unique) - k
    return f"{text}, … +{more} more" if more else text


#: A table's node set folds every host up to WHOLE of them; past that, or when they do not fit,
#: it is folded from the first FIRST at most (fold_hosts' limit).
WHOLE = 256
FIRST = 32


def _fold(unique: list[str]) -> str:
    foldable = [n for n in unique if _FOLDABLE.fullmatch(n)]
    rest = [safe(n) for n in unique if not _FOLDABLE.fullmatch(n)]
    if len(foldable) <= 1:  # nothing to fold (and a one-host run need not load ClusterShell)
        return ", ".join([*foldable, *rest])
    try:
        from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

        folded = _spaced(str(NodeSet.fromlist(foldable, resolver=RESOLVER_NOGROUP)))
    except Exception:  # an odd name NodeSet refuses: list them as they are
        folded = ", ".join(foldable)
    return ", ".join([folded, *rest]) if rest else folded


def why(r: HostReport) -> str:
    return r.headline or (r.findings[0].summary if r.findings else "") or r.error or ""


def minute(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _span(seconds: float) -> str:
    from vastprobe.history.timespec import span

    return span(seconds)


def history_marks(
    reports: list[HostReport], memory: Mapping[str, HostMemory], now: float
) -> tuple[dict[str, str], dict[str, str]]:
    """(target -> `new`/`still`, target -> `stalled since … (47 min, 10 sweeps)`) for stalled hosts."""
    marks: dict[str, str] = {}
    since: dict[str, str] = {}
    for r in reports:
        m = memory.get(r.target)
        if m is None or m.change not in ("new", "still"):
            continue
        marks[r.target] = m.change
        if m.change == "still":
            since[r.target] = (
                f"stalled since {minute(m.verdict_since)} ({_span(now - m.verdict_since)}, {m.verdict_sweeps} sweeps)"
            )
    return marks, since


def _hosted(text: str, target: str) -> str:
    """`text` with the host's own name as a whole word folded to HOST (host `d` is no part of "stopped")."""
    return re.sub(rf"(?<![\w.-]){re.escape(target)}(?![\w.-])", "HOST", text) if target else text


def _story(r: HostReport) -> str:
    """What a host's line says with what varies by host (its name, pids, sizes, times) folded."""
    return NUMBER.sub("N", _hosted(why(r), r.target))


@dataclass(frozen=True)
class HostGroup:
    """Hosts with the same story: one line of the table, one entry of the JSON summary's `groups`."""

    verdict: str
    mark: str  # the history's transition: new, still, or "" (no history, or not stalled)
    since: float | None  # still: when the host's stall began (the group's hosts share its minute)
    sweeps: int | None  # still: how many sweeps it has lasted
    text: str  # the why in the hosts' own words (the first host's, when numbers vary)
    varies: bool  # the hosts' whys differ in their numbers (pids, sizes, times)
    hosts: tuple[HostReport, ...]


def fold_groups(
    hosts: list[HostReport], marks: Mapping[str, str], since: Mapping[str, str], memory: Mapping[str, HostMemory]
) -> list[HostGroup]:
    """Hosts with the same story, the largest group first: the same transition (new, still), the
    same since-minute and sweep count, the same why with its numbers and the host's name folded."""
    groups: dict[tuple[str, str, str, str], list[HostReport]] = defaultdict(list)
    for r in sorted(hosts, key=lambda r: natural_key(r.target)):
        m = memory.get(r.target)
        still = m is not None and m.change == "still" and r.target in since
        when = f"since {minute(m.verdict_since)} ({m.verdict_sweeps} sweeps)" if still and m is not None else ""
        groups[(r.verdict, marks.get(r.target, ""), when, _story(r))].append(r)
    out = []
    for (verdict, mark, when, _key), rs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        texts = {why(r) for r in rs}
        m = memory.get(rs[0].target) if when else None
        out.append(
            HostGroup(
                verdict, mark, m.verdict_since if m else None, m.verdict_sweeps if m else None,
                why(rs[0]), len(texts) > 1, tuple(rs),
            )
        )  # fmt: skip
    return out


def summary_groups(
    reports: list[HostReport], memory: Mapping[str, HostMemory] | None = None, now: float | None = None
) -> list[dict[str, object]]:
    """The table's folded lines as data, for the JSON summary: a dashboard or a chat alert gets one
    entry per cause, with its node set. Stalled and degraded hosts fold by story (fold_groups);
    hosts not diagnosed by their reason, as the table's failure rows do."""
    now = time.time() if now is None else now
    marks, since = history_marks(reports, memory, now) if memory else ({}, {})
    out: list[dict[str, object]] = []
    sick = [r for r in reports if r.verdict in ("stalled", "degraded")]
    for g in sorted(fold_groups(sick, marks, since, memory or {}), key=lambda g: VERDICT_ORDER[g.verdict]):
        out.append(
            {
                "verdict": g.verdict, "change": g.mark or None, "since": g.since, "sweeps": g.sweeps,
                "why": g.text, "numbers_vary": g.varies, "count": len(g.hosts),
                "hosts": fold_hosts(r.target for r in g.hosts),
                "rules": sorted({f.rule for r in g.hosts for f in r.findings if f.severity in AT_RISK}),
            }
        )  # fmt: skip
    for (label, shown), rs in failure_groups([r for r in reports if r.verdict == "unknown"]):
        out.append(
            {
                "verdict": "unknown", "status": label, "why": shown, "count": len(rs),
                "hosts": fold_hosts(r.target for r in rs),
            }
        )  # fmt: skip
    return out


def failure_groups(hosts: list[HostReport]) -> list[tuple[tuple[str, str], list[HostReport]]]:
    """Failed probes, skipped rows, undiagnosed hosts by reason: ((label, text shown), hosts). The
    text is the host's own when all of them said the same; otherwise the target in it is folded
    (HOST), and the numbers too (N) only when that is not enough. Hosts vast.ai calls running come
    first (the surprise), then loading, ..., exited; then by count."""
    groups: dict[tuple[str, str], list[HostReport]] = defaultdict(list)
    for r in hosts:
        text = _hosted(r.error or r.headline or "", r.target)
        label: str = r.status if r.status != "ok" else r.verdict
        groups[(label, NUMBER.sub("N", text))].append(r)
    order = sorted(groups.items(), key=lambda kv: (min(vast_order(r.labels) for r in kv[1]), -len(kv[1]), kv[0]))
    out = []
    for (label, folded), rs in order:
        texts = {r.error or r.headline or "" for r in rs}
        hosted = {_hosted(r.error or r.headline or "", r.target) for r in rs}
        shown = next(iter(texts)) if len(texts) == 1 else next(iter(hosted)) if len(hosted) == 1 else folded
        own = _hosted(rs[0].error or rs[0].headline or "", rs[0].target)
        if shown is folded and _INSIDE_WORD.search(own):
            # numbers inside words would fold to `EDN SHAN:…` (a key fingerprint): one host's words read better
            shown = own + " (numbers vary by host)"
        out.append(((label, shown), rs))
    return out
