"""A ring job over three hosts (tests/ring_lab.py): each rank sends to the next and receives from the
previous, blocking, as a collective by hand. Each host sees a rank blocked on a connection whose other
end it cannot name; the run names it (a rank of the job on another host), so a training ring is not
STALLED on a random host, and a stopped rank is the job's one holder (found by a helper)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import wait_for
from tests.paths import TESTS
from tests.report import test_joins
from tests.report.test_joins import Fleet
from tests.rules.test_ranks_waiting_on_each_other import DEADLOCK_STEPS, SYMMETRIC_STEPS, last_step
from tests.sshd import Sshd, free_ports

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")

LAB = TESTS / "ring_lab.py"
fleet = test_joins.fleet  # the fixture: sshd hosts in PID namespaces


def ring(fleet: Fleet, nap: float, env: str = "") -> tuple[list[Sshd], Path, str]:
    """Ranks 0-1 on A, 2 on B, 3 on C."""
    port, run = free_ports(1)[0], f"ring-{uuid.uuid4().hex[:8]}"
    ready = fleet.dir / f"ready-{run}"
    env = f"TR_READY={ready} TR_STEP_SLEEP={nap} {env}"
    hosts = [
        fleet.host(f"env {env} {sys.executable} {LAB} launch {run} 4 {ranks} {port}") for ranks in ("0,1", "2", "3")
    ]
    wait_for(lambda: all(Path(f"{ready}.{r}").exists() for r in range(4)), timeout=60, what="four ranks in the ring")
    return hosts, ready, run


@pytest.mark.parametrize("nap", [0.0, 0.05])
def test_a_training_ring_over_three_hosts_is_healthy(fleet: Fleet, nap: float) -> None:
    """No log: a rank caught in its receive, or asleep between steps, on every host (it read STALLED on
    a random host each sweep, or DEGRADED everywhere: "no rank is seen holding the others")."""
    hosts, _ready, _ = ring(fleet, nap)
    quiet = []
    for _ in range(2):
        rc, got = fleet.sweep(*(h.target for h in hosts))
        said = {
            t: (h["verdict"], [(f["rule"], f["severity"], f["summary"]) for f in h["findings"]]) for t, h in got.items()
        }
        # not a page: caught mid-step on a loaded machine, one rank may read as a straggler (a warning)
        # a string, not the dict: pytest cuts a dict's repr to 240 characters, and a CI failure lost its words
        told = json.dumps(said, indent=1)
        assert rc == 0 and all(v != "stalled" for v, _f in said.values()), told
        assert not any(sev == "error" or "not on another rank" in s for _v, fs in said.values() for _r, sev, s in fs), (
            told
        )
        quiet.append((all(v == "healthy" for v, _f in said.values()), said))
    if nap:  # ranks asleep between steps: at work, nothing to say; in one sweep of two at least (a rank
        # starved over the window by a loaded CI machine read as still once: a warning, exit 0)
        assert any(ok for ok, _said in quiet), quiet


def test_a_stopped_rank_in_a_ring_is_the_one_holder(fleet: Fleet) -> None:
    """Rank 2 on B stops at its 40th step; ranks 3, 0 and 1 then wait, each on the rank before it. B's rank
    holds the job; the others were listed as holders too ("not on another rank") and B was told a sweep of
    them would say whether they wait on it, in that very sweep."""
    hosts, _ready, _ = ring(fleet, 0.01, "TR_CULPRIT=2 TR_HOW=stop TR_AT=40")
    a, b, c = hosts
    # the ready file holds the rank's PID in its host's namespace: find it from here
    pid2 = next(p.pid for p in psutil.Process(b.proc.pid).children(recursive=True) if p.cmdline()[-2:-1] == ["rank"])
    try:
        wait_for(lambda: Path(f"/proc/{pid2}/stat").read_text().split(") ")[1][0] == "T", what="rank 2 stopped")
        rc, got = fleet.sweep(a.target, b.target, c.target)
        assert rc == 1 and all(h["verdict"] == "stalled" for h in got.values()), {
            t: h["headline"] for t, h in got.items()
        }
        mine = next(f for f in got[b.target]["findings"] if f["rule"] == "culprit-rank")
        assert mine["summary"].startswith("rank 2 (pid ") and "stopped" in mine["summary"], mine["summary"]
        assert "wait on it" in mine["summary"] and "a sweep of them says" not in mine["summary"], mine["summary"]
        for h in (a, c):
            told = next(f for f in got[h.target]["findings"] if f["rule"] == "culprit-rank")
            assert told["summary"].startswith("rank 2 (pid ") and told["remote"] == b.target, told["summary"]
            assert "not on another rank" not in told["summary"]
    finally:
        os.kill(pid2, signal.SIGCONT)


def test_a_rank_that_computes_for_ever_is_the_rings_straggler(fleet: Fleet) -> None:
    """Rank 2 on B computes from its 40th step on; the others wait on it, each on the rank before. As on
    one host, a straggler: a warning naming it on every host (across hosts the job read HEALTHY, each
    host a note that the ranks move on; found by a helper)."""
    hosts, _ready, _ = ring(fleet, 0.01, "TR_CULPRIT=2 TR_HOW=compute TR_AT=40")
    a, b, c = hosts
    busy = next(p for p in psutil.Process(b.proc.pid).children(recursive=True) if p.cmdline()[-2:-1] == ["rank"])
    # a loaded machine (a CI run beside other suites) gave it under half a CPU for 10 s: wait longer for less
    wait_for(lambda: busy.cpu_percent(0.5) > 30, timeout=30, what="rank 2 computing")
    rc, got = fleet.sweep(a.target, b.target, c.target)
    said = {
        t: (h["verdict"], [(f["rule"], f["severity"], f["summary"][:200]) for f in h["findings"]])
        for t, h in got.items()
    }
    assert rc == 0 and all(v == "degraded" for v, _f in said.values()), said
    for h in (a, b, c):
        f = next(f for f in got[h.target]["findings"] if f["rule"] == "culprit-rank")
        assert f["summary"].startswith("rank 2 (pid ") and f["severity"] == "warning", f["summary"]


@pytest.mark.parametrize("scene", ["busy-ring", "busy-ring-waiting"])
def test_a_busy_ring_recorded_on_an_overloaded_machine_is_healthy(tmp_path: Path, scene: str) -> None:
    """The ring at work on an overloaded machine, recorded (fixtures/joins/record.py). `busy-ring`: A's
    rank 1 waits on rank 0, and rank 0's own wait was not read (its syscall caught between two calls).
    Rank 1's chain named rank 0 "elsewhere, waits on TCP …" on rank 1's connection, and every host read
    STALLED, exit 1 (a CI run). A chain says what its waiters wait on, not what its end does.
    `busy-ring-waiting`: every rank caught in its receive, each having used a sixth of a CPU between the
    reads: "no rank is seen holding the others", DEGRADED on every host. Ranks that each worked move on."""
    files = test_joins.recorded(tmp_path, scene)
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", *files, "--format", "json"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.stdout, r.stderr
    got = json.loads(r.stdout)["hosts"]
    said = json.dumps([(h["verdict"], [(f["rule"], f["severity"], f["summary"]) for f in h["findings"]]) for h in got])
    assert r.returncode == 0 and all(h["verdict"] == "healthy" for h in got), said
    assert not any("not on another rank" in f["summary"] for h in got for f in h["findings"]), said
    if scene == "busy-ring-waiting":
        assert all("the ranks move on: each of its 4 ranks used" in h["findings"][0]["summary"] for h in got), said


@pytest.mark.parametrize("how", ["TR_CULPRIT=2 TR_HOW=deadlock TR_AT=40", "TR_SYM=40"], ids=["deadlock", "symmetric"])
def test_ranks_that_wait_on_each_other_over_three_hosts_stall_the_job(fleet: Fleet, how: str) -> None:
    """Rank 2 on B deadlocks on its own lock beside its watchdog thread, or every rank receives before it
    sends: every rank of the run waits on another and nothing of the job moves on any host. Each host
    read DEGRADED, exit 0, "no rank is seen holding the others" (found by the regression hunt)."""
    log = fleet.dir / f"log-{uuid.uuid4().hex[:8]}"
    hosts, _ready, _ = ring(fleet, 0.01, f"{how} TR_LOG={log}")

    steps = SYMMETRIC_STEPS if "TR_SYM" in how else DEADLOCK_STEPS
    wait_for(lambda: all(last_step(log, r) == s for r, s in steps.items()), timeout=60, what=f"ranks at {steps}")
    rc, got = fleet.sweep(*(h.target for h in hosts))
    told = json.dumps({t: [(f["rule"], f["severity"], f["summary"]) for f in h["findings"]] for t, h in got.items()})
    assert rc == 1 and all(h["verdict"] == "stalled" for h in got.values()), told
    for h in hosts:
        f = next(f for f in got[h.target]["findings"] if f["rule"] == "culprit-rank")
        assert f["severity"] == "error" and "nothing of the job moved over the window on any host" in f["summary"], told
        if "TR_SYM" in how:
            assert "in a cycle, rank " in f["summary"], told
