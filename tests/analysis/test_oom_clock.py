"""The kernel log's clock runs behind process start times (0.049 s on this project's VM): a
victim killed within that of its parent's start is still its parent's loss. The recorded seed case
(fixtures/reports/captures/seed-inside: cuzk-bench OOM-killed 0.24 s after benchmark.sh started), with
the kill's stamp moved to 0.05 s before benchmark.sh's start, as a lagging log clock would write it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fixtures.reports.record import read_capture
from vastprobe.analysis.oom import match_oom_kills, start_wall
from vastprobe.analysis.tree import ProcessTree
from vastprobe.analysis.waitgraph.graph import WaitGraph
from vastprobe.capture import load_captures
from vastprobe.pipeline import snapshot_of


def test_a_kill_stamped_just_before_its_parents_start_is_the_parents_loss(tmp_path: Path) -> None:
    path = tmp_path / "seed-inside.json"
    path.write_bytes(read_capture("seed-inside"))
    [capture] = load_captures(path)
    snap, err = snapshot_of(capture)
    assert snap is not None and err is None
    bench = next(p for p in snap.processes if p.comm == "benchmark.sh")
    started = start_wall(snap, bench)
    assert started is not None
    events = tuple(
        dataclasses.replace(e, wall_time=started - 0.05) if e.kind == "oom-kill" and e.comm == "cuzk-bench" else e
        for e in snap.kernel_log.events
    )
    snap = dataclasses.replace(snap, kernel_log=dataclasses.replace(snap.kernel_log, events=events))
    scope = frozenset(p.pid for p in snap.processes)
    graph = WaitGraph(snap, ProcessTree(snap))
    [m] = [m for m in match_oom_kills(snap, scope, graph) if m.event.comm == "cuzk-bench"]
    assert m.tie == "job" and m.loser == bench.pid, m  # not entrypoint.sh, started a tick earlier
