"""Findings of one run joined across ssh hops. A job on one host that waits on an ssh session to
another (`tar | ssh`, `rsync -e ssh`) names that host as a target (`Finding.remote`); when the same
run probed that host too, each side's finding says what the other side's report found, so the stall
is read once, from the waiting job to the process that holds it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from vastprobe.model import Evidence, HostReport, split_endpoint
from vastprobe.report.edits import note_on_worst, swap
from vastprobe.targets import TargetError, parse_target
from vastprobe.transport.registry import kind_for


def address(target: str) -> tuple[str, int] | None:
    """Host and port of a target as it was typed (ssh_config aliases compare by name); None for a
    target no ssh session names (`local`, a container)."""
    try:
        if not kind_for(target).addressed:
            return None
        t = parse_target(target)
    except (TargetError, ValueError):
        return None
    return t.host.lower(), t.port or 22


def host_addresses(r: HostReport) -> set[str]:
    """The addresses a host of the run answers on: its served sockets' own (not a listener's wildcard)
    and its target's, brackets stripped, lower case."""
    own = {split_endpoint(s.local)[0].strip("[]").lower() for s in r.served}
    own -= {"0.0.0.0", "::", "*", ""}
    a = address(r.target)
    if a is not None:
        own.add(a[0].strip("[]"))
    return own


def join_ssh_hops(reports: Sequence[HostReport]) -> list[HostReport]:
    """The reports, with each finding that points at another host of the run joined to that host's
    report (and that report's worst finding told who waits on it)."""
    by_address = {a: i for i, r in enumerate(reports) if (a := address(r.target)) is not None}
    served = [{(s.local, s.remote) for s in r.served} for r in reports]
    out = list(reports)
    for i, r in enumerate(reports):
        for k, f in enumerate(r.findings):
            if not f.remote:
                continue
            j = by_address.get(address(f.remote) or ("", 0))
            if j is None or j == i:
                continue
            if f.peer is not None and (f.peer.remote, f.peer.local) in served[j]:
                continue  # the session's own end is there: the connection join names what holds it, not the host's worst
            cur = out[i].findings[k]  # the same finding, as earlier joins of this run left it
            other = out[j]
            said = f"{other.target} was probed in this run: {other.verdict}" + (
                f": {other.headline}" if other.headline else ""
            )
            out[i] = swap(out[i], cur, replace(cur, evidence=(*cur.evidence, Evidence("this run", said[:400]))))
            out[j] = note_on_worst(other, f"{r.target} waits on this host: {f.summary}"[:400])
    return out
