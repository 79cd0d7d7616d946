"""VP111 file-lock-wait: a watched process waits for a file lock (flock, fcntl, OFD) that another
process holds, and the holder is not getting anywhere.

/proc/locks pairs the waiter (`->` line) with the lock it is blocked behind; the waiter's
system call names the fd and so the file. SQLite does not block in the kernel: its busy handler
sleeps and retries, so a sleeping process with a database open that another holds SQLite's write
lock bytes on is the waiter there. The holder is followed further: a holder that itself
waits (on a child, a socket, another lock) passes the blame down the chain.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Finding
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import chain_evidence, marked, names, stalled

META = RuleMeta("file-lock-wait", "VP111", "error", "a process waits for a file lock held by a process that is stuck")


def check(ctx: Context) -> Iterator[Finding]:
    for s, edge, stall, sev in stalled(ctx, "file-lock"):  # a chain whose blocker works is left out
        waiter = ctx.tree.by_pid[s.waiter]
        where = edge.path or "a file"
        end = ctx.proc_label(s.chain.end)
        beyond = f"; it waits in turn on {end}" if edge.holders and s.chain.end not in (*edge.holders, s.waiter) else ""
        if not edge.holders:
            holder_words = "a process not visible here"
            hint = f"no visible process holds the lock on {where}: look for it on the host (lslocks) or in another container"
        else:
            holder_words = names(ctx, edge.holders)
            hint = (
                f"{holder_words} holds the lock on {where} and does not release it{beyond}: find out why it is "
                f"stuck, and end it (or the job it runs) to free the lock"
            )
            stopped = ctx.tree.by_pid.get(s.chain.end)
            if s.dead_end and stopped is not None and stopped.state in ("T", "t"):
                hint = (
                    f"{holder_words} holds the lock on {where}{beyond}, and {stopped.comm} ({stopped.pid}) is stopped: "
                    f"`kill -CONT {stopped.pid}` lets it go on and release the lock (if a debugger stopped it "
                    "(state t), detach it); or end it to free the lock"
                )
        via = f", through {ctx.proc_label(edge.waiter)}," if edge.waiter != s.waiter else ""
        summary = f"{waiter.comm} ({waiter.pid}){via} waits for a lock on {where} held by {holder_words}"
        if edge.inferred and edge.holders and edge.lock is not None and edge.lock.pid == edge.waiter:
            # a SQLite writer with PENDING, waiting for the readers' SHARED locks to go
            summary = (
                f"{waiter.comm} ({waiter.pid}){via} keeps retrying to write {where}: {holder_words} hold(s) "
                "SQLite's read lock on it"
            )
            if not s.dead_end:
                hint = (
                    f"{holder_words} keep(s) a read transaction open on {where} (a SELECT cursor not read to the "
                    "end, a connection idle in BEGIN): finish or close it, or end the reader; "
                    f"{ctx.proc_label(edge.waiter)} retries for as long as its busy timeout allows: bound it"
                )
        elif edge.retry == "lock-file" and edge.holders:  # apt's DPkg::Lock::Timeout, a lock-file helper
            summary = f"{waiter.comm} ({waiter.pid}){via} keeps retrying the lock on {where}, held by {holder_words}"
            if not s.dead_end:
                hint = (
                    f"{holder_words} holds the lock on {where} and does not finish{beyond}: see what it is doing "
                    f"(another apt or dpkg run, an unattended upgrade waiting on something); let it finish or end it. "
                    f"Never delete the lock file: {ctx.proc_label(edge.waiter)} retries for as long as its lock "
                    "timeout allows"
                )
        elif edge.inferred and edge.holders:  # SQLite's busy handler: it sleeps and tries again
            summary = f"{waiter.comm} ({waiter.pid}){via} keeps retrying {edge.what}, held by {holder_words}"
            if not s.dead_end:
                hint = (
                    f"{holder_words} holds SQLite's write lock on {where} and does not finish: a transaction left "
                    "open (BEGIN without COMMIT, a connection idle in a transaction) or a writer that is stuck; "
                    f"commit or roll it back, or end {holder_words}; {ctx.proc_label(edge.waiter)} retries for as long "
                    "as its busy timeout allows: bound it"
                )
        yield META.finding(
            marked(summary, s, sev),
            (*s.chain.pids, *[h for h in edge.holders if h not in s.chain.pids]),
            [*chain_evidence(ctx, s), *stall.evidence],
            hint,
            sev,
            caused_by="oom-killed-child" if stall.oom else None,
        )


RULE = Rule(META, check)
