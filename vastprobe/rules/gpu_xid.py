"""VP107 gpu-xid: NVIDIA Xid errors in the kernel log, each with its meaning, whether it points at the
application, the driver or the hardware, and the first response (the catalogue below; where each
entry's words come from is listed under it and in docs/rules/gpu-xid.md).

An Xid logged before every watched process started is context (info). An Xid's `pid=` is a host PID:
on the host it names the process directly (its container PID is shown too); inside a container it is
matched by program name among the processes that hold /dev/nvidia* open. An application Xid logged
for a live process that is not one of the watched ones is context too. Xid 154 takes its severity
from the recovery action it names; the NVLink Xids 144-150 from the Fatal/Nonfatal word in the line.
A host that shows no GPU at all (no nvidia-smi, no /dev/nvidia<N>, no process holding one) gets no
finding: a container without GPUs can read the kernel log of a GPU host."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.gpu import has_gpu, match_host_pid
from vastprobe.analysis.xid import RECOVERY_SEVERITY, catalogue_text, lookup, recovery_action
from vastprobe.model import SEVERITY_ORDER, Evidence, Finding, KernelEvent, Severity
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("gpu-xid", "VP107", "error", "the NVIDIA driver logged Xid errors")

#: Time zones run from UTC-12 to UTC+14: a stamp without one is that far from the truth at most.
ZONE_SLACK = 14 * 3600.0


def gpu_rules_apply(ctx: Context) -> bool:
    """GPU findings only where there is a GPU, or the user says there should be."""
    o = ctx.options
    return has_gpu(ctx.snapshot) or bool(o.expect_gpu) or bool(o.expect_gpus)


def before(ctx: Context, e: KernelEvent) -> bool | None:
    """Whether e was logged before every watched process started: True, False, or None (unknown)."""
    starts = [s for s in (ctx.start_wall(p) for p in ctx.in_scope() if not p.kernel_thread) if s is not None]
    if not starts:
        return None
    earliest = min(starts)
    if e.wall_time is not None:
        return e.wall_time < earliest
    if e.local_time is not None:  # dmesg -T, syslog: the target's local time, zone unknown
        if e.local_time + ZONE_SLACK < earliest:
            return True
        if e.local_time - ZONE_SLACK > earliest:
            return False
    return None


def _severity(xid: int, evs: list[KernelEvent]) -> tuple[Severity, str | None]:
    info = lookup(xid)
    last = evs[-1]
    if xid == 154:
        action = recovery_action(last.detail)
        return RECOVERY_SEVERITY.get(action or "", "warning"), action
    if 144 <= xid <= 150 and last.severity:
        return ("critical" if last.severity == "Fatal" else "warning"), last.severity
    return info.severity, None


def check(ctx: Context) -> Iterator[Finding]:
    events = [e for e in ctx.snapshot.kernel_log.events if e.kind == "xid"]
    if not events or not gpu_rules_apply(ctx):
        return
    groups: dict[tuple[str, int], list[KernelEvent]] = {}
    for e in events:
        groups.setdefault((e.pci or "?", e.xid if e.xid is not None else -1), []).append(e)
    for (pci, xid), evs in sorted(groups.items()):
        info = lookup(xid)
        sev, note = _severity(xid, evs)
        ev = [Evidence("kernel log", e.line[:400]) for e in evs[-3:]]
        ev.append(
            Evidence("catalogue", f"{info.mnemonic}: points at the {info.origin}; sources: {', '.join(info.sources)}")
        )
        old = before(ctx, evs[-1])
        if old:
            sev = "info"
            ev.append(Evidence("timing", "logged before the watched processes started: context, not the cause"))
        elif old is None and evs[-1].wall_time is None:
            ev.append(Evidence("timing", "the line's time is not known exactly; taken as during the job"))
        pids: list[int] = []
        outside: list[str] = []
        for host_pid, name in dict.fromkeys((e.pid, e.comm) for e in evs if e.pid is not None):
            p, how = match_host_pid(ctx.snapshot, host_pid, name)
            if p is not None and p.pid in ctx.scope:
                pids.append(p.pid)
                ev.append(Evidence("pid", f"Xid pid={host_pid} is a watched process: {how}"))
            elif p is not None:
                outside.append(f"{p.pid} ({p.comm})")
                ev.append(Evidence("pid", f"Xid pid={host_pid} is not a watched process: {how}"))
            else:
                ev.append(Evidence("pid", how))
        if outside and not pids and info.origin == "application" and SEVERITY_ORDER[sev] > SEVERITY_ORDER["info"]:
            sev = "info"  # another user's kernel faulted; the GPU stays healthy for this job
        what = f"Xid {xid} on GPU {pci} ({info.meaning}{'; ' + note if note else ''}), {len(evs)} time(s)"
        hint = info.response if xid != 154 or not note else f"the driver asks for: {note}"
        yield META.finding(what, pids, ev, hint, sev)


RULE = Rule(META, check)
__doc__ = (__doc__ or "") + "\n\n" + catalogue_text()
