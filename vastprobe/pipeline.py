"""target -> transport -> raw output -> snapshot -> findings -> HostReport. Nothing here prints."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from vastprobe import eventloop
from vastprobe.capture import Capture
from vastprobe.probe.script import MAX_TOTAL_OUTPUT, ProbeParams, render_script
from vastprobe.probe.sections import ProbeOutput, RawSection, split_sections
from vastprobe.rule_options import RuleOptions
from vastprobe.transport.base import TransportResult
from vastprobe.workers import Workers

if TYPE_CHECKING:
    from vastprobe.model import HostReport, HostSnapshot
    from vastprobe.transport.base import Transport

#: What turns raw output into a report. Imported lazily: while SSH probes wait on the network, a
#: background thread imports these (warm_analysis), so their ~70 ms overlap the wait.
ANALYSIS_MODULES = (
    "vastprobe.parsers.snapshot",
    "vastprobe.analysis.scope",
    "vastprobe.report.host",
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
    ssh: Any = None  # transport.ssh.settings.SshOptions; typed loosely so `local` never imports asyncssh
    #: options of other transports, by kind name ({"kubectl": {"context": "prod"}}): base.TransportSettings
    transport_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def _capture(target: str, transport: str, res: TransportResult, options: DiagnoseOptions, attempts: int) -> Capture:
    return Capture(
        target=target,
        transport=transport,
        status=res.status,
        error=res.error,
        output=res.output,
        truncated=res.truncated,
        params=options.params,
        timings=res.timings,
        exit_status=res.exit_status,
        exit_signal=res.exit_signal,
        attempts=attempts,
    )


#: Seconds between the probe's own deadline on the target and the moment this side gives up:
#: the watchdog's tick (1 s), its kill and its report, and the bytes' way back.
DEADLINE_MARGIN = 3.0


def remote_deadline(seconds_left: float) -> int:
    """The probe's deadline on the target, in whole seconds: before this side's --timeout, so the
    watchdog ends the probe (and says so) while someone still reads its output."""
    return max(1, int(seconds_left - DEADLINE_MARGIN))


def _script_for(params: ProbeParams) -> Callable[[float], str]:
    return lambda left: render_script(replace(params, deadline=remote_deadline(left)))


def _transient(res: TransportResult) -> bool:
    """A run that ended with no output at all, killed or cut off rather than failing as a shell
    would (an exit status of its own: 127 for no sh, 1 for a ForceCommand that refuses): on a
    loaded machine the next run usually goes through."""
    if res.output or res.truncated or res.status not in ("ok", "probe-error"):
        return False
    return res.exit_signal is not None or res.exit_status in (None, 0)


def transport_of(target: str, options: DiagnoseOptions) -> Transport:
    """The transport that reaches `target` (registry.py). Raises TargetError for a malformed one."""
    from vastprobe.transport.base import TransportSettings
    from vastprobe.transport.registry import transport_for

    return transport_for(target, TransportSettings(options.timeout, options.ssh, options.transport_options))


async def probe_any(target: str, options: DiagnoseOptions, take: Callable[[int], bool] | None = None) -> Capture:
    """`take(n)` asks a sweep's byte budget for n more bytes of this host's output; False: stop
    reading, the output is truncated (local runs read one host and keep its own cap only). A run
    that ended with nothing written at all is tried once more, within the same --timeout."""
    from vastprobe.targets import TargetError
    from vastprobe.transport.registry import SSH, kind_or_none

    try:
        transport = transport_of(target, options)
    except TargetError as exc:
        name = (kind_or_none(target) or SSH).name
        return _capture(target, name, TransportResult("probe-error", f"{target}: {exc}", b"", None, False), options, 1)
    return await probe_with(transport, options, take)


async def probe_with(
    transport: Transport, options: DiagnoseOptions, take: Callable[[int], bool] | None = None
) -> Capture:
    """One probe over `transport` (a session's, in a watch), tried once more as probe_any says."""
    target = transport.target
    t0 = time.monotonic()
    script = _script_for(options.params)
    res = await transport.run(script, MAX_TOTAL_OUTPUT, transport.timeout, take)
    left = transport.timeout - (time.monotonic() - t0)
    if _transient(res) and left > DEADLINE_MARGIN:
        return _capture(target, transport.name, await transport.run(script, MAX_TOTAL_OUTPUT, left, take), options, 2)
    return _capture(target, transport.name, res, options, 1)


#: Seconds one host's analysis (parsing, rules) may take; past it the host's report says so and
#: the sweep moves on. A 32 MiB capture of 100k processes takes a few seconds here.
ANALYSIS_BUDGET_S = 30.0
#: Output up to this size is analysed on the event loop itself. Every parser is linear in its
#: section and every section is capped, so such a capture takes milliseconds (a 40 KB host: 3-5 ms)
#: and a budget checkpoint ends it early; handing it to a thread cost more than the analysis:
#: the loop and the thread take turns on the GIL and the loop serves its sockets in small batches
#: (~2 ms of controller CPU a host over 1,000 simulated hosts: docs/benchmarks.md). Larger output,
#: where a hostile target's bytes could keep the loop busy, goes to the analysis threads.
INLINE_ANALYSIS_MAX = 256 * 1024
#: Analyses running at once across a sweep. They share one GIL, so more would only take turns
#: with the event loop, and each holds its raw output and snapshot in memory while it runs.
ANALYSIS_WORKERS = 2
#: Client-side cap of a section whose size the probe bounds by its command (a grep pattern,
#: `tail -c`, `head -n`) rather than a byte count; sections with a byte cap get it plus slack.
CLIENT_SECTION_CAP = 2 * 1024 * 1024
CAP_SLACK = 64 * 1024
#: Output above this size is dropped from the parsers' shared cache as soon as it is parsed.
BIG_OUTPUT = 1024 * 1024
#: A section whose parser fails is dropped and the capture parsed again, at most this many times.
MAX_UNREADABLE_SECTIONS = 8


class AnalysisBudgetExceeded(Exception):
    """The analysis ran past its time budget, or the caller stopped waiting for it."""


@dataclass(frozen=True)
class _Budget:
    deadline: float | None = None
    cancelled: threading.Event | None = None

    def check(self, stage: str) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise AnalysisBudgetExceeded(f"stopped during {stage}")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise AnalysisBudgetExceeded(f"over budget during {stage}")


def _section_cap(name: str, params: ProbeParams) -> int:
    from vastprobe.probe import sources as src

    if src.LOGTAIL.pattern.match(name):
        return max(0, params.log_tail_bytes) + CAP_SLACK
    source = src.source_of(name)
    if source is not None and source.cap is not None:
        return source.cap + CAP_SLACK
    return CLIENT_SECTION_CAP


def _client_caps(out: ProbeOutput, params: ProbeParams) -> tuple[ProbeOutput, list[str]]:
    """Every section cut at its declared size on the client too: the probe's own bounds are the
    target's word, and a hostile target's sections can be any size up to the output cap."""
    cut: dict[str, RawSection] = {}
    notes = []
    for name, sec in out.sections.items():
        cap = _section_cap(name, params)
        if len(sec.text) > cap:
            keep = sec.text[:cap]
            keep = keep[: keep.rfind("\n") + 1] if "\n" in keep else keep
            cut[name] = RawSection(name=name, text=keep, rc=None)
            notes.append(f"section {name} was {len(sec.text)} bytes, over its cap of {cap}; cut on the client")
    if not cut:
        return out, notes
    return replace(out, sections={**out.sections, **cut}), notes


def _parse(capture: Capture, budget: _Budget) -> tuple[HostSnapshot | None, str | None]:
    from vastprobe.parsers.procfs_lines import split_by_file
    from vastprobe.parsers.reading import SectionUnreadable
    from vastprobe.parsers.snapshot import build_snapshot

    out = split_sections(capture.output, capture.params.boundary, capture.params)
    if not out.framed:
        return None, _unframed(capture)
    out, notes = _client_caps(out, capture.params)
    unreadable: list[tuple[str, str]] = []
    while True:
        budget.check("parsing")
        try:
            snap = build_snapshot(out, capture.params, capture.target, capture.transport, len(capture.output))
            break
        except SectionUnreadable as exc:  # a parser bug or input no parser foresaw: that section, not the host
            names = exc.sections
            if not names or len(unreadable) >= MAX_UNREADABLE_SECTIONS:
                raise exc.cause from None  # no section to leave out, or too many: the host's failure
            unreadable += [(n, exc.reason) for n in names]
            out = replace(out, sections={k: v for k, v in out.sections.items() if k not in names})
        finally:  # its cache holds sections' text and lines: a big output must not outlive its parse
            if len(capture.output) > BIG_OUTPUT:
                split_by_file.cache_clear()
    if unreadable:
        snap = replace(snap, probe=replace(snap.probe, unreadable_sections=tuple(unreadable)))
    for note in notes:
        snap = _note(snap, note)
    if capture.truncated and len(capture.output) >= MAX_TOTAL_OUTPUT:
        snap = _note(snap, f"output cap of {MAX_TOTAL_OUTPUT} bytes reached; reading stopped")
    elif capture.truncated:  # fanout.py: the budget for bytes in flight across all hosts
        snap = _note(
            snap,
            f"reading stopped at {len(capture.output)} bytes: the sweep's budget for output held across "
            "all hosts at once was spent (docs/architecture.md, Bounds)",
        )
    return snap, None


def _unframed(capture: Capture) -> str:
    """Why output that is not the probe's came back: how the target's shell ended, and whether
    it was tried twice."""
    from vastprobe.transport.base import ended

    how = ended(capture.exit_status, capture.exit_signal)
    twice = " (twice: the probe was run again after a first run that wrote nothing)" if capture.attempts > 1 else ""
    if capture.truncated and len(capture.output) < MAX_TOTAL_OUTPUT:
        return (
            f"reading stopped at {len(capture.output)} bytes, before the probe's first section: the sweep's "
            "budget for output held across all hosts at once was spent (docs/architecture.md, Bounds)"
        )
    if not capture.output:
        return f"the target wrote nothing: {how}{twice}"
    head = capture.output[:120].decode("utf-8", "replace")
    return f"the target's output is not the probe's framing ({how}{twice}; first bytes: {head!r})"


def snapshot_of(capture: Capture) -> tuple[HostSnapshot | None, str | None]:
    """The snapshot, or why the output is not a probe's output or could not be read at all."""
    try:
        return _parse(capture, _Budget())
    except Exception as exc:
        return None, _analysis_failed(exc)


def _analysis_failed(exc: BaseException) -> str:
    return (
        f"the probe's output could not be analysed ({type(exc).__name__}: {str(exc)[:300]}); "
        "please report this with `vastprobe collect`'s capture"
    )


def _note(snap: HostSnapshot, note: str) -> HostSnapshot:
    return replace(snap, notes=(*snap.notes, note))


def report_or_raise(capture: Capture, options: DiagnoseOptions, budget: _Budget | None = None) -> HostReport:
    """The report, raising when something in vastprobe breaks (report_of never does)."""
    from vastprobe.analysis.context import Context
    from vastprobe.analysis.scope import compute_scope
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.report.host import host_report, nothing_matched, unanalysed

    budget = budget or _Budget()
    timings = dict(capture.timings)
    if capture.status != "ok" and not _partial(capture):
        return unanalysed(capture.target, capture.status, capture.error, timings)
    t0 = time.monotonic()
    snap, err = _parse(capture, budget)
    if snap is None:
        if capture.status != "ok":  # a timeout or lost connection before the first section: as it ended
            return unanalysed(capture.target, capture.status, capture.error, timings)
        return unanalysed(capture.target, "probe-error", err, timings)
    snap = _printable_params(snap)
    budget.check("the process tree")
    tree = ProcessTree(snap)
    scope = compute_scope(snap, options.pids, options.matches, tree, budget.check)
    if (options.pids or options.matches) and not scope:  # nothing to diagnose: say so, never "healthy"
        asked = [f"--pid {p}" for p in options.pids] + [f"--match {printable(m)!r}" for m in options.matches]
        return nothing_matched(capture.target, snap, asked, timings, scope)
    budget.check("the rules")
    rule_options = replace(options.rules, explicit_scope=bool(options.pids or options.matches))
    ctx = Context(snap, scope, rule_options, tree)
    report = host_report(capture.target, capture.status, capture.error, ctx, timings, scope)
    timings["analysis"] = round(time.monotonic() - t0, 4)
    return report


def _partial(capture: Capture) -> bool:
    """A run cut off by the deadline or a lost connection, whose output so far is worth analysing."""
    return bool(capture.output) and capture.status in ("timeout", "probe-error")


def report_of(
    capture: Capture,
    options: DiagnoseOptions,
    budget_s: float | None = None,
    cancelled: threading.Event | None = None,
) -> HostReport:
    """Never raises: a capture that cannot be analysed at all is a `probe-error` with the reason,
    and one host's capture never costs the others of a sweep their reports."""

    budget = _Budget(time.monotonic() + budget_s if budget_s is not None else None, cancelled)
    from vastprobe.analysis.scope import MatchTooSlow

    try:
        return report_or_raise(capture, options, budget)
    except AnalysisBudgetExceeded:
        return _over_budget(capture, budget_s)
    except MatchTooSlow as exc:  # the user's pattern, not vastprobe: no "please report this"
        return _failed(capture, str(exc))
    except Exception as exc:
        return _failed(capture, _analysis_failed(exc))


def _failed(capture: Capture, error: str) -> HostReport:
    """A host whose output was not analysed: a probe-error with the reason (and, when that much
    works, its headline)."""
    from vastprobe.model import HostReport
    from vastprobe.report.story import with_story

    r = HostReport(capture.target, "probe-error", error, "unknown", (), None, dict(capture.timings))
    try:
        return with_story(r)
    except Exception:
        return r


def _over_budget(capture: Capture, budget_s: float | None) -> HostReport:
    return _failed(
        capture,
        f"analysing the probe's output ({len(capture.output)} bytes) took longer than its budget of "
        f"{budget_s or ANALYSIS_BUDGET_S:g}s; not analysed (collect it with `vastprobe collect` and analyze it offline)",
    )


_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


_workers = Workers(ANALYSIS_WORKERS)


async def report_in_worker(capture: Capture, options: DiagnoseOptions, budget_s: float | None = None) -> HostReport:
    """report_of, in a worker thread for output over INLINE_ANALYSIS_MAX, so the event
    loop keeps serving every other host's connection while a large output is parsed; past
    `budget_s` the host gets its probe-error and the worker is told to stop at its next checkpoint."""
    if capture.status != "ok" and not _partial(capture):
        return report_of(capture, options)
    budget_s = ANALYSIS_BUDGET_S if budget_s is None else budget_s
    if len(capture.output) <= INLINE_ANALYSIS_MAX:
        return report_of(capture, options, budget_s)
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(ANALYSIS_WORKERS)
    async with gate:
        done: asyncio.Future[HostReport] = loop.create_future()
        cancelled = threading.Event()

        def settle(r: HostReport) -> None:
            if not done.done():
                done.set_result(r)

        def work() -> None:
            r = report_of(capture, options, budget_s, cancelled)
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (Ctrl-C): nobody waits
                loop.call_soon_threadsafe(settle, r)

        _workers.submit(work)
        try:
            return await asyncio.wait_for(asyncio.shield(done), budget_s + 1.0)
        except TimeoutError:
            return _over_budget(capture, budget_s)
        finally:
            cancelled.set()


def printable(text: str) -> str:
    """Command-line text as it can be shown and saved. Python keeps an argument's undecodable bytes
    as lone surrogates: right for the probe (a --log path's own bytes reach the target), wrong in
    a report (no UTF-8 file can hold them), so there each is U+FFFD."""
    if text.isascii() or not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


def _printable_params(snap: HostSnapshot) -> HostSnapshot:
    """The --log paths and --artifacts globs a snapshot repeats, printable (rules quote them)."""
    logs = tuple(replace(lg, path=printable(lg.path)) if printable(lg.path) != lg.path else lg for lg in snap.logs)
    arts = tuple(
        replace(a, pattern=printable(a.pattern)) if printable(a.pattern) != a.pattern else a for a in snap.artifacts
    )
    if logs == snap.logs and arts == snap.artifacts:
        return snap
    return replace(snap, logs=logs, artifacts=arts)


async def _diagnose_all(targets: Sequence[str], options: DiagnoseOptions) -> list[HostReport]:
    async def one(target: str) -> HostReport:
        return await report_in_worker(await probe_any(target, options), options)

    return list(await asyncio.gather(*(one(t) for t in targets)))


def _this_machine(target: str) -> bool:
    """A target probed on this machine with no wait on a network or a runtime to overlap the
    analysis imports with (`local`)."""
    from vastprobe.transport.registry import kind_or_none

    kind = kind_or_none(target)
    return kind is not None and kind.this_machine


def warm_for(targets: Sequence[str]) -> None:
    """The analysis imports warmed while the probes wait (warm_analysis), unless every target is
    this machine: there is no wait on a network or a runtime to overlap them with."""
    if not all(_this_machine(t) for t in targets):
        warm_analysis()


def probe_and_report(targets: Sequence[str], options: DiagnoseOptions) -> list[HostReport]:
    """Every target at once; one failing target never affects another."""
    warm_for(targets)
    return eventloop.run(_diagnose_all(targets, options))


def collect_target(target: str, options: DiagnoseOptions) -> Capture:
    warm_for([target])
    return eventloop.run(probe_any(target, options))
