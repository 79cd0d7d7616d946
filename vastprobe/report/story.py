"""A report's story: its findings grouped into incidents, its headline, and for a stall its
timeline. Every report gets it, also one that was never analysed (its headline says why)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from vastprobe.model import HostReport
from vastprobe.report.incidents import build_incidents, host_headline
from vastprobe.report.timeline import build_timeline

if TYPE_CHECKING:
    from vastprobe.analysis.context import Context


def with_story(r: HostReport, ctx: Context | None = None) -> HostReport:
    """The report with its findings grouped into incidents, its headline and, for a stall, its timeline."""
    incidents = build_incidents(r.findings, ctx)
    forged = tuple(i for i in incidents if i.root.code == "VP901")
    if forged:  # forged output leads: nothing resting on it comes before the forgery itself
        incidents = (*forged, *(i for i in incidents if i.root.code != "VP901"))
    timeline = build_timeline(ctx, incidents) if ctx is not None and r.verdict in ("stalled", "degraded") else ()
    headline = host_headline(r.verdict, incidents, len(r.scope), r.error)
    return replace(r, headline=headline, incidents=incidents, timeline=timeline)
