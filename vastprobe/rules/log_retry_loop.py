"""VP117 log-retry-loop: a `--log` whose tail is one message over and over, saying it retries,
waits or cannot connect: rank 1 retrying a store rank 0 never started, a download retrying a
mirror that is down. The log stays fresh, so nothing looks silent; the job is alive and going
nowhere."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("log-retry-loop", "VP117", "warning", "a log ends in the same retry message over and over")


def check(ctx: Context) -> Iterator[Finding]:
    for h in ctx.log_healths:
        loop = h.retry
        if loop is None:
            continue
        block = "message" if loop.period == 1 else f"{loop.period}-line message"
        fresh = h.state == "ok"
        summary = (
            f"{h.log.path} {'ends in' if fresh else 'ended in'} a retry loop: the same {block} "
            f"{loop.repeats} times{' and counting' if h.grew else ''}"
        )
        ev = [Evidence(f"tail of {h.log.path}", loop.line)]
        if h.age is not None:
            ev.append(Evidence("age", f"last written {h.age:.0f}s before the probe"))
        ev += [Evidence("writer", ctx.proc_label(pid)) for pid in h.writers[:4]]
        yield META.finding(
            summary,
            h.writers,
            ev,
            "the job keeps retrying something that does not come: what the message names (a peer or rank that "
            "died or never started, a mirror that is down, a lock never released); fix that, and bound the retries",
        )


RULE = Rule(META, check)
