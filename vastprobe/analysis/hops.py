"""Findings of one run joined across hosts: a job on one host that waits on an ssh session to another
(`tar | ssh`, `rsync -e ssh`) names that host as a target (`Finding.remote`); when the same run
probed that host too, each side's finding says what the other side's report found, so the stall is
read once, from the waiting job to the process that holds it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from vastprobe.model import Evidence, Finding, HostReport
from vastprobe.targets import TargetError, parse_target

_SEVERITY = {"info": 0, "warning": 1, "error": 2, "critical": 3}


def _address(target: str) -> tuple[str, int] | None:
    """Host and port of a target as it was typed (ssh_config aliases compare by name)."""
    if target == "local":
        return None
    try:
        t = parse_target(target)
    except (TargetError, ValueError):
        return None
    return t.host.lower(), t.port or 22


def join_remote(reports: Sequence[HostReport]) -> list[HostReport]:
    """The reports, with each finding that points at another host of the run joined to that host's
    report (and that report's worst finding told who waits on it)."""
    by_address = {a: i for i, r in enumerate(reports) if (a := _address(r.target)) is not None}
    out = list(reports)
    for i, r in enumerate(reports):
        for k, f in enumerate(r.findings):
            if not f.remote:
                continue
            j = by_address.get(_address(f.remote) or ("", 0))
            if j is None or j == i:
                continue
            cur = out[i].findings[k]  # the same finding, as earlier joins of this run left it
            other = out[j]
            said = f"{other.target} was probed in this run: {other.verdict}" + (
                f": {other.headline}" if other.headline else ""
            )
            out[i] = _swap(out[i], cur, replace(cur, evidence=(*cur.evidence, Evidence("this run", said[:400]))))
            out[j] = _told(other, f"{r.target} waits on this host: {f.summary}"[:400])
    return out


def _told(r: HostReport, line: str) -> HostReport:
    """The host's worst finding, with who waits on it from another host of the run."""
    if not r.findings:
        return r
    worst = max(r.findings, key=lambda g: _SEVERITY.get(g.severity, 0))
    return _swap(r, worst, replace(worst, evidence=(*worst.evidence, Evidence("this run", line))))


def _swap(r: HostReport, old: Finding, new: Finding) -> HostReport:
    """The report with one finding replaced, in its findings and in the incident that holds it."""

    def sub(f: Finding) -> Finding:
        return new if f is old else f

    incidents = tuple(
        replace(
            inc,
            root=sub(inc.root),
            consequences=tuple(sub(c) for c in inc.consequences),
            pictures=tuple((sub(f), pic) for f, pic in inc.pictures),
        )
        for inc in r.incidents
    )
    return replace(r, findings=tuple(sub(f) for f in r.findings), incidents=incidents)
