"""VP122 gpu-link-degraded: a GPU's PCIe link runs below what it and the host can do: fewer lanes
than its maximum width, or a lower generation than its maximum while the GPU is busy. GPUs drop the
link generation when idle to save power, so an idle GPU's generation says nothing; its width does.
Host-to-device copies (data loading, checkpoints, CPU offload) slow down in proportion. `[N/A]`
values say nothing."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.gpu import per_gpu
from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("gpu-link-degraded", "VP122", "warning", "a GPU's PCIe link runs below its generation or width")

BUSY_FOR_GEN = 10.0  # percent: above this the link should have trained up to its maximum generation


def check(ctx: Context) -> Iterator[Finding]:
    g = ctx.snapshot.gpus
    if not g.present or g.error is not None or not g.samples:
        return
    for index, rows in sorted(per_gpu(ctx.snapshot).items()):
        last = rows[-1]
        problems = []
        if last.pcie_width is not None and last.pcie_width_max and last.pcie_width < last.pcie_width_max:
            problems.append(f"x{last.pcie_width} of x{last.pcie_width_max} lanes")
        busy = [r for r in rows if r.utilization_gpu is not None and r.utilization_gpu >= BUSY_FOR_GEN]
        low_gen = [r for r in busy if r.pcie_gen is not None and r.pcie_gen_max and r.pcie_gen < r.pcie_gen_max]
        if busy and len(low_gen) == len(busy):
            r = low_gen[-1]
            problems.append(f"gen {r.pcie_gen} of gen {r.pcie_gen_max} while {r.utilization_gpu:.0f}% busy")
        if not problems:
            continue
        ev = [
            Evidence(
                "nvidia-smi",
                f"GPU {index} ({last.name}, {last.pci_bus_id}): pcie.link.gen {last.pcie_gen}/{last.pcie_gen_max}, "
                f"width {last.pcie_width}/{last.pcie_width_max}",
            )
        ]
        yield META.finding(
            f"GPU {index}'s PCIe link is degraded: {'; '.join(problems)}",
            [],
            ev,
            "reseat the GPU or its riser, check the slot and BIOS PCIe settings; `nvidia-smi -q -d PCIE` shows the "
            "replay counters. Host-to-GPU copies run slower until then",
        )


RULE = Rule(META, check)
