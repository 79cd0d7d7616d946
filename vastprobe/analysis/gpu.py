"""What the GPUs were doing, and which of the job's processes use them.

NVML (and so nvidia-smi and the kernel's Xid `pid=`) reports host PIDs. A probe that sees the host's
/proc (kernel threads are visible there) can take them as they are; inside a container they name no
process of ours, so a GPU's users are found by name among the processes that hold `/dev/nvidia<N>`
open. A value nvidia-smi could not give is None, never 0: no busy or idle verdict rests on it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from vastprobe.model import GpuApp, GpuSample, HostSnapshot, Process, Unavailable
from vastprobe.untrusted.numbers import is_digits

IDLE_UTIL = 5.0  # percent
ALLOCATED_MIB = 512.0  # more than a driver context alone
BUSY_UTIL = 80.0  # percent: "busy" in nvidia-smi's sense, a kernel resident most of the sample period
LOW_POWER = 0.35  # of the power limit: a GPU doing real work draws more (NCCL#968: 100% at ~70 W of 400 W)
IDLE_SM_CLOCK = 0.3  # of the SM clock's maximum

#: clocks_event_reasons bits (NVML nvmlClocksEventReason*), as nvidia-smi prints the mask.
REASONS = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake slowdown",
    0x100: "display clock setting",
}
#: The reasons that slow a job down against its will (a power cap at full load is the GPU's design).
THROTTLE = 0x8 | 0x20 | 0x40 | 0x80

PidView = Literal["host", "container"]


@dataclass(frozen=True)
class GpuIdle:
    index: int
    name: str
    utilizations: tuple[float, ...]
    memory_used_mib: float | None
    allocated: bool  # memory held: a context that runs no kernels (hung), vs nothing on the GPU


@dataclass(frozen=True)
class GpuUser:
    pid: int  # as the probe sees it
    gpu_uuid: str | None  # None: holds /dev/nvidia* but nvidia-smi did not name the GPU
    how: str


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


def per_gpu(snapshot: HostSnapshot) -> dict[int, list[GpuSample]]:
    """Each GPU's rows across the probe's samples, by index."""
    out: dict[int, list[GpuSample]] = {}
    for sample in snapshot.gpus.samples:
        for g in sample:
            out.setdefault(g.index, []).append(g)
    return out


def pid_view(snapshot: HostSnapshot) -> PidView:
    """Kernel threads are visible only from the initial PID namespace, where NVML's PIDs are ours."""
    return "host" if any(p.kernel_thread for p in snapshot.processes) else "container"


def _holds_gpu(p: Process) -> bool:
    if isinstance(p.fds, Unavailable):
        return False
    return any(e.target.startswith("/dev/nvidia") and is_digits(e.target[11:], 4) for e in p.fds)


def gpu_holders(snapshot: HostSnapshot, scope: frozenset[int]) -> list[int]:
    """In-scope processes with a GPU device (`/dev/nvidia<N>`) open: NVML's PIDs are host PIDs."""
    return [p.pid for p in snapshot.processes if p.pid in scope and _holds_gpu(p)]


def has_gpu(snapshot: HostSnapshot) -> bool:
    """Any sign of an NVIDIA GPU here: nvidia-smi, a /dev/nvidia<N> node, a process holding one."""
    g = snapshot.gpus
    return g.present or bool(g.device_nodes) or any(_holds_gpu(p) for p in snapshot.processes)


def _names(p: Process) -> set[str]:
    """What nvidia-smi's process_name may be for p: comm (cut at 15 bytes), argv[0] and its file name."""
    out = {p.comm}
    if p.cmdline:
        out |= {p.cmdline[0], p.cmdline[0].rsplit("/", 1)[-1]}
    return out


def _same_program(app_name: str, p: Process) -> bool:
    base = app_name.rsplit("/", 1)[-1]
    names = _names(p)
    return app_name in names or base in names or base[:15] == p.comm


