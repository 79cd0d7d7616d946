"""One host's report: the rules run over its snapshot, the findings about the probe itself
(VP900-903) added, the verdict the snapshot can carry, the transport's own words for a run that did not end
well, the jobs and last words worth showing, and the story (report/story.py). A host that was not
analysed, or whose scope matched nothing, gets its report here too: never `healthy`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from vastprobe.analysis.endpoints import remote_waits, served
from vastprobe.analysis.logs import last_words
from vastprobe.model import DistributedJob, HostReport, HostSnapshot, LastWords, Status, Verdict, verdict
from vastprobe.report.probe_findings import probe_findings
from vastprobe.report.story import with_story
from vastprobe.report.verdict import carried_verdict, undiagnosed
from vastprobe.rules.engine import run_rules

if TYPE_CHECKING:
    from vastprobe.analysis.context import Context


def unanalysed(target: str, status: Status, error: str | None, timings: dict[str, float]) -> HostReport:
    """A host whose output was not analysed (not reached, cut off before its first section, not a
    probe's output): its status and why, verdict unknown."""
    return with_story(HostReport(target, status, error, "unknown", (), None, timings))


def nothing_matched(
    target: str, snap: HostSnapshot, asked: Sequence[str], timings: dict[str, float], scope: tuple[int, ...]
) -> HostReport:
    """--pid/--match (`asked`, as typed) named no process: nothing to diagnose, said so, never "healthy"."""
    why = (
        f"no process on the target matches {' '.join(asked)} ({processes_seen(snap)} processes seen): "
        "nothing to diagnose; check the PID or pattern (`vastprobe diagnose TARGET -v` without them lists every process)"
    )
    return with_story(HostReport(target, "ok", why, "unknown", probe_findings(snap), snap, timings, scope))


def processes_seen(snap: HostSnapshot) -> int:
    """How many processes the probe saw that are not its own (nor its transport's)."""
    own = set(snap.excluded_pids)
    return sum(1 for p in snap.processes if p.pid not in own)


def host_report(
    target: str, status: Status, error: str | None, ctx: Context, timings: dict[str, float], scope: tuple[int, ...]
) -> HostReport:
    """The report of an analysed host: the rules' findings and the probe's own, judged."""
    snap = ctx.snapshot
    rule_findings = run_rules(snap, scope, ctx.options, ctx.tree, context=ctx)
    findings = (*rule_findings, *probe_findings(snap))
    judged, why = carried_verdict(verdict(findings), snap)
    if status != "ok":  # the transport's own words, and what did not finish; a stall it saw stands
        judged = undiagnosed(judged)
        why = error or why
        if snap.probe.unfinished_sections:
            why = f"{why}; analysed what arrived, not finished: {', '.join(snap.probe.unfinished_sections)}"
    report = HostReport(target, status, why, judged, findings, snap, timings, scope,
                        jobs=_jobs_in_scope(ctx), last_words=_last_words(ctx, judged),
                        remote_waits=remote_waits(ctx), served=served(ctx))  # fmt: skip
    return with_story(report, ctx)


def _last_words(ctx: Context, judged: Verdict) -> LastWords | None:
    """The last lines of the log that matters, for a host that is not healthy (a healthy one's
    log says nothing the report needs)."""
    return last_words(ctx.log_healths) if judged in ("stalled", "degraded", "unknown") else None


def _jobs_in_scope(ctx: Context) -> tuple[DistributedJob, ...]:
    """The distributed jobs with a rank among the watched processes (another test's or tenant's job on
    the host is not this report's)."""
    return tuple(j for j in ctx.jobs if any(r.pid in ctx.scope for r in j.ranks if r.pid is not None))
