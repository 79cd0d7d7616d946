"""A distributed job in the sweep's summary, once: the rank that holds it and where, why, and the
hosts that wait on it folded (`[3: gpu[01-03]]`). The hosts it covers are left out of their
verdict's host lines, so a 64-host job reads as one block, not 64 lines saying the same thing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.text import Text

from vastprobe.model import NO_PROCESS, HostReport
from vastprobe.render.groups import fold_hosts
from vastprobe.render.layout import hanging
from vastprobe.report.job_joins import JobAcrossHosts, jobs_across_hosts
from vastprobe.untrusted.safe import safe


def held_jobs(reports: Sequence[HostReport]) -> list[JobAcrossHosts]:
    """The run's multi-host jobs that a rank on one of their hosts holds."""
    return [j for j in jobs_across_hosts(reports) if j.holder is not None]


def job_block(console: Console, job: JobAcrossHosts, verdict_of: Mapping[str, str], limit: int | None) -> None:
    assert job.holder is not None
    where, c = job.holder
    # a rank gone from a host with no rank of the job left: that host has no part (it crashed the table)
    hjob = next((j for t, j in job.parts if t == where), None)
    waiting = [t for t, _j in job.waiting]
    moving = [t for t, _j in job.moving]
    ranks = sum(len(j.ranks) for _t, j in job.parts)
    head = Text("  job ", style="bold")
    head.append(safe(job.parts[0][1].words, 160), style="bold")
    world = f" of {job.world_size}" if job.world_size else ""
    hanging(console, "", head, Text(f", {ranks} rank(s){world} on {len(job.parts)} hosts of this run:"))
    pad = Text("    ")
    hanging(console, "", pad + Text("held by: ", style="bold"),
            Text(f"{safe(c.label, 200)} on {safe(where, 120)} ({verdict_of.get(where, '?')}): {safe(c.why, 500)}"))  # fmt: skip
    for t, o in job.also:
        hanging(console, "", pad + Text("also:    ", style="bold"),
                Text(f"{safe(o.label, 200)} on {safe(t, 120)} ({verdict_of.get(t, '?')}): {safe(o.why, 500)}"))  # fmt: skip
    if waiting:
        # the holder host's own waiting ranks said apart: counted with the others' while only those were
        # listed, the count did not match the hosts shown (found by a helper)
        n = sum(len(j.ranks) for _t, j in job.waiting)
        here = len(hjob.waiting) if hjob is not None else 0
        also = f", and {here} on {safe(where, 120)}" if here else ""
        hanging(console, "", pad + Text("waiting: ", style="bold"),
                Text(f"{n} rank(s) on [{len(waiting)}: {fold_hosts(waiting, limit)}]{also}"))  # fmt: skip
    if moving:
        hanging(console, "", pad + Text("moving:  ", style="bold"),
                Text(f"[{len(moving)}: {fold_hosts(moving, limit)}] (their ranks show progress)"))  # fmt: skip
    # a rank named gone above is no rank missing besides (the two lines contradicted each other; found
    # by a helper)
    gone = {h.rank for _t, h in ((where, c), *job.also) if h.state in NO_PROCESS}
    missing = [m for m in job.missing if m not in gone]
    if missing:
        shown = ", ".join(map(str, missing[:16])) + (" …" if len(missing) > 16 else "")
        hanging(console, "", pad + Text("missing: ", style="bold"),
                Text(f"rank(s) {shown}: seen on no host of this run"))  # fmt: skip
