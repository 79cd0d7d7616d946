"""VP111 file-lock-wait: a watched process waits for a file lock (flock, fcntl, OFD) that another
process holds, and the holder is not getting anywhere.

/proc/locks pairs the waiter (`->` line) with the lock it is blocked behind; the waiter's
system call names the fd and so the file. SQLite does not block in the kernel: its busy handler
sleeps and retries, so a sleeping process with a database open that another holds SQLite's write
lock bytes on is the waiter there. With --py-spy, a Python program asleep in a polling lock
(py-filelock, torch's FileBaton) is a waiter too: its stack names the lock file, and the holder is
who has it open (with a write lock, for filelock's flock); a FileBaton lock file nobody has open is
one left behind. The holder is followed further: a holder that itself waits (on a child, a socket,
another lock) passes the blame down the chain.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.stalls import StalledChain
from vastprobe.analysis.waitgraph.edges import WaitEdge
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
        if not edge.holders and edge.what.startswith("OFD"):
            # an OFD lock names no process: "held by a process not visible here" was false of one held through
            # the waiter's own other open of the file (found by a helper)
            holder_words = "an open file description /proc/locks names no process for"
            hint = (
                f"OFD locks name no holder: `lsof {where}` lists who has it open (its own other open of the file "
                "counts: OFD locks conflict between two opens in one process)"
            )
        elif not edge.holders:
            holder_words = "a process not visible here"
            hint = f"no visible process holds the lock on {where}: look for it on the host (lslocks) or in another container"
        else:
            holder_words = names(ctx, edge.holders)
            hint = (
                f"{holder_words} holds the lock on {where} and does not release it{beyond}: find out why it is "
                f"stuck, and end it (or the job it runs) to free the lock"
            )
            stopped = ctx.tree.by_pid.get(s.chain.end)
            if stopped is not None and stopped.state not in ("T", "t"):
                stopped = ctx.stopped_below(stopped.pid)  # the step a holder on a timer polls
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
        elif edge.retry in ("py-lock", "lock-exists"):  # py-filelock, torch's FileBaton (--py-spy)
            summary, hint = _python_lock(ctx, s, edge, via, holder_words, beyond, summary, hint)
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
            if edge.retry == "sqlite-wal":  # its locks are those of any open WAL connection
                hint += (
                    f"; in WAL mode a connection that only reads never waits for the writer: if "
                    f"{ctx.proc_label(edge.waiter)} only reads, it sleeps between its queries and waits on nothing"
                )
        if edge.retry == "sqlite-wal" and sev in ("error", "critical"):
            # a WAL reader between its queries holds the same locks: a warning whatever the holder does
            # (the docs' word); a stopped writer made a reader that worked read STALLED (found by a
            # helper). A writer retrying behind it reads so too, with --pid on it alone, as far as /proc
            # tells them apart: the hint names the holder's state
            sev = "warning"
            frozen = next(
                (q for h in edge.holders if (q := ctx.tree.by_pid.get(h)) is not None and q.state in ("T", "t", "D")),
                None,
            )
            if frozen is not None:
                state = "in D state" if frozen.state == "D" else "stopped"
                hint += (
                    f"; {ctx.proc_label(frozen.pid)}, which holds the write lock, is {state}: if "
                    f"{ctx.proc_label(edge.waiter)} writes, that is what holds it"
                )
        yield META.finding(
            marked(summary, s, sev),
            (*s.chain.pids, *[h for h in edge.holders if h not in s.chain.pids]),
            [*chain_evidence(ctx, s), *stall.evidence],
            hint,
            sev,
            caused_by="oom-killed-child" if stall.oom else None,
        )


def _python_lock(
    ctx: Context, s: StalledChain, edge: WaitEdge, via: str, holder_words: str, beyond: str, summary: str, hint: str
) -> tuple[str, str]:
    """A Python program that keeps trying a polling lock (py-filelock's flock, or a lock that is the
    file itself: torch's FileBaton), found through its stack (--py-spy): the summary and hint."""
    waiter = ctx.tree.by_pid[s.waiter]
    where = edge.path or "a file"
    build = where.rsplit("/", 1)[0] if where.endswith("/lock") else None
    if not edge.holders:  # nobody has the file open: left behind by a holder that ended without releasing
        summary = (
            f"{waiter.comm} ({waiter.pid}){via} keeps waiting for the lock file {where} to go away, and no process "
            "here has it open"
        )
        hint = (
            f"{where} is a lock file nobody here holds: the lock is the file itself (torch's FileBaton, "
            "filelock's SoftFileLock), and a holder that ended without releasing it (killed, OOM-killed, crashed) "
            f"left it behind. Remove it only if no build is running (here, or on another host or container that "
            f"shares {build or 'its directory'}); {ctx.proc_label(edge.waiter)} then goes on"
        )
        return summary, hint
    summary = f"{waiter.comm} ({waiter.pid}){via} keeps retrying the lock on {where}, held by {holder_words}"
    if s.dead_end:
        return summary, hint
    if edge.retry == "lock-exists":
        hint = (
            f"{holder_words} holds the lock file {where}{' (building in ' + build + ')' if build else ''} and does "
            f"not release it{beyond}: see what it does (its stack with py-spy), let it finish or end it. The lock "
            f"is the file itself: a holder ended without releasing it leaves {where} behind, and then it must be "
            "removed by hand (only once no build is running)"
        )
    else:
        hint = (
            f"{holder_words} holds the lock on {where} and does not release it{beyond}: see what it does (its stack "
            "with py-spy), let it finish or end it. Do not delete the lock file: the holder keeps its lock on the "
            "old file, and the next process would lock a new one beside it"
        )
    return summary, hint


RULE = Rule(META, check)
