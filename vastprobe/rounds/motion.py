"""What moved on a host between two probes: rates of CPU, I/O and log growth, and GPU use, per
process of the job. A single report says whether a host is stuck; a watch says what it is doing,
so rates are taken between the last sample of one round and the last sample of the next (the
first round: between its own two samples), on the target's own clock."""

from __future__ import annotations

from dataclasses import dataclass

from vastprobe.analysis.gpu import match_host_pid
from vastprobe.analysis.logs import found_logs
from vastprobe.model import (
    FileStat,
    HostReport,
    HostSnapshot,
    Process,
    ProcIO,
    ProcSample,
    Unavailable,
    Verdict,
    available,
)

#: Processes a round lists, busiest first: a watch is read at a glance.
SHOWN_PROCESSES = 12


@dataclass(frozen=True)
class ProcessMotion:
    pid: int
    comm: str
    state: str  # at the round's last sample
    wchan: str | None  # where it sleeps; None when running or not read
    cpu_percent: float | None  # of one CPU; None: not seen at both ends of the span
    read_per_s: float | None  # bytes/s through read() and friends (rchar)
    write_per_s: float | None  # bytes/s (wchar)
    gpu_memory_mib: float | None  # what nvidia-smi says this process holds; None: none or not known


@dataclass(frozen=True)
class LogMotion:
    path: str
    size: int | None
    growth_per_s: float | None  # None: not readable at both ends
    idle_s: float | None  # since its last write (the target's clock)


@dataclass(frozen=True)
class GpuMotion:
    index: int
    utilization: float | None  # percent, at the round's last sample
    memory_used_mib: float | None


@dataclass(frozen=True)
class VerdictChange:
    round: int
    wall: float  # this machine's clock: when the round that saw it ended
    before: Verdict | None  # None: the first round
    after: Verdict
    headline: str | None


@dataclass(frozen=True)
class Round:
    number: int  # from 1
    wall: float  # this machine's clock when the round's report was ready
    report: HostReport
    span_s: float | None  # seconds the rates cover; None: nothing to compare yet
    processes: tuple[ProcessMotion, ...]  # the busiest SHOWN_PROCESSES of the job's scope
    hidden: int  # scope processes past SHOWN_PROCESSES
    logs: tuple[LogMotion, ...]
    gpus: tuple[GpuMotion, ...]
    change: VerdictChange | None  # the verdict changed in this round (the first round always does)
    gone: tuple[tuple[int, str], ...] = ()  # (pid, comm) in the previous round's scope, not seen in this one


def _key(p: Process) -> tuple[int, int]:
    return p.pid, p.starttime  # a PID reused between rounds is another process


def _last_uptime(snap: HostSnapshot) -> float | None:
    ups = snap.probe.sample_uptimes
    return ups[-1] if ups else None


def _rate(later: float, earlier: float, span: float) -> float:
    return max(0.0, later - earlier) / span


def _io(s: ProcSample) -> ProcIO | None:
    return s.io if isinstance(s.io, ProcIO) else None


def _process_motion(p: Process, before: ProcSample | None, span: float | None, clk_tck: int,
                    gpu_mib: float | None) -> ProcessMotion:  # fmt: skip
    now = p.samples[-1] if p.samples else None
    cpu = read = write = None
    if now is not None and before is not None and span:
        cpu = 100.0 * _rate(now.cpu_ticks, before.cpu_ticks, span) / clk_tck
        a, b = _io(before), _io(now)
        if a is not None and b is not None:
            read, write = _rate(b.rchar, a.rchar, span), _rate(b.wchar, a.wchar, span)
    wchan = p.wchan if isinstance(p.wchan, str) and p.wchan not in ("0", "") else None
    return ProcessMotion(p.pid, p.comm, now.state if now else p.state, wchan, cpu, read, write, gpu_mib)


def _gpu_memory(snap: HostSnapshot) -> dict[int, float]:
    """GPU memory per process, nvidia-smi's compute apps mapped into the probe's view: NVML names
    host PIDs, which inside a container are other processes' numbers (analysis.gpu.match_host_pid)."""
    held: dict[int, float] = {}
    apps = () if isinstance(snap.gpus.apps, Unavailable) else snap.gpus.apps
    for app in apps:
        p, _how = match_host_pid(snap, app.pid, app.process_name)
        if p is not None and app.used_memory_mib is not None:
            held[p.pid] = held.get(p.pid, 0.0) + app.used_memory_mib
    return held


