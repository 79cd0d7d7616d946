"""What the probe itself could not see or say, as findings (VP900-903): a probe that did not
finish, output someone forged, sections no parser could read, --py-spy that took no stack. They
rest on the snapshot alone, before and beside the rules."""

from __future__ import annotations

from vastprobe.model import Evidence, Finding, HostSnapshot
from vastprobe.rules.base import RuleMeta

PROBE_INCOMPLETE = RuleMeta(
    "probe-incomplete", "VP900", "info", "the probe did not finish, or part of its output is missing"
)
PROBE_OUTPUT_FORGED = RuleMeta(
    "probe-output-forged", "VP901", "warning", "the probe's output holds sections the probe did not write"
)
PROBE_SECTION_UNREADABLE = RuleMeta(
    "probe-section-unreadable", "VP902", "warning", "a section of the probe's output could not be read"
)
PY_SPY_UNAVAILABLE = RuleMeta("py-spy-unavailable", "VP903", "info", "--py-spy was asked and took no Python stack")
#: The findings about the probe itself, listed by `vastprobe rules` after the rules (docs/rules has their pages)
PROBE_FINDINGS = (PROBE_INCOMPLETE, PROBE_OUTPUT_FORGED, PROBE_SECTION_UNREADABLE, PY_SPY_UNAVAILABLE)


def incomplete(snap: HostSnapshot) -> str | None:
    """Why this snapshot cannot vouch for the host, or None: the probe did not reach its end, or
    its process section (the first sample, what every rule reads) is missing or cut."""
    p = snap.probe
    proc = next((n for n in p.unfinished_sections if n == "s0.proc"), None)
    if not p.complete:
        return "the probe did not finish" + (" (its watchdog's deadline ended it)" if p.deadline_hit else "")
    if proc is not None:
        return "the probe's process section (s0.proc) did not arrive whole"
    return None


def probe_findings(snap: HostSnapshot) -> tuple[Finding, ...]:
    """What the probe itself could not see is worth saying (VP900, info); output someone forged
    (VP901) and sections no parser could read (VP902) are warnings: a report resting on them must
    not read healthy."""
    p = snap.probe
    out: list[Finding] = []
    if p.tampering:
        out.append(
            PROBE_OUTPUT_FORGED.finding(
                summary="the probe's output holds sections the probe did not write (repeated, out of its order, "
                "or never written by it): something on the target forged output; every copy of each was dropped, "
                "and the host is not diagnosed",
                pids=(),
                evidence=tuple(Evidence("probe", t) for t in p.tampering),
                hint="find who wrote them: file names in /tmp and process names are the usual carriers; "
                "see docs/rules/probe-output-forged.md",
            )
        )
    if p.unreadable_sections:
        out.append(
            PROBE_SECTION_UNREADABLE.finding(
                summary=f"{len(p.unreadable_sections)} section(s) of the probe's output could not be read and "
                "were left out; findings rest on the rest",
                pids=(),
                evidence=tuple(Evidence("probe", f"section {n} unreadable: {why}") for n, why in p.unreadable_sections),
                hint="please report this with `vastprobe collect`'s capture",
            )
        )
    if snap.python_stacks_note:  # --py-spy was asked and took nothing (or not all): said, not only in JSON
        out.append(
            PY_SPY_UNAVAILABLE.finding(
                summary=f"--py-spy: {snap.python_stacks_note}",
                pids=(),
                evidence=(Evidence("probe", snap.python_stacks_note),),
                hint="install py-spy on the target (`pip install py-spy` in any Python there, or its static binary on "
                "PATH); it reads a process's memory, so it needs root or CAP_SYS_PTRACE in a container",
            )
        )
    if p.complete and not p.truncated_sections and not p.unfinished_sections and not snap.notes:
        return tuple(out)
    ev = [Evidence("probe", f"section not finished: {n}") for n in p.unfinished_sections]
    ev += [Evidence("probe", f"section cut short: {n}") for n in p.truncated_sections if n not in p.unfinished_sections]
    ev += [Evidence("probe", n) for n in snap.notes]
    if not p.complete:
        ev.append(Evidence("probe", "the probe did not reach its end" + (" (deadline)" if p.deadline_hit else "")))
    why = incomplete(snap)
    out.append(
        PROBE_INCOMPLETE.finding(
            severity="warning" if why else "info",
            summary=f"{why}; findings rest on what arrived, and the host is never reported healthy"
            if why
            else "part of the probe's output is missing; findings rest on what arrived",
            pids=(),
            evidence=tuple(ev),
            hint="raise --timeout, or narrow the scope with --pid/--match; a probe that keeps stopping early "
            "may be killed on the target (look for who sends signals to sh there)",
        )
    )
    return tuple(out)
