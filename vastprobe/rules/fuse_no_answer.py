"""VP114 fuse-no-answer: a watched process (or one of its threads) waits for a FUSE server
(`request_wait_answer`) that does not answer: the server is stopped, gone, or made no progress.

The servers are the processes holding /dev/fuse; with several FUSE mounts, the one whose arguments
name the mount point the waiter is on (its waited fd, its open files, its own arguments), never
another mount's server.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Finding
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import chain_evidence, marked, names, resume_hint, stalled

META = RuleMeta("fuse-no-answer", "VP114", "error", "a process waits on a FUSE server that does not answer")


def check(ctx: Context) -> Iterator[Finding]:
    for s, edge, stall, sev in stalled(ctx, "fuse"):  # a chain whose blocker works is left out
        waiter = ctx.tree.by_pid[s.waiter]
        who = f"thread {edge.thread} of " if edge.thread else ""
        via = f", through {who}{ctx.proc_label(edge.waiter)}," if edge.waiter != s.waiter or edge.thread else ""
        unmount = f"`fusermount -uz {edge.path}` (or `umount -l {edge.path}`)" if edge.path else "`fusermount -uz`"
        stopped = [h for h in edge.holders if ctx.tree.by_pid[h].state in ("T", "t")]
        if edge.holders:
            server = names(ctx, edge.holders)
            summary = f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}, whose server {server} does not answer"
            hint = (
                f"the FUSE server {server} is not answering: see what it is blocked on (its backend, network); "
                f"restart it, or unmount with {unmount} to release the waiters"
            )
            if stopped:
                hint = f"{resume_hint(ctx, stopped[0])}; or unmount with {unmount} to release the waiters"
        elif ctx.graph.fuse_servers:
            summary = (
                f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}, and no FUSE server on the host names "
                "that mount"
            )
            hint = (
                f"one of the /dev/fuse holders ({names(ctx, ctx.graph.fuse_servers)}) serves it under another "
                f"name: find it by its mount (`findmnt {edge.path or ''}`), or unmount with {unmount}"
            )
        else:
            summary = f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}, whose server is gone"
            hint = f"no process serves the mount any more: unmount it ({unmount}) and remount"
        yield META.finding(
            marked(summary, s, sev),
            (*s.chain.pids, *[h for h in edge.holders if h not in s.chain.pids]),
            [*chain_evidence(ctx, s), *stall.evidence],
            hint,
            sev,
            caused_by="oom-killed-child" if stall.oom else None,
        )


RULE = Rule(META, check)
