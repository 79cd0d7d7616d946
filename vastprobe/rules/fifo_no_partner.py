"""VP113 fifo-no-partner: a watched process is blocked opening a named pipe (FIFO) because nobody
has opened the other end (`wait_for_partner`): a reader whose writer never started or died
before opening it, or a writer with no reader. A reader waits for its next writer as a server for
its next client (a spool worker): a note, which only evidence beyond a quiet log makes an error.

The path is still in the caller's memory when open() blocks, so the finding names the candidates
from its command line. A FIFO whose writer is an orphan that never writes is do-wait-orphan's.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Finding
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import chain_evidence, marked, stalled

META = RuleMeta(
    "fifo-no-partner", "VP113", "error", "a process waits to open a FIFO that nobody opens from the other end"
)


def check(ctx: Context) -> Iterator[Finding]:
    for s, edge, stall, _sev in stalled(ctx, "fifo-open"):
        # the opener is its own blocker: only evidence raises it; one instant of it is a note
        # (a partner about to open the other end looks the same)
        sev = "error" if stall else "warning" if ctx.two_samples else "info"
        opener = ctx.tree.by_pid[edge.waiter]
        if ctx.serving(opener.pid):
            # its reader waits for the next writer, as a server for its next client (a spool worker's
            # `read cmd < queue.fifo`): a note; a quiet log beside it no proof; other evidence (an OOM
            # kill in the job) still an error
            sev = "error" if stall and not stall.logs_only else "warning" if stall else "info"
        via = (
            f"{ctx.proc_label(s.waiter)} waits on {opener.comm} ({opener.pid}), which"
            if s.waiter != opener.pid
            else f"{opener.comm} ({opener.pid})"
        )
        yield META.finding(
            marked(f"{via} is blocked opening {edge.what}", s, sev),  # type: ignore[arg-type]
            s.chain.pids,
            [*chain_evidence(ctx, s), *stall.evidence],
            # "never did" was untrue of a producer that opens it once a minute (found by a helper)
            "nothing had the other end open over the window: if a producer opens it from time to time, this is "
            "its wait between batches; if one should have it open now, it failed or was never started: start it, "
            f"or kill {opener.pid}; open FIFOs with O_NONBLOCK or a timeout where the partner may not come",
            sev,  # type: ignore[arg-type]
            caused_by="oom-killed-child" if stall.oom else None,
        )


RULE = Rule(META, check)
