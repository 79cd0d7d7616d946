"""Golden tests: recorded real probe outputs parse to the snapshots stored beside them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.procfs.record import parse_fixture
from vastprobe.render.jsonable import to_jsonable

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "procfs"
CASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "probe.out").exists())


@pytest.mark.parametrize("case", CASES)
def test_fixture_parses_to_expected(case: str) -> None:
    got = json.loads(json.dumps(to_jsonable(parse_fixture(FIXTURES / case)), sort_keys=True))
    want = json.loads((FIXTURES / case / "expected.json").read_text())
    assert got == want


@pytest.mark.parametrize("case", CASES)
def test_fixture_has_a_note(case: str) -> None:
    assert (FIXTURES / case / "NOTE.md").read_text().strip()


def test_pidns_fixture_facts() -> None:
    snap = parse_fixture(FIXTURES / "pidns-unshare")
    init = snap.process(1)
    assert init is not None and init.ppid == 0
    assert snap.host.own_pid_namespace is True
    states = {p.comm + ":" + p.state for p in snap.processes}
    assert "sh:T" in states and "sleep:Z" in states
    zombie = next(p for p in snap.processes if p.state == "Z")
    assert zombie.cmdline == ()
    assert snap.logs[0].exists and not snap.logs[1].exists


def test_busybox_fixture_facts() -> None:
    snap = parse_fixture(FIXTURES / "busybox-pidns")
    assert snap.host.clk_tck == 100
    assert snap.probe.timeout_mode == "new"
    assert snap.disks and snap.disks[0].inodes
    assert not any(p.comm == "timeout" for p in snap.processes if p.pid not in snap.excluded_pids)


def test_stat_first_fixture_facts() -> None:
    """The format that reads only stat of kernel threads, with no clk_tck or uid in meta."""
    snap = parse_fixture(FIXTURES / "host-vm-kthreads-stat-only")
    assert snap.host.clk_tck == 100 and snap.host.uid == 0 and snap.host.own_pid_namespace is True
    kthreads = [p for p in snap.processes if p.kernel_thread]
    assert kthreads and all(p.fds == () and p.uid is None and not p.cmdline for p in kthreads)
    users = [p for p in snap.processes if not p.kernel_thread and p.state != "Z"]
    assert users and all(p.uid == 0 and isinstance(p.wchan, str) for p in users)
    states = {p.comm + ":" + p.state for p in snap.processes}
    assert {"sh:T", "sleep:Z"} <= states
