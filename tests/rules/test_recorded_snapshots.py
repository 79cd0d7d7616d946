"""The rules on recorded snapshots (fixtures/procfs): what a real PID-namespace container showed."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.procfs.record import parse_fixture
from vastprobe.analysis.scope import compute_scope
from vastprobe.rules.base import RuleOptions
from vastprobe.rules.engine import run_rules

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures" / "procfs"


@pytest.mark.parametrize("case", ["pidns-unshare", "busybox-pidns", "pidns-current"])
def test_container_workload(case: str) -> None:
    snap = parse_fixture(FIXTURES / case)
    findings = run_rules(snap, compute_scope(snap), RuleOptions(stale_after=10**9))
    rules = {f.rule for f in findings}
    assert "stopped-child" in rules  # the SIGSTOPped sh
    assert "zombie-child" in rules  # the sleep that never reaps
    stopped = next(f for f in findings if f.rule == "stopped-child")
    assert snap.process(stopped.pids[0]).state == "T"  # type: ignore[union-attr]
    zombie = next(f for f in findings if f.rule == "zombie-child")
    assert snap.process(zombie.pids[1]).state == "Z"  # type: ignore[union-attr]
    assert "oom-killed-child" not in {f.rule for f in findings if f.severity in ("error", "critical")}
