"""A finished host report changed by what another host of the run says: a finding swapped for its
joined self, a finding added, and the verdict and headline judged again from the findings. Joins
across hosts (hops, job_joins, connection_joins) edit reports only through these, so a joined
stall moves the verdict and the exit code the same way a host's own finding does."""

from __future__ import annotations

from dataclasses import replace

from vastprobe.model import SEVERITY_ORDER, Evidence, Finding, HostReport, Incident, verdict
from vastprobe.report.incidents import host_headline
from vastprobe.report.verdict import undiagnosed


def swap(r: HostReport, old: Finding, new: Finding) -> HostReport:
    """The report with one finding replaced, in its findings and in the incident that holds it."""

    def sub(f: Finding) -> Finding:
        return new if f is old else f

    incidents = tuple(
        replace(
            inc,
            # the incident's headline is made of its root's and first consequence's summaries
            headline=inc.headline.replace(old.summary, new.summary, 1)
            if any(f is old for f in inc.findings)
            else inc.headline,
            root=sub(inc.root),
            consequences=tuple(sub(c) for c in inc.consequences),
            pictures=tuple((sub(f), pic) for f, pic in inc.pictures),
        )
        for inc in r.incidents
    )
    return rejudged(replace(r, findings=tuple(sub(f) for f in r.findings), incidents=incidents))


def added(r: HostReport, f: Finding) -> HostReport:
    """The report with a finding of its own incident added."""
    return rejudged(replace(r, findings=(*r.findings, f), incidents=(*r.incidents, Incident(f.summary, f))))


def note_on_worst(r: HostReport, line: str) -> HostReport:
    """The host's worst finding, with a line of what another host of the run says about it."""
    if not r.findings:
        return r
    worst = max(r.findings, key=lambda g: SEVERITY_ORDER[g.severity])
    return swap(r, worst, replace(worst, evidence=(*worst.evidence, Evidence("this run", line[:400]))))


def _worst(inc: Incident) -> int:
    return max(SEVERITY_ORDER[f.severity] for f in inc.findings)


def rejudged(r: HostReport) -> HostReport:
    """Incidents worst first again, and the verdict and headline from the findings. A host that was
    not diagnosed (`unknown`: forged or unfinished output, nothing matched) stays so, unless what
    another host proves makes it stalled; a host that could not be probed is left as it is."""
    if r.status not in ("ok", "timeout", "probe-error") or (r.snapshot is None and not r.findings):
        return r
    incidents = tuple(sorted(r.incidents, key=lambda i: -_worst(i)))
    found = verdict(r.findings)
    judged = found if r.verdict != "unknown" else undiagnosed(found)
    error = r.error if judged == "unknown" or (judged == "stalled" and r.verdict == "stalled") else None
    headline = host_headline(judged, incidents, len(r.scope), error)
    return replace(r, verdict=judged, incidents=incidents, headline=headline, error=error)
