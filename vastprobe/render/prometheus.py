"""A node_exporter textfile-collector file: `vastprobe_`-prefixed gauges, no PIDs as labels,
written atomically by vastprobe.fileio.write_atomic (the one writer of every file vastprobe makes).
With history, each host also gets when its stall began, when it was last healthy and a counter of
its state changes."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from vastprobe.fileio import write_atomic
from vastprobe.model import HostReport
from vastprobe.untrusted.safe import safe

if TYPE_CHECKING:
    from vastprobe.history.store import HostMemory

__all__ = ["METRICS", "render_prometheus", "write_atomic"]

METRICS = {
    "vastprobe_host_up": "Whether the last sweep probed the host (1) or could not (0); skipped hosts are absent.",
    "vastprobe_host_stalled": "Whether the host's verdict was stalled (1) in the last sweep.",
    "vastprobe_host_diagnosed": "Whether the last sweep diagnosed the host (1) or not (0: verdict unknown, e.g. "
    "its probe did not finish, its output was forged, or it could not be probed); skipped hosts are absent.",
    "vastprobe_findings": "Findings on the host in the last sweep, by rule and severity.",
    "vastprobe_probe_duration_seconds": "Seconds the last probe of the host took, connect included.",
    "vastprobe_last_sweep_timestamp_seconds": "Unix time the last sweep finished.",
    "vastprobe_sweep_hosts": "Hosts in the last sweep, by status.",
    "vastprobe_host_stalled_since_timestamp_seconds": "Unix time of the first sweep of the host's current stall.",
    "vastprobe_host_last_healthy_timestamp_seconds": "Unix time of the last sweep that found the host healthy.",
    "vastprobe_host_transitions_total": "Changes of the host's state (status, verdict or rules) in its history.",
    "vastprobe_sweep_shard_info": "This controller's share of the inventory (--shard K/N).",
}
COUNTERS = {"vastprobe_host_transitions_total"}


def _esc(value: str) -> str:
    """A label value: terminal escapes, bidi controls and lone surrogates made inert text first
    (untrusted/safe.py), then the format's own escapes (backslash, newline, quote)."""
    return safe(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in kv.items()) + "}"


def render_prometheus(
    reports: list[HostReport],
    now: float | None = None,
    memory: Mapping[str, HostMemory] | None = None,
    shard: tuple[int, int] | None = None,
) -> str:
    lines: list[str] = []

    def head(name: str) -> None:
        lines.append(f"# HELP {name} {METRICS[name]}")
        lines.append(f"# TYPE {name} {'counter' if name in COUNTERS else 'gauge'}")

    probed = [r for r in reports if r.status != "skipped"]
    head("vastprobe_host_up")
    for r in probed:
        lines.append(f"vastprobe_host_up{_labels(target=r.target, status=r.status)} {int(r.status == 'ok')}")
    head("vastprobe_host_stalled")
    for r in probed:
        lines.append(f"vastprobe_host_stalled{_labels(target=r.target)} {int(r.verdict == 'stalled')}")
    head("vastprobe_host_diagnosed")
    for r in probed:
        lines.append(f"vastprobe_host_diagnosed{_labels(target=r.target)} {int(r.verdict != 'unknown')}")
    head("vastprobe_findings")
    for r in probed:
        counts = Counter((f.rule, f.severity) for f in r.findings)
        for (rule, sev), n in sorted(counts.items()):
            lines.append(f"vastprobe_findings{_labels(target=r.target, rule=rule, severity=sev)} {n}")
    head("vastprobe_probe_duration_seconds")
    for r in probed:
        total = sum(v for k, v in r.timings.items() if k in ("connect", "probe"))
        lines.append(f"vastprobe_probe_duration_seconds{_labels(target=r.target)} {total:.3f}")
    if memory:
        remembered = [(r, memory[r.target]) for r in probed if r.target in memory]
        head("vastprobe_host_stalled_since_timestamp_seconds")
        for r, m in remembered:
            if r.verdict == "stalled":
                lines.append(
                    f"vastprobe_host_stalled_since_timestamp_seconds{_labels(target=r.target)} {m.verdict_since:.3f}"
                )
        head("vastprobe_host_last_healthy_timestamp_seconds")
        for r, m in remembered:
            if m.last_healthy is not None:
                lines.append(
                    f"vastprobe_host_last_healthy_timestamp_seconds{_labels(target=r.target)} {m.last_healthy:.3f}"
                )
        head("vastprobe_host_transitions_total")
        for r, m in remembered:
            lines.append(f"vastprobe_host_transitions_total{_labels(target=r.target)} {m.transitions_total}")
    if shard is not None:
        head("vastprobe_sweep_shard_info")
        lines.append(f"vastprobe_sweep_shard_info{_labels(shard=str(shard[0]), shards=str(shard[1]))} 1")
    head("vastprobe_sweep_hosts")
    for status, n in sorted(Counter(r.status for r in reports).items()):
        lines.append(f"vastprobe_sweep_hosts{_labels(status=status)} {n}")
    head("vastprobe_last_sweep_timestamp_seconds")
    lines.append(f"vastprobe_last_sweep_timestamp_seconds {now if now is not None else time.time():.3f}")
    return "\n".join(lines) + "\n"
