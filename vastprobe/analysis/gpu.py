"""Is the GPU idle while the workload should be using it?"""

from __future__ import annotations

from dataclasses import dataclass

from vastprobe.model import GpuSample, HostSnapshot, Unavailable

IDLE_UTIL = 5.0  # percent
ALLOCATED_MIB = 512.0  # more than a driver context alone


@dataclass(frozen=True)
class GpuIdle:
    index: int
    name: str
    utilizations: tuple[float, ...]
    memory_used_mib: float | None
    allocated: bool  # memory held: a context that runs no kernels (hung), vs nothing on the GPU


def gpu_holders(snapshot: HostSnapshot, scope: frozenset[int]) -> list[int]:
    """In-scope processes with a GPU device (`/dev/nvidia<N>`) open: NVML's PIDs are host PIDs."""
    out = []
    for p in snapshot.processes:
        if p.pid not in scope or isinstance(p.fds, Unavailable):
            continue
        if any(e.target.startswith("/dev/nvidia") and e.target[11:].isdigit() for e in p.fds):
            out.append(p.pid)
    return out


def gpu_expected(snapshot: HostSnapshot, scope: frozenset[int], expect: bool | None) -> tuple[bool, str]:
    if expect is not None:
        return expect, "--expect-gpu" if expect else "--no-expect-gpu"
    holders = gpu_holders(snapshot, scope)
    if holders:
        return True, f"watched processes hold /dev/nvidia* open: {holders[:8]}"
    for sample in snapshot.gpus.samples[:1]:
        for g in sample:
            if (g.memory_used_mib or 0) > ALLOCATED_MIB:
                return True, f"GPU {g.index} has {g.memory_used_mib:.0f} MiB allocated"
    return False, "no watched process holds a GPU and no GPU memory is allocated"


def idle_gpus(snapshot: HostSnapshot) -> list[GpuIdle]:
    by_index: dict[int, list[GpuSample]] = {}
    for sample in snapshot.gpus.samples:
        for g in sample:
            by_index.setdefault(g.index, []).append(g)
    out = []
    for index, rows in sorted(by_index.items()):
        utils = [g.utilization_gpu for g in rows]
        if any(u is None for u in utils):
            continue  # [N/A] is not 0%
        vals = tuple(u for u in utils if u is not None)
        if vals and max(vals) <= IDLE_UTIL:
            mem = rows[-1].memory_used_mib
            out.append(GpuIdle(index, rows[-1].name, vals, mem, (mem or 0) > ALLOCATED_MIB))
    return out
