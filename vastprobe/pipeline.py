"""target -> transport -> raw output -> snapshot -> findings -> HostReport. Nothing here prints."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from vastprobe.capture import Capture
from vastprobe.options import RuleOptions
from vastprobe.probe.render import MAX_TOTAL_OUTPUT, ProbeParams, render_script
from vastprobe.probe.sections import split_sections
from vastprobe.transport.base import TransportResult

if TYPE_CHECKING:
    from vastprobe.model import Finding, HostReport, HostSnapshot
    from vastprobe.rules.base import Context

#: What turns raw output into a report. Imported lazily: while SSH probes wait on the network, a
#: background thread imports these (warm_analysis), so their ~70 ms overlap the wait.
ANALYSIS_MODULES = (
    "vastprobe.parsers.snapshot",
    "vastprobe.analysis.scope",
    "vastprobe.rules.engine",
    "vastprobe.render.jsonable",
)


def warm_analysis() -> None:
    import importlib

    def load() -> None:
        for name in ANALYSIS_MODULES:
            importlib.import_module(name)

    threading.Thread(target=load, name="vastprobe-warm-imports", daemon=True).start()


@dataclass(frozen=True)
class DiagnoseOptions:
    params: ProbeParams = field(default_factory=ProbeParams)
    timeout: float = 60.0
    pids: tuple[int, ...] = ()
    matches: tuple[str, ...] = ()
    rules: RuleOptions = field(default_factory=RuleOptions)
    ssh: Any = None  # transport.ssh.SshOptions; typed loosely so `local` never imports asyncssh


def _capture(target: str, transport: str, res: TransportResult, options: DiagnoseOptions) -> Capture:
    return Capture(
        target=target,
        transport=transport,
        status=res.status,
        error=res.error,
        output=res.output,
        truncated=res.truncated,
        params=options.params,
        timings=res.timings,
    )


def probe_local(target: str, options: DiagnoseOptions) -> Capture:
    from vastprobe.transport.local import run_local

    res = run_local(render_script(options.params), MAX_TOTAL_OUTPUT, options.timeout)
    return _capture(target, "local", res, options)


async def probe_ssh(target: str, options: DiagnoseOptions) -> Capture:
    from vastprobe.transport.ssh import SshOptions, run_ssh

    ssh = options.ssh or SshOptions(timeout=options.timeout)
    res = await run_ssh(target, render_script(options.params), MAX_TOTAL_OUTPUT, ssh)
    return _capture(target, "ssh", res, options)


async def probe_any(target: str, options: DiagnoseOptions) -> Capture:
    if target == "local":
        return await asyncio.to_thread(probe_local, target, options)
    return await probe_ssh(target, options)


def parse_capture(capture: Capture) -> tuple[HostSnapshot | None, str | None]:
    """The snapshot, or why the output is not a probe's output."""
    from vastprobe.parsers.snapshot import build_snapshot

    out = split_sections(capture.output, capture.params.boundary)
    if not out.framed:
        head = capture.output[:120].decode("utf-8", "replace")
        return None, f"the target's output is not the probe's framing (first bytes: {head!r})"
    snap = build_snapshot(out, capture.params, capture.target, capture.transport, len(capture.output))
    if capture.truncated:
        snap = _note(snap, f"output cap of {MAX_TOTAL_OUTPUT} bytes reached; reading stopped")
    return snap, None


def _note(snap: HostSnapshot, note: str) -> HostSnapshot:
    return replace(snap, notes=(*snap.notes, note))


def report_from_capture(capture: Capture, options: DiagnoseOptions) -> HostReport:
    from vastprobe.analysis.scope import compute_scope
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.model import HostReport
    from vastprobe.rules.base import Context
    from vastprobe.rules.engine import run_rules, verdict

    timings = dict(capture.timings)
    if capture.status != "ok":
        return _told(HostReport(capture.target, capture.status, capture.error, "unknown", (), None, timings))
    t0 = time.monotonic()
    snap, err = parse_capture(capture)
    if snap is None:
        return _told(HostReport(capture.target, "probe-error", err, "unknown", (), None, timings))
    tree = ProcessTree(snap)
    scope = compute_scope(snap, options.pids, options.matches, tree)
    if (options.pids or options.matches) and not scope:  # nothing to diagnose: say so, never "healthy"
        return _told(HostReport(
            capture.target, "ok", _no_process_matches(options, len(snap.processes)), "unknown",
            _probe_findings(snap), snap, timings, scope,
        ))  # fmt: skip
    rule_options = replace(options.rules, explicit_scope=bool(options.pids or options.matches))
    ctx = Context(snap, scope, rule_options, tree)
    findings = run_rules(snap, scope, rule_options, tree, context=ctx)
    findings = (*findings, *_probe_findings(snap))
    report = _told(HostReport(capture.target, "ok", None, verdict(findings), findings, snap, timings, scope), ctx)
    timings["analysis"] = round(time.monotonic() - t0, 4)
    return report


def _told(r: HostReport, ctx: Context | None = None) -> HostReport:
    """The report with its findings grouped into incidents, its headline and, for a stall, its timeline."""
    from vastprobe.analysis.incidents import build_incidents, host_headline
    from vastprobe.analysis.timeline import build_timeline

    incidents = build_incidents(r.findings, ctx)
    timeline = build_timeline(ctx, incidents) if ctx is not None and r.verdict in ("stalled", "degraded") else ()
    headline = host_headline(r.verdict, incidents, len(r.scope), r.error)
    return replace(r, headline=headline, incidents=incidents, timeline=timeline)


def _no_process_matches(options: DiagnoseOptions, n_processes: int) -> str:
    asked = [f"--pid {p}" for p in options.pids] + [f"--match {m!r}" for m in options.matches]
    return (
        f"no process on the target matches {' '.join(asked)} ({n_processes} processes seen): "
        "nothing to diagnose; check the PID or pattern (`vastprobe diagnose TARGET` without them lists every process)"
    )


def _probe_findings(snap: HostSnapshot) -> tuple[Finding, ...]:
    """What the probe itself could not see is worth saying, never worth alarming."""
    from vastprobe.model import Evidence, Finding

    p = snap.probe
    if p.complete and not p.truncated_sections and not snap.notes:
        return ()
    ev = [Evidence("probe", f"section cut short: {n}") for n in p.truncated_sections]
    ev += [Evidence("probe", n) for n in snap.notes]
    if not p.complete:
        ev.append(Evidence("probe", "the probe did not reach its end" + (" (deadline)" if p.deadline_hit else "")))
    return (
        Finding(
            rule="probe-incomplete",
            code="VP900",
            severity="info",
            summary="part of the probe's output is missing; findings rest on what arrived",
            pids=(),
            evidence=tuple(ev),
            hint="raise --timeout, or narrow the scope with --pid/--match",
        ),
    )


async def _diagnose_all(targets: Sequence[str], options: DiagnoseOptions) -> list[HostReport]:
    async def one(target: str) -> HostReport:
        return report_from_capture(await probe_any(target, options), options)

    return list(await asyncio.gather(*(one(t) for t in targets)))


def diagnose_targets(targets: Sequence[str], options: DiagnoseOptions) -> list[HostReport]:
    """Every target at once; one failing target never affects another."""
    if any(t != "local" for t in targets):
        warm_analysis()
    return asyncio.run(_diagnose_all(targets, options))


def collect_target(target: str, options: DiagnoseOptions) -> Capture:
    if target != "local":
        warm_analysis()
    return asyncio.run(probe_any(target, options))