def match_host_pid(snapshot: HostSnapshot, host_pid: int | None, name: str | None) -> tuple[Process | None, str]:
    """The process a host PID (an Xid's `pid=`, a compute app) names, in the probe's view.

    Host view: the PID itself (its `NSpid` tail says what the container calls it). Container view:
    a process that holds /dev/nvidia* and runs that program, and only when exactly one does."""
    if host_pid is None:
        return None, "no pid in the line"
    if pid_view(snapshot) == "host":
        p = snapshot.process(host_pid)
        if p is None:
            return None, f"host pid {host_pid} has exited"
        inner = f" (pid {p.nspid[-1]} in its container)" if len(p.nspid) > 1 else ""
        return p, f"host pid {host_pid}{inner}"
    if not name:
        return None, f"host pid {host_pid} cannot be mapped inside a container without a process name"
    same = [p for p in snapshot.processes if _holds_gpu(p) and _same_program(name, p)]
    if len(same) == 1:
        return same[0], f"host pid {host_pid} ({name}): the only process here running it with a GPU open"
    if not same:
        return None, f"host pid {host_pid} ({name}): no process here runs it with a GPU open"
    return None, f"host pid {host_pid} ({name}): {len(same)} processes here run it; not telling which"


def gpu_users(snapshot: HostSnapshot, scope: frozenset[int]) -> list[GpuUser]:
    """In-scope processes that use a GPU: nvidia-smi's compute apps mapped into this view, then the
    holders of /dev/nvidia<N> nvidia-smi did not name (in a container: all of them)."""
    out: list[GpuUser] = []
    seen: set[int] = set()
    apps: Iterable[GpuApp] = () if isinstance(snapshot.gpus.apps, Unavailable) else snapshot.gpus.apps
    for app in apps:
        p, how = match_host_pid(snapshot, app.pid, app.process_name)
        if p is not None and p.pid in scope and p.pid not in seen:
            seen.add(p.pid)
            out.append(GpuUser(p.pid, app.gpu_uuid or None, f"nvidia-smi compute app, {how}"))
    for pid in gpu_holders(snapshot, scope):
        if pid not in seen:
            seen.add(pid)
            out.append(GpuUser(pid, None, "holds /dev/nvidia* open"))
    return out


#: A GPU drawing at least this share of its power limit computes: a rank spinning in a hung collective
#: shows 100% utilisation at a tenth of it (71 W of 700 W, NCCL#968), a job that trains draws most of it.
COMPUTING_POWER = 0.5


def gpu_computing(snapshot: HostSnapshot, pids: frozenset[int]) -> str | None:
    """A GPU one of `pids` uses, drawing at least half its power limit in every sample, in words: the
    job computes there while its CPU threads sleep in a blocking sync. None: no such sign."""
    rows = [g for sample in snapshot.gpus.samples for g in sample]
    for u in gpu_users(snapshot, pids):
        mine = [g for g in rows if u.gpu_uuid and g.uuid == u.gpu_uuid]
        if mine and all(
            g.power_w is not None and g.power_limit_w and g.power_w >= COMPUTING_POWER * g.power_limit_w for g in mine
        ):
            g = mine[-1]
            return f"the GPU of pid {u.pid} draws {g.power_w:.0f} W of its {g.power_limit_w:.0f} W limit"
    return None


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
    out = []
    for index, rows in sorted(per_gpu(snapshot).items()):
        utils = [g.utilization_gpu for g in rows]
        if any(u is None for u in utils):
            continue  # [N/A] is not 0%
        vals = tuple(u for u in utils if u is not None)
        if vals and max(vals) <= IDLE_UTIL:
            mem = rows[-1].memory_used_mib
            out.append(GpuIdle(index, rows[-1].name, vals, mem, (mem or 0) > ALLOCATED_MIB))
    return out


def low_activity(g: GpuSample) -> str | None:
    """Why this busy-looking sample does little work: power far below its limit, or SM clocks at
    idle. None when it draws power at its clocks, or when nvidia-smi gave neither (not known)."""
    if g.power_w is not None and g.power_limit_w:
        if g.power_w <= LOW_POWER * g.power_limit_w:
            return f"{g.power_w:.0f} W of {g.power_limit_w:.0f} W"
        return None
    if g.sm_clock_mhz is not None and g.sm_clock_max_mhz and g.sm_clock_mhz <= IDLE_SM_CLOCK * g.sm_clock_max_mhz:
        return f"SM clock {g.sm_clock_mhz:.0f} of {g.sm_clock_max_mhz:.0f} MHz"
    return None


def busy_low_power(snapshot: HostSnapshot) -> dict[int, list[GpuSample]]:
    """GPUs at or above BUSY_UTIL in every sample (at least two) while drawing little power."""
    out = {}
    for index, rows in per_gpu(snapshot).items():
        if len(rows) < 2:
            continue
        if all(g.utilization_gpu is not None and g.utilization_gpu >= BUSY_UTIL for g in rows) and all(
            low_activity(g) for g in rows
        ):
            out[index] = rows
    return out
