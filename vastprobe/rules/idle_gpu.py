"""VP103 idle-gpu: GPUs near 0% in every sample while the workload should be using them. Memory
held with no kernels running means a hung GPU job; nothing on the GPU means the GPU work never
started or died."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.gpu import IDLE_UTIL, gpu_users, idle_gpus, per_gpu
from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("idle-gpu", "VP103", "error", "GPUs idle while the workload should be using them")


def check(ctx: Context) -> Iterator[Finding]:
    g = ctx.snapshot.gpus
    if not g.present or g.error is not None or not g.samples:
        return  # no GPU, no nvidia-smi, or a driver error (that is gpu-driver-error's)
    expected, why = ctx.gpu_expected
    if not expected:
        return
    users = gpu_users(ctx.snapshot, ctx.scope)
    uuids = {i: rows[-1].uuid for i, rows in per_gpu(ctx.snapshot).items()}
    for idle in idle_gpus(ctx.snapshot):
        mine = [u for u in users if u.gpu_uuid in (None, uuids.get(idle.index))]
        ev = [
            Evidence(
                "nvidia-smi",
                f"GPU {idle.index} ({idle.name}) utilization {list(idle.utilizations)}% over {len(idle.utilizations)} sample(s)",
            ),
            Evidence("expected", why),
        ]
        if idle.memory_used_mib is not None:
            ev.append(Evidence("nvidia-smi", f"memory used {idle.memory_used_mib:.0f} MiB"))
        ev += [Evidence("uses the GPU", f"{ctx.proc_label(u.pid)}: {u.how}") for u in mine[:8]]
        if idle.allocated:
            summary = (
                f"GPU {idle.index} holds {idle.memory_used_mib:.0f} MiB but runs no kernels (below {IDLE_UTIL:.0f}%)"
            )
            hint = "a context is alive but idle: the job is blocked before its GPU work (see the wait chain) or hung in the driver"
        else:
            summary = f"GPU {idle.index} has nothing on it while the workload should be using it"
            hint = "the GPU work never started or died: check for OOM kills, crashed children and the job's log"
        sev = "error" if len(idle.utilizations) >= 2 else "warning"  # one 0% reading is weak evidence
        if idle.allocated and mine and all(ctx.waits_for_requests(u.pid) for u in mine):
            # an inference server with no requests holds its model and runs nothing: idle by design, as a
            # quiet daemon's log is; it read STALLED, exit 1 (found by a helper)
            sev, summary = "info", summary + ": its holder is a server waiting for requests"
            hint = "an idle inference server holds its model in GPU memory; if requests should be arriving, check its clients"
        yield META.finding(summary, [u.pid for u in mine], ev, hint, sev)  # type: ignore[arg-type]


RULE = Rule(META, check)
