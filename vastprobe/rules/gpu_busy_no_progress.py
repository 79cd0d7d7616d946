"""VP120 gpu-busy-no-progress: GPUs "busy" in every sample while they do no work, and a job that does
not move: the signature of a rank stuck in a collective (NCCL). A kernel that spins waiting for a
peer keeps `utilization.gpu` (kernel residency) near 100% while power stays far below its limit
(NCCL#968: "GPU util is 100% but power ~70W") or the SM clock idles; meanwhile the job's processes
use no CPU, move no I/O and its logs stay silent.

Needs two nvidia-smi samples, a utilization of at least 80% in both, power at most 35% of the
limit (or the SM clock at most 30% of its maximum) in both, and every process of the job that uses
those GPUs still between the probe's samples (CPU below 2% of one core, I/O below 64 KiB). The job's
processes are the watched ones that nvidia-smi lists as compute apps (mapped into this PID view) or
that hold /dev/nvidia<N> open. A log that grew between the samples, a process whose CPU moved, or a
field nvidia-smi reported as `[N/A]` means no finding. Without `--log` the logs cannot be checked:
the finding is then a warning."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.gpu import busy_low_power, gpu_users, low_activity
from vastprobe.analysis.progress import Progress
from vastprobe.analysis.wchan_families import family
from vastprobe.model import Evidence, Finding, Process
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("gpu-busy-no-progress", "VP120", "error", "GPUs busy at low power while the job makes no progress")

CPU_FRACTION = 0.02  # of one core: a stalled process's housekeeping threads stay below this
IO_BYTES = 64 * 1024


def stalled(ctx: Context, p: Process, pr: Progress) -> bool:
    window = ctx.snapshot.sample_window
    if not pr.sampled or window <= 0:
        return False
    cpu_s = pr.cpu_ticks / ctx.snapshot.host.clk_tck
    return cpu_s <= max(1 / ctx.snapshot.host.clk_tck, CPU_FRACTION * window) and (pr.io_bytes or 0) <= IO_BYTES


def _wait(p: Process) -> str:
    w = p.wchan if isinstance(p.wchan, str) else "?"
    fam = family(w) if isinstance(p.wchan, str) else None
    where = "no wait channel (on a CPU or between calls)" if w == "0" else (f"{w} ({fam})" if fam and fam != w else w)
    return f"state {p.last.state}, waits in {where}" if p.samples else f"state {p.state}, waits in {where}"


def check(ctx: Context) -> Iterator[Finding]:
    g = ctx.snapshot.gpus
    if not g.present or g.error is not None or not ctx.two_samples:
        return
    busy = busy_low_power(ctx.snapshot)
    if not busy:
        return
    users = gpu_users(ctx.snapshot, ctx.scope)
    uuids = {rows[-1].uuid for rows in busy.values()}
    on_busy = [u for u in users if u.gpu_uuid is None or u.gpu_uuid in uuids]
    if not on_busy:
        return  # the GPUs are someone else's
    procs = [(ctx.tree.by_pid[u.pid], u) for u in on_busy if u.pid in ctx.tree.by_pid]
    sampled = [(p, u, ctx.progress[p.pid]) for p, u in procs if ctx.progress[p.pid].sampled]
    if not sampled or not all(stalled(ctx, p, pr) for p, _u, pr in sampled):
        return  # a process moved, or none was seen twice
    healths = ctx.log_healths
    if any(h.grew for h in healths):
        return  # the job still writes its log
    ev = []
    for index, rows in sorted(busy.items()):
        per = "; ".join(f"{r.utilization_gpu:.0f}% at {low_activity(r)}" for r in rows)
        ev.append(Evidence("nvidia-smi", f"GPU {index} ({rows[-1].name}): {per}"))
    for p, u, pr in sampled:
        ev.append(
            Evidence(
                "process",
                f"{ctx.proc_label(p.pid)}: {pr.cpu_ticks} CPU tick(s) and {pr.io_bytes or 0} bytes of I/O "
                f"in {ctx.snapshot.sample_window:.1f}s, {_wait(p)}; uses the GPU: {u.how}",
            )
        )
    sev = META.severity
    if healths:
        for h in healths:
            age = f", last written {h.age:.0f}s ago" if h.age is not None else ""
            ev.append(Evidence("log", f"{h.log.path}: did not grow between the samples{age} ({h.state})"))
    else:
        sev = "warning"
        ev.append(Evidence("log", "no --log given: the job's own log was not checked"))
    gpus = ", ".join(str(i) for i in sorted(busy))
    yield META.finding(
        f"GPU {gpus} busy at low power while the job's {len(sampled)} process(es) make no progress: "
        "likely stuck in a collective",
        [p.pid for p, _u, _pr in sampled],
        ev,
        "a rank is waiting for a peer that never comes (NCCL collective): look for the rank that died or "
        "hangs on the other hosts, dump the stacks (`py-spy dump --pid N`), rerun with NCCL_DEBUG=INFO and "
        "a collective timeout (TORCH_NCCL_ASYNC_ERROR_HANDLING=1)",
        sev,
    )


RULE = Rule(META, check)
