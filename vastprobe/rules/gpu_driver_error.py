"""VP108 gpu-driver-error: nvidia-smi failed, timed out or could not reach the driver. A GPU job
on such a host cannot make progress."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("gpu-driver-error", "VP108", "critical", "nvidia-smi failed, timed out or cannot reach the driver")

EXIT_MEANING = {
    9: "driver not loaded",
    12: "NVML library missing",
    14: "infoROM corrupt",
    15: "GPU fell off the bus",
    124: "timed out",
    137: "timed out (killed)",
    255: "other error",
}


def check(ctx: Context) -> Iterator[Finding]:
    g = ctx.snapshot.gpus
    if not g.present or g.error is None:
        return
    ev = [Evidence("nvidia-smi", g.error)]
    if g.exit_code is not None:
        ev.append(Evidence("nvidia-smi exit", f"{g.exit_code} ({EXIT_MEANING.get(g.exit_code, 'see nvidia-smi(1)')})"))
    hung = "timed out" in g.error
    # a wedged driver holds more than nvidia-smi: tasks asleep inside it (uvm_*, nv_*, os_*), D state first
    inside = sorted(
        (p for p in ctx.snapshot.processes if p.state in ("D", "S") and ctx.graph.kind(p) == "nvidia"),
        key=lambda p: (p.state != "D", p.pid),
    )
    ev += [
        Evidence("/proc/wchan", f"{p.pid} ({p.comm}) {p.state} in {p.wchan}: inside the NVIDIA driver")
        for p in inside[:8]
    ]
    hint = (
        "nvidia-smi hangs when the driver is wedged: look for Xid errors; the GPU needs a reset or the host a reboot"
        if hung
        else "check the driver (`lsmod | grep nvidia`, driver/library version match); a reboot usually follows"
    )
    if hung and any(p.state == "D" for p in inside):
        hint += "; processes in D state inside the driver cannot be killed: only a reset (`nvidia-smi -r`) or a reboot frees them"
    yield META.finding(
        "the NVIDIA driver is not answering: " + g.error.split(":")[0], [p.pid for p in inside[:8]], ev, hint
    )


RULE = Rule(META, check)
