"""VP125 gpu-nvswitch-error: NVSwitch SXid errors in the kernel log (`nvidia-nvswitchN: SXid (PCI:…):
N, Fatal|Non-fatal, …`). A fatal SXid stalls the NVLink traffic through that switch: GPU accesses
across it hang and CUDA jobs abort (Xid 45), so a multi-GPU job on the host cannot go on until the
switches and GPUs are reset (NVIDIA Fabric Manager User Guide, SXid errors). A non-fatal SXid is
corrected and worth watching. Severity follows the line's own word; a group whose lines carry no
word (the `Severity N` / `Data {…}` follow-ups) is a warning. Logged before the watched processes
started: context."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Evidence, Finding, KernelEvent, Severity
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.gpu_xid import before, gpu_rules_apply

META = RuleMeta("gpu-nvswitch-error", "VP125", "critical", "an NVSwitch reported SXid errors")


def check(ctx: Context) -> Iterator[Finding]:
    events = [e for e in ctx.snapshot.kernel_log.events if e.kind == "sxid"]
    if not events or not gpu_rules_apply(ctx):
        return
    groups: dict[tuple[str, int], list[KernelEvent]] = {}
    for e in events:
        groups.setdefault((e.pci or e.device or "?", e.xid if e.xid is not None else -1), []).append(e)
    for (where, sxid), evs in sorted(groups.items()):
        words = {e.severity for e in evs if e.severity}
        sev: Severity = "critical" if "Fatal" in words else "warning"
        ev = [Evidence("kernel log", e.line[:400]) for e in evs[-3:]]
        if before(ctx, evs[-1]):
            sev = "info"
            ev.append(Evidence("timing", "logged before the watched processes started: context, not the cause"))
        device = next((e.device for e in evs if e.device), "NVSwitch")
        kind = "fatal" if "Fatal" in words else "non-fatal" if words else "unclassified"
        hint = (
            "NVLink traffic through this switch is stalled: reset the NVSwitches and GPUs (restart the fabric "
            "manager, or reboot the host) before restarting the job"
            if kind == "fatal"
            else "corrected by the switch; watch the rate, drain the host if it grows"
        )
        yield META.finding(f"{kind} SXid {sxid} on {device} ({where}), {len(evs)} time(s)", [], ev, hint, sev)


RULE = Rule(META, check)
