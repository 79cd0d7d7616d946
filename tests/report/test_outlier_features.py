"""What `sweep --group-by` compares of a host's processes: a process asleep on a timer is a poll
between moves, the same shape as one seen moving. A launcher polling every 0.5 s read "moving" on
some hosts and "S in hrtimer_nanosleep" on others, and an innocent host was an outlier now and then
(found by a helper; tests/commands/test_fleet.py::test_group_by_flags_exactly_the_stuck_host failed
so once)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vastprobe.capture import load_captures
from vastprobe.pipeline import DiagnoseOptions, report_or_raise
from vastprobe.report.outliers import features

CAPTURES = Path(__file__).resolve().parent.parent.parent / "fixtures" / "reports" / "captures"


def _with(state: str, wchan: str) -> frozenset:
    c = load_captures(CAPTURES / "stopped-child.json")[0]
    r = report_or_raise(c, DiagnoseOptions(params=c.params))
    assert r.snapshot is not None
    p = next(p for p in r.snapshot.processes if p.comm == "entrypoint.sh")
    still = tuple(dataclasses.replace(s, state=state, utime=0, stime=0, voluntary_ctxt=1, nonvoluntary_ctxt=0)
                  for s in p.samples)  # fmt: skip
    q = dataclasses.replace(p, state=state, wchan=wchan, samples=still)
    snap = dataclasses.replace(r.snapshot, processes=tuple(q if x is p else x for x in r.snapshot.processes))
    return features(dataclasses.replace(r, snapshot=snap))


def test_a_process_asleep_on_a_timer_reads_as_moving() -> None:
    assert ("proc", "entrypoint.sh", "moving", "") in _with("S", "hrtimer_nanosleep")
    # one asleep on anything else is told apart by its wait channel, as before
    assert ("proc", "entrypoint.sh", "S", "do_wait") in _with("S", "do_wait")
