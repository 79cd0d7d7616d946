"""The odd host out (`sweep --group-by`): hosts of one job should look alike. Within each group,
the hosts that lack what nearly all the others share, or have what nearly none of them has, get
`outlier_of`.

A stuck collective looks the same on every host but the one that caused it, so a host is described
by the features a stuck host changes: its status, verdict, each rule at warning or above, each of
the job's processes (command name, state and wait channel of one that did not move between the
probe's samples; one that moved, or sleeps on a timer, counts as "moving" whatever its state at the
instant of the sample) and whether its GPUs are busy or idle. Features are voted on one by one rather than as one
signature, so benign variety (a wait channel that differs on a third of the hosts) flags no one,
while the one host whose verdict, rules or processes nobody else shares is flagged.

With a history, a group spans the whole fleet: the hosts other controllers (shards) swept are
compared by the features they recorded (`Peer`), and only this run's hosts are marked."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from vastprobe.analysis.gpu import idle_gpus
from vastprobe.analysis.progress import progress
from vastprobe.analysis.wchan_families import wait_kind
from vastprobe.model import HostReport, Outlier, Unavailable
from vastprobe.untrusted.safe import safe

LABEL = "label"  # --group-by label: the vast.ai instance label
SHOWN = 4  # process entries named per difference


class GroupByError(ValueError):
    pass


COMMON = 2 / 3  # a feature held by at least this share of a group is what the group looks like
RARE = 1 / 4  # one held by at most this share is odd
MIN_GROUP = 3

Feature = tuple[str, ...]  # ("verdict", "stalled"), ("rule", slug), ("proc", comm, state, wchan), ...


@dataclass(frozen=True)
class Peer:
    """A host another run recorded with its features: part of its group, never marked here."""

    target: str
    labels: dict[str, str]
    features: frozenset[Feature]


def features_text(fs: frozenset[Feature]) -> str:
    return json.dumps(sorted(list(f) for f in fs), separators=(",", ":"), ensure_ascii=False)


def features_from_text(text: str) -> frozenset[Feature] | None:
    """Stored features back, or None when the text is not what `features_text` wrote."""
    try:
        items = json.loads(text)
        return frozenset(tuple(str(x) for x in f) for f in items if isinstance(f, list) and f)
    except (ValueError, TypeError):
        return None


def group_key(spec: str) -> Callable[[HostReport], str | None]:
    """`label`, or a regex over the target whose first group names the job."""
    if spec == LABEL:
        return lambda r: r.labels.get("label") or None
    try:
        rx = re.compile(spec)
    except re.error as exc:
        raise GroupByError(f"--group-by {spec!r}: {exc}") from exc
    if rx.groups < 1:
        raise GroupByError(f"--group-by {spec!r}: the regex needs a group, e.g. '^(train-[a-z]+)-' (or use 'label')")

    def key(r: HostReport) -> str | None:
        m = rx.search(r.target)
        return m.group(1) if m and m.group(1) else None

    return key


def _wchan(value: str | Unavailable) -> str:
    if isinstance(value, Unavailable):
        return "?"
    return value.split(".", 1)[0]  # do_wait.isra.0 on one kernel build, do_wait on another


def _gpu(r: HostReport) -> str:
    snap = r.snapshot
    if snap is None:
        return "unknown"
    if snap.gpus.error:
        return "error"
    indices = {g.index for sample in snap.gpus.samples for g in sample}
    if not snap.gpus.present or not indices:
        return "none"
    idle = {g.index for g in idle_gpus(snap)}
    if not idle:
        return "busy"
    return "idle" if idle >= indices else f"idle {len(idle)}/{len(indices)}"


def features(r: HostReport) -> frozenset[Feature]:
    out: set[Feature] = {("status", r.status), ("verdict", r.verdict), ("gpu", _gpu(r))}
    out.update(("rule", f.rule) for f in r.findings if f.severity in ("warning", "error", "critical"))
    if r.snapshot is not None:
        scope = set(r.scope)
        two = len(r.snapshot.probe.sample_uptimes) >= 2
        for p in r.snapshot.processes:
            if p.pid not in scope:
                continue
            pr = progress(p)
            if two and not pr.sampled:
                continue  # started or ended between the samples: a passing process, not the job's shape
            state = p.samples[-1].state if p.samples else p.state
            wchan = p.wchan if isinstance(p.wchan, str) else None
            # asleep on a timer is a poll between moves: a launcher polling every 0.5 s read "moving" on
            # some hosts and "S in hrtimer_nanosleep" on others, and an innocent host was an outlier
            # (found by a helper)
            if (pr.sampled and pr.moved) or (state == "S" and wait_kind(wchan, None) == "sleep"):
                out.add(("proc", p.comm, "moving", ""))
            elif state == "R":
                out.add(("proc", p.comm, "R", ""))
            else:
                out.add(("proc", p.comm, state, _wchan(p.wchan)))
    return frozenset(out)


def _word(f: Feature) -> str:
    if f[0] == "proc":
        return f"{f[1]} {f[2]}" + (f" in {f[3]}" if f[3] else "")
    return f[1]


def _words(items: list[Feature]) -> str:
    words = sorted(_word(f) for f in items)
    return ", ".join(words[:SHOWN]) + (f" (+{len(words) - SHOWN} more)" if len(words) > SHOWN else "")


def differences(own: frozenset[Feature], common: set[Feature], rare: set[Feature]) -> tuple[str, ...]:
    """In words: what this host has that nearly no other has, and what it lacks that nearly all have."""
    out = []
    for kind, label in (("status", "status"), ("verdict", "verdict"), ("gpu", "GPUs")):
        odd = [f for f in own if f[0] == kind and f in rare]
        usual = [f for f in common if f[0] == kind and f not in own]
        if odd or usual:
            out.append(
                f"{label} {_words(odd) if odd else 'differs'}" + (f" (the group: {_words(usual)})" if usual else "")
            )
    gained = sorted(f"+{f[1]}" for f in own if f[0] == "rule" and f in rare)
    lost = sorted(f"-{f[1]}" for f in common if f[0] == "rule" and f not in own)
    if gained or lost:
        out.append("rules " + " ".join(gained + lost))
    if ("status", "ok") in own:
        odd = [f for f in own if f[0] == "proc" and f in rare]
        usual = [f for f in common if f[0] == "proc" and f not in own]
        if odd or usual:
            text = "processes: " + (_words(odd) if odd else "none of the group's")
            out.append(text + (f" (the group: {_words(usual)})" if usual else ""))
    return tuple(safe(d, 240) for d in out)


def mark_outliers(
    reports: Sequence[HostReport],
    spec: str,
    peers: Sequence[Peer] = (),
    own: dict[str, frozenset[Feature]] | None = None,
) -> list[HostReport]:
    """The same reports, in the same order; outliers carry `outlier_of`. Groups of fewer than
    three hosts are not judged (two that differ say nothing about which is odd), nor groups where
    most hosts would be odd ("0 of 16 hosts alike" names no odd one out); skipped hosts are not
    compared. `peers` (other shards' hosts, from the history) count in their groups; `own` holds
    this run's features when they were already computed."""
    key = group_key(spec)
    feats: dict[int, frozenset[Feature]] = {}
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(reports):
        if r.status == "skipped":
            continue
        name = key(r)
        if name is not None:
            groups.setdefault(name, []).append(i)
            feats[i] = own[r.target] if own is not None and r.target in own else features(r)
    mine = {r.target for r in reports}
    for j, p in enumerate(peers):
        name = key(HostReport(p.target, "ok", None, "unknown", (), None, {}, labels=p.labels))
        if name is not None and name in groups and p.target not in mine:
            groups[name].append(-1 - j)
            feats[-1 - j] = p.features
    out = list(reports)
    for name, members in groups.items():
        n = len(members)
        if n < MIN_GROUP:
            continue
        counts = Counter(f for i in members for f in feats[i])
        common = {f for f, c in counts.items() if c >= COMMON * n}
        rare = {f for f, c in counts.items() if c <= RARE * n}
        odd = [i for i in members if (common - feats[i]) or (feats[i] & rare)]
        if 2 * len(odd) > n:
            continue  # most hosts differ: no shape of the group for one to stand out from
        for i in odd:
            if i >= 0:  # a peer is marked by the run that swept it
                outlier = Outlier(name, n, n - len(odd), differences(feats[i], common, rare))
                out[i] = replace(reports[i], outlier_of=outlier)
    return out