def _last_stat(stats: tuple[FileStat | Unavailable, ...]) -> FileStat | None:
    last = stats[-1] if stats else None
    return last if isinstance(last, FileStat) else None


def _log_motions(snap: HostSnapshot, scope: frozenset[int] | None, previous: Round | None,
                 span: float | None) -> tuple[LogMotion, ...]:  # fmt: skip
    """The --log files and, for a job named with --pid/--match (`scope`), the files it holds open
    write-only (found: its stdout, stderr and logs), each with its growth since the previous
    round, or between this round's samples."""
    sizes = {m.path: m.size for m in previous.logs} if previous is not None else {}
    btime, now = available(snap.host.btime), _last_uptime(snap)
    ups = snap.probe.sample_uptimes
    out = []
    for log in (*snap.logs, *(found_logs(snap, scope) if scope is not None else ())):
        stat = _last_stat(log.stats)
        if previous is not None:
            before, over = sizes.get(log.path), span
        else:
            first = log.stats[0] if len(log.stats) >= 2 and isinstance(log.stats[0], FileStat) else None
            before, over = (first.size if first else None), (ups[-1] - ups[0] if len(ups) >= 2 else None)
        growth = (stat.size - before) / over if stat is not None and before is not None and over else None
        idle = (
            max(0.0, btime + now - stat.mtime) if stat is not None and btime is not None and now is not None else None
        )
        out.append(LogMotion(log.path, stat.size if stat else None, growth, idle))
    return tuple(out)


def _gpu_motions(snap: HostSnapshot) -> tuple[GpuMotion, ...]:
    if not snap.gpus.samples:
        return ()
    return tuple(GpuMotion(g.index, g.utilization_gpu, g.memory_used_mib) for g in snap.gpus.samples[-1])


def _gone(snap: HostSnapshot | None, previous: Round | None) -> tuple[tuple[int, str], ...]:
    """The previous round's processes in scope that this round does not see (exited, or a PID reused)."""
    before = previous.report.snapshot if previous is not None else None
    if previous is None or before is None or snap is None:
        return ()
    now = {_key(p) for p in snap.processes}
    scope = set(previous.report.scope)
    return tuple((p.pid, p.comm) for p in before.processes if p.pid in scope and _key(p) not in now)


def next_round(number: int, wall: float, report: HostReport, previous: Round | None, explicit: bool = False) -> Round:
    """The round `number` made of `report`, its rates taken against `previous` (None: the first).
    `explicit`: --pid/--match named the job, whose held files are then its logs too."""
    verdict_before = previous.report.verdict if previous is not None else None
    change = None
    if verdict_before != report.verdict:
        change = VerdictChange(number, wall, verdict_before, report.verdict, report.headline)
    snap = report.snapshot
    gone = _gone(snap, previous)
    if snap is None:
        return Round(number, wall, report, None, (), 0, (), (), change, gone)
    prev_snap = previous.report.snapshot if previous is not None else None
    earlier: dict[tuple[int, int], ProcSample] = {}
    span: float | None = None
    now = _last_uptime(snap)
    then = _last_uptime(prev_snap) if prev_snap is not None else None
    if prev_snap is not None and now is not None and then is not None and now > then:
        span = now - then
        earlier = {_key(p): p.samples[-1] for p in prev_snap.processes if p.samples}
    elif prev_snap is None and len(snap.probe.sample_uptimes) >= 2:
        span = snap.probe.sample_uptimes[-1] - snap.probe.sample_uptimes[0]
        earlier = {_key(p): p.samples[0] for p in snap.processes if len(p.samples) >= 2}
    # a named job that matched nothing (it exited) has no processes to show, not the whole host's
    scope = set(report.scope) if report.scope or explicit else {p.pid for p in snap.processes if not p.kernel_thread}
    gpu = _gpu_memory(snap)
    clk = snap.host.clk_tck or 100
    moves = [
        _process_motion(p, earlier.get(_key(p)), span, clk, gpu.get(p.pid))
        for p in snap.processes
        if p.pid in scope and not p.kernel_thread
    ]
    moves.sort(key=lambda m: (-(m.cpu_percent or 0.0), -((m.read_per_s or 0.0) + (m.write_per_s or 0.0)), m.pid))
    shown = tuple(moves[:SHOWN_PROCESSES])
    logs = _log_motions(snap, frozenset(scope) if explicit else None, previous if prev_snap is not None else None, span)
    return Round(number, wall, report, span, shown, len(moves) - len(shown), logs, _gpu_motions(snap), change, gone)
