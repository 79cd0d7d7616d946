"""The verdict a snapshot can carry. The rules' findings give a verdict (model.verdict); what the
probe itself says of its output may forbid it: forged output is never believed, and a probe that
did not finish is never healthy or degraded (what did not arrive may be the stall)."""

from __future__ import annotations

from vastprobe.model import HostSnapshot, Verdict
from vastprobe.report.probe_findings import incomplete


def carried_verdict(found: Verdict, snap: HostSnapshot) -> tuple[Verdict, str | None]:
    """The verdict a snapshot can carry, and why the host is not diagnosed when it is not: output
    someone forged is never believed (`unknown`, whatever it shows), and a probe that did not
    finish is never `healthy` or `degraded`; a stall it did see is still a stall."""
    p = snap.probe
    if p.tampering:
        return "unknown", (
            f"the probe's output was forged on the target ({len(p.tampering)} section(s) not written by the probe, "
            "dropped: see probe-output-forged): not diagnosed"
        )
    why = incomplete(snap)
    if why is None or found == "stalled":
        return found, None
    return undiagnosed(found), f"{why}: not diagnosed (a host whose probe did not finish is never reported healthy)"


def undiagnosed(found: Verdict) -> Verdict:
    """The verdict of a host that was not diagnosed (forged or unfinished output, a transport that
    did not end well, nothing matched): `unknown`, unless what it does show is a stall."""
    return "stalled" if found == "stalled" else "unknown"
