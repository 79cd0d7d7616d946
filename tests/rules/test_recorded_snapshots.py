"""The rules on recorded snapshots (fixtures/procfs): what a real PID-namespace container showed."""

from __future__ import annotations

import pytest

from fixtures.procfs.record import parse_fixture
from tests import paths
from vastprobe.analysis.scope import compute_scope
from vastprobe.rules.base import RuleOptions
from vastprobe.rules.engine import run_rules
from vastprobe.rules.zombie_child import YOUNG_SECONDS

FIXTURES = paths.FIXTURES / "procfs"


@pytest.mark.parametrize("case", ["pidns-unshare", "busybox-pidns", "pidns-current"])
def test_container_workload(case: str) -> None:
    snap = parse_fixture(FIXTURES / case)
    findings = run_rules(snap, compute_scope(snap), RuleOptions(stale_after=10**9))
    rules = {f.rule for f in findings}
    assert "stopped-child" in rules  # the SIGSTOPped sh
    # the sleep that never reaps: its zombie is under a second old, no sign of a parent that does not reap
    assert "zombie-child" not in rules
    stopped = next(f for f in findings if f.rule == "stopped-child")
    assert snap.process(stopped.pids[0]).state == "T"  # type: ignore[union-attr]
    zombie = next(p for p in snap.processes if p.state == "Z")
    assert snap.probe.sample_uptimes[-1] - zombie.starttime / snap.host.clk_tck < YOUNG_SECONDS
    assert "oom-killed-child" not in {f.rule for f in findings if f.severity in ("error", "critical")}
