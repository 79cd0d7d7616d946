"""Findings of one run joined across hosts. A job on one host that waits on an ssh session to another
(`tar | ssh`, `rsync -e ssh`) names that host as a target (`Finding.remote`); when the same run
probed that host too, each side's finding says what the other side's report found, so the stall is
read once, from the waiting job to the process that holds it. A distributed job's hosts are grouped
by the job's id (its ranks' environment): the hosts whose ranks all wait in a collective are told
which host's rank holds them, and that host how many ranks elsewhere wait on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from vastprobe.model import Evidence, Finding, HostReport
from vastprobe.targets import TargetError, parse_target
from vastprobe.transport.registry import kind_for

_SEVERITY = {"info": 0, "warning": 1, "error": 2, "critical": 3}


def _address(target: str) -> tuple[str, int] | None:
    """Host and port of a target as it was typed (ssh_config aliases compare by name); None for a
    target no ssh session names (`local`, a container)."""
    try:
        if not kind_for(target).addressed:
            return None
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


def join_jobs(reports: Sequence[HostReport]) -> list[HostReport]:
    """The reports, with each distributed job seen on several hosts joined: a host whose ranks all
    wait (its culprit-rank finding says the holder is elsewhere) gets the host and rank that holds
    them, as evidence and as its finding's `remote`; the holding host's finding gets who waits."""
    by_job: dict[str, list[int]] = {}
    for i, r in enumerate(reports):
        for j in r.jobs:
            by_job.setdefault(j.key, []).append(i)
    out = list(reports)
    for key, hosts in by_job.items():
        if len(hosts) < 2:
            continue
        holders = [(i, job) for i in hosts for job in out[i].jobs if job.key == key and job.culprits]
        waiters = [(i, job) for i in hosts for job in out[i].jobs if job.key == key and job.elsewhere]
        if not holders or not waiters:
            continue
        h, hjob = holders[0]
        c = hjob.culprits[0]
        said = f"{c.name} on {out[h].target} holds the job: {c.why}"
        for i, _job in waiters:
            f = next((f for f in out[i].findings if f.rule == "culprit-rank"), None)
            if f is not None:
                new = replace(f, evidence=(*f.evidence, Evidence("this run", said[:400])), remote=out[h].target)
                out[i] = _swap(out[i], f, new)
        n = sum(len(job.waiting) for _i, job in waiters)
        where = ", ".join(out[i].target for i, _job in waiters[:8])
        f = next((f for f in out[h].findings if f.rule == "culprit-rank"), None)
        if f is not None:
            line = f"{n} rank(s) on other hosts of this run wait on it too: {where}"
            out[h] = _swap(out[h], f, replace(f, evidence=(*f.evidence, Evidence("this run", line[:400]))))
    return out
