"""VP106 zombie-child: exited children nobody reaps. The parent is not calling wait(); in a
container a PID 1 that does not reap lets zombies pile up until the PID limit.

Every exiting process is a zombie until its parent reaps it, so a zombie counts when it is still
one at the second sample and has been one for YOUNG_SECONDS by both bounds (see _young): parents
that reap in batches leave younger ones in every sample. With one sample (--sample 0) a parent with
a pile-up (PILE_UP zombies or more) is still a warning; one or two zombies seen in one instant are
a note."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Evidence, Finding, Process
from vastprobe.rules.base import ONE_SAMPLE, Context, Rule, RuleMeta

META = RuleMeta("zombie-child", "VP106", "warning", "exited children are not being reaped by their parent")
SIGCHLD_BIT = 1 << 16
#: Zombies under one parent that one instant can show as a problem: children exit one at a time,
#: and a parent that reaps has at most a few between two of its wait() calls.
PILE_UP = 3
#: A zombie that exited less than this ago is no evidence of a parent that does not reap. This
#: project's VM's PID 1 reaps orphans every ~2 s; with 1 s between samples, half its zombies were in
#: both, and most hosts of a loopback sweep were "degraded" by them (also by zombies of processes
#: that had run 12 s). A parent that never reaps shows older zombies after this long.
YOUNG_SECONDS = 10.0


def _young(ctx: Context, p: Process) -> bool:
    """A zombie for less than YOUNG_SECONDS, by either bound: its process started less than that
    ago (it cannot have been a zombie for longer), or it exited less than that ago by
    /proc/PID/sched. The latter is rough: se.exec_start runs on each CPU's task clock, which leaves
    out steal and IRQ time, so two CPUs' clocks drift apart (2.7 s on this project's VM). Either
    bound alone keeps a zombie out, so a skewed clock can hide a stuck zombie but not add one that
    the start-time bound would not."""
    ups = ctx.snapshot.probe.sample_uptimes
    if ups and ups[-1] - p.starttime / ctx.snapshot.host.clk_tck < YOUNG_SECONDS:
        return True
    return p.exited_ago is not None and p.exited_ago < YOUNG_SECONDS


def check(ctx: Context) -> Iterator[Finding]:
    by_parent: dict[int, list[int]] = {}
    for p in ctx.snapshot.processes:
        if not p.samples or any(s.state != "Z" for s in p.samples):
            continue
        if ctx.gone_by_second_sample(p):
            continue  # reaped before the second sample
        if _young(ctx, p):
            continue
        if p.pid in ctx.scope or p.ppid in ctx.scope:
            by_parent.setdefault(p.ppid, []).append(p.pid)
    for ppid, zombies in sorted(by_parent.items()):
        parent = ctx.tree.by_pid.get(ppid)
        pname = parent.comm if parent else "?"
        ev = [Evidence("/proc/stat", f"zombies {zombies[:20]} (state Z), parent {ppid} ({pname})")]
        init_in_container = ppid == 1 and ctx.snapshot.host.own_pid_namespace is True
        if parent is not None:
            ev.append(Evidence("parent", f"state {parent.state}, wchan {parent.wchan}"))
            if parent.sig_cgt is not None and not parent.sig_cgt & SIGCHLD_BIT:
                ev.append(Evidence("/proc/status", f"{pname} does not catch SIGCHLD (SigCgt {parent.sig_cgt:#x})"))
        if init_in_container:
            summary = f"PID 1 ({pname}) does not reap {len(zombies)} exited process(es)"
            hint = "run the container with an init that reaps (tini, dumb-init, `docker run --init`)"
        else:
            summary = f"{pname} ({ppid}) leaves {len(zombies)} exited child(ren) unreaped"
            hint = f"{pname} is not calling wait(); if it is stuck, its children's exit is lost on it"
        if not ctx.two_samples and len(zombies) < PILE_UP:
            hint = "a child that just exited looks like this until its parent reaps it; a second sample (--sample 1, the default) tells"
            yield META.finding(summary + ONE_SAMPLE, [ppid, *zombies], ev, hint, severity="info")
            continue
        yield META.finding(summary, [ppid, *zombies], ev, hint)


RULE = Rule(META, check)
