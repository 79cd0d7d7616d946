"""The watch loop: probe, report, compare with the previous round, hand the round on; wait out the
rest of the interval; again. Rounds start on a fixed cadence (a slow probe eats into the wait, not
into the next round's start), and the caller decides when it ends (a count, or Ctrl-C)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from vastprobe.capture import Capture
from vastprobe.pipeline import DiagnoseOptions, report_in_worker
from vastprobe.rounds.motion import Round, VerdictChange, next_round

#: Runs one probe of the watched target: the same session every round where the transport keeps one.
Prober = Callable[[DiagnoseOptions], Awaitable[Capture]]


@dataclass
class WatchLog:
    """What the rounds so far saw, for the summary at the end (kept as they arrive: Ctrl-C can
    end the watch between any two awaits)."""

    target: str = ""
    started: float = field(default_factory=time.time)
    rounds: int = 0
    last: Round | None = None
    changes: list[VerdictChange] = field(default_factory=list)

    def add(self, r: Round) -> None:
        self.rounds = r.number
        self.last = r
        if r.change is not None:
            self.changes.append(r.change)


async def watch(
    probe: Prober,
    options: DiagnoseOptions,
    interval: float,
    rounds: int | None,
    on_round: Callable[[Round], None],
    log: WatchLog,
) -> WatchLog:
    """`rounds`: stop after this many; None: until cancelled."""
    previous: Round | None = None
    number = 0
    while rounds is None or number < rounds:
        t0 = time.monotonic()
        report = await report_in_worker(await probe(options), options)
        number += 1
        current = next_round(number, time.time(), report, previous, bool(options.pids or options.matches))
        log.add(current)
        on_round(current)
        previous = current
        if rounds is not None and number >= rounds:
            break
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))
    return log
