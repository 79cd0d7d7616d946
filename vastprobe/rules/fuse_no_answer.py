"""VP114 fuse-no-answer: a watched process (or one of its threads) waits for a FUSE server
(`request_wait_answer`) that does not answer: the server is stopped, gone, or made no progress.

The servers are the processes holding /dev/fuse; with several FUSE mounts, the one whose command
line names the mount point of the file the waiter reads.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Finding
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import chain_evidence, marked, names, stalled

META = RuleMeta("fuse-no-answer", "VP114", "error", "a process waits on a FUSE server that does not answer")


def check(ctx: Context) -> Iterator[Finding]:
    for s, edge, stall, sev in stalled(ctx, "fuse"):  # a chain whose blocker works is left out
        waiter = ctx.tree.by_pid[s.waiter]
        who = f"thread {edge.thread} of " if edge.thread else ""
        via = f", through {who}{ctx.proc_label(edge.waiter)}," if edge.waiter != s.waiter or edge.thread else ""
        if edge.holders:
            server = names(ctx, edge.holders)
            summary = f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}, whose server {server} does not answer"
            hint = (
                f"the FUSE server {server} is not answering: see what it is blocked on (its backend, network); "
                "restart it, or unmount with `fusermount -uz` to release the waiters"
            )
        else:
            summary = f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}, whose server is gone"
            hint = "no process serves the mount any more: unmount it (`fusermount -uz` or `umount -l`) and remount"
        yield META.finding(
            marked(summary, s, sev),
            (*s.chain.pids, *[h for h in edge.holders if h not in s.chain.pids]),
            [*chain_evidence(ctx, s), *stall.evidence],
            hint,
            sev,
            caused_by="oom-killed-child" if stall.oom else None,
        )


RULE = Rule(META, check)
