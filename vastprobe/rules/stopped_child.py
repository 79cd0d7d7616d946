"""VP105 stopped-child: a watched process stopped by a signal (T) or a tracer (t) for the whole
window. Nothing resumes it by itself, and a parent waiting on it waits forever."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import resume_hint

META = RuleMeta("stopped-child", "VP105", "error", "a watched process is stopped (SIGSTOP/SIGTSTP or a tracer)")


def check(ctx: Context) -> Iterator[Finding]:
    for p in ctx.in_scope():
        if not p.samples or any(s.state not in ("T", "t") for s in p.samples):
            continue
        if ctx.two_samples and len(p.samples) < 2:
            continue  # seen once, gone by the second sample
        parent = ctx.tree.by_pid.get(p.ppid)
        ev = [Evidence("/proc/stat", f"pid {p.pid} ({p.comm}) state {p.state} in {len(p.samples)} sample(s)")]
        if p.tracer_pid:
            ev.append(Evidence("/proc/status", f"TracerPid {p.tracer_pid} ({ctx.proc_label(p.tracer_pid)})"))
        if parent is not None:
            ev.append(Evidence("parent", f"{parent.pid} ({parent.comm}) state {parent.state}, wchan {parent.wchan}"))
        hint = resume_hint(ctx, p.pid)
        yield META.finding(f"{p.comm} ({p.pid}) is stopped ({p.state})", [p.pid], ev, hint)


RULE = Rule(META, check)
