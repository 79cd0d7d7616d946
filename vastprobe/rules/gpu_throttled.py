"""VP121 gpu-throttled: the GPU slows itself down while the job uses it: hardware slowdown, software
or hardware thermal slowdown, or the hardware power brake (nvidia-smi's `clocks_event_reasons.active`
mask, bits 0x8, 0x20, 0x40, 0x80). A software power cap (0x4) at full load is how the GPU is
designed to run and is not reported; reasons on a GPU the job does not use are not either. A mask
nvidia-smi could not read (`[N/A]`) says nothing."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.gpu import THROTTLE, per_gpu, reason_names
from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("gpu-throttled", "VP121", "warning", "a GPU the job uses is throttled by heat, power brake or hardware")


def check(ctx: Context) -> Iterator[Finding]:
    g = ctx.snapshot.gpus
    if not g.present or g.error is not None or not g.samples:
        return
    expected, why = ctx.gpu_expected
    if not expected:
        return
    for index, rows in sorted(per_gpu(ctx.snapshot).items()):
        hit = [r for r in rows if r.clock_event_reasons is not None and r.clock_event_reasons & THROTTLE]
        if not hit:
            continue
        last = hit[-1]
        names = reason_names((last.clock_event_reasons or 0) & THROTTLE)
        detail = ", ".join(
            f"0x{r.clock_event_reasons or 0:x} ({', '.join(reason_names(r.clock_event_reasons or 0))})" for r in rows
            if r.clock_event_reasons is not None
        )  # fmt: skip
        ev = [Evidence("nvidia-smi", f"GPU {index} ({last.name}) clocks_event_reasons.active per sample: {detail}")]
        if last.temperature_c is not None:
            ev.append(Evidence("nvidia-smi", f"temperature {last.temperature_c:.0f} C"))
        if last.sm_clock_mhz is not None and last.sm_clock_max_mhz:
            ev.append(Evidence("nvidia-smi", f"SM clock {last.sm_clock_mhz:.0f} of {last.sm_clock_max_mhz:.0f} MHz"))
        ev.append(Evidence("expected", why))
        thermal = any("thermal" in n for n in names)
        hint = (
            "the GPU is too hot: check the host's cooling (fans, airflow, neighbours); the job runs slower until then"
            if thermal
            else "the board or the host limits power or clocks (power brake, PSU, slowdown): a host problem, not the job's"
        )
        yield META.finding(
            f"GPU {index} is throttled: {', '.join(names)} in {len(hit)} of {len(rows)} sample(s)", [], ev, hint
        )


RULE = Rule(META, check)
