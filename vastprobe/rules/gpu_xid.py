"""VP107 gpu-xid: NVIDIA Xid errors in the kernel log, with what each means and the first response
from NVIDIA's Xid catalogue."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Evidence, Finding, Severity
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("gpu-xid", "VP107", "error", "the NVIDIA driver logged Xid errors")

# xid: (meaning, first response, severity while the job runs)
XID: dict[int, tuple[str, str, Severity]] = {
    8: ("GPU stopped processing (idle timeout)", "restart the application", "error"),
    13: (
        "graphics engine exception (bad kernel: out-of-bounds access, illegal instruction)",
        "restart the application",
        "error",
    ),
    31: ("GPU memory page fault (illegal address)", "restart the application", "error"),
    43: (
        "GPU stopped processing (channel killed after a user fault)",
        "usually follows an application fault; restart it",
        "warning",
    ),
    45: ("preemptive cleanup after earlier errors", "look at the Xid before it", "warning"),
    46: ("GPU timeout", "reset the GPU", "critical"),
    48: ("double-bit (uncorrectable) ECC error", "reset the GPU or reboot; drain if it repeats", "critical"),
    61: ("internal micro-controller breakpoint/warning", "watch; reset the GPU if it repeats", "warning"),
    62: ("internal micro-controller halt", "reset the GPU", "critical"),
    63: ("row remapping recorded", "watch the rate; reset to activate the remap", "info"),
    64: ("row remapping failure", "reset the GPU; drain the node", "critical"),
    74: ("NVLink error", "check links; reset the GPU or reboot", "critical"),
    79: ("GPU has fallen off the bus", "reboot the node", "critical"),
    92: ("high single-bit ECC error rate", "watch", "info"),
    94: ("contained memory error (only the affected application)", "restart the application", "error"),
    95: ("uncontained memory error (every application on the GPU)", "reset the GPU", "critical"),
    109: ("context-switch timeout", "reset the GPU", "critical"),
    119: ("GSP firmware RPC timeout", "reset the GPU", "critical"),
    120: ("GSP firmware error", "reset the GPU", "critical"),
}
ORDER = {"info": 0, "warning": 1, "error": 2, "critical": 3}


def check(ctx: Context) -> Iterator[Finding]:
    events = [e for e in ctx.snapshot.kernel_log.events if e.kind in ("xid", "gpu-lost")]
    if not events:
        return
    watched_start = [s for s in (ctx.start_wall(p) for p in ctx.in_scope()) if s is not None]
    earliest = min(watched_start) if watched_start else None
    groups: dict[tuple[str, int], list] = {}
    for e in events:
        key = (e.pci or "?", e.xid if e.xid is not None else 79)
        groups.setdefault(key, []).append(e)
    for (pci, xid), evs in sorted(groups.items()):
        meaning, action, sev = XID.get(xid, ("unlisted Xid", "look it up in NVIDIA's Xid catalogue", "warning"))
        last = evs[-1]
        old = earliest is not None and last.wall_time is not None and last.wall_time < earliest
        if old:
            sev = "info"
        ev = [Evidence("kernel log", e.line[:400]) for e in evs[-3:]]
        if old:
            ev.append(Evidence("timing", "logged before the watched processes started: context, not the cause"))
        pids = tuple({e.pid for e in evs if e.pid is not None})
        yield META.finding(
            f"Xid {xid} on GPU {pci} ({meaning}), {len(evs)} time(s)",
            [],
            ev,
            action + (f"; logged for host pid(s) {list(pids)}" if pids else ""),
            sev,
        )


RULE = Rule(META, check)
