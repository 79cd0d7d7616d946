"""Every rank of a job on this host waits on another, and nothing of the job moves: a ring whose rank 2
deadlocked on its own lock (the others wait on it, each on the rank before), and a ring whose ranks all
receive before they send (tests/ring_lab.py: four ranks under one launcher, a watchdog thread each, as
NCCL's). No rank is outside the wait to end it, so the job is stalled from the first look: both read
DEGRADED, exit 0, before (found by the regression hunt), and the ring at work stays HEALTHY."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers import proc_wchan, vastprobe_json, wait_for
from tests.sshd import free_ports

LAB = Path(__file__).parents[1] / "ring_lab.py"


def start_ring(reap: list, tmp_path: Path, **env: str) -> tuple[int, dict[int, int], Path]:
    """(the launcher's pid, rank -> pid, the ranks' log prefix) of a four-rank ring, once every rank is in it."""
    ready, log = tmp_path / "ready", tmp_path / "log"
    run = f"ring-{uuid.uuid4().hex[:8]}"
    launcher = subprocess.Popen(
        [sys.executable, str(LAB), "launch", run, "4", "0,1,2,3", str(free_ports(1)[0])],
        env=dict(os.environ, TR_READY=str(ready), TR_LOG=str(log), **env),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    reap.append(launcher)

    def written(r: int) -> bool:
        try:
            return Path(f"{ready}.{r}").read_text().strip().isdigit()
        except OSError:
            return False

    wait_for(lambda: all(written(r) for r in range(4)), timeout=60, what="four ranks in the ring")
    return launcher.pid, {r: int(Path(f"{ready}.{r}").read_text()) for r in range(4)}, log


def last_step(log: Path, rank: int) -> int:
    try:
        lines = Path(f"{log}.{rank}").read_text().split()
    except OSError:
        return 0
    return int(lines[-1]) if lines and lines[-1].isdigit() else 0


#: The last step each rank logs when rank 2 stops before its 40th send: rank 3 still sends its 40th to
#: rank 0, which then sends its 41st to rank 1 (a step is a send, then a receive)
DEADLOCK_STEPS = {0: 40, 1: 41, 2: 39, 3: 39}
#: ... and when every rank receives first from step 40 on
SYMMETRIC_STEPS = dict.fromkeys(range(4), 39)


def stuck_at(log: Path, pids: dict[int, int], steps: dict[int, int], futex: set[int]) -> None:
    """Every rank logged its last step of the scene, and is asleep where the scene leaves it: the ranks
    in `futex` in a futex (a lock of their own), the others in their receive."""

    def there() -> bool:
        if any(last_step(log, r) != step for r, step in steps.items()):
            return False
        return all(proc_wchan(pid).startswith("futex") == (r in futex) for r, pid in pids.items())

    wait_for(there, timeout=60, what=f"the ranks stuck after steps {steps}")


def said(host: dict) -> str:
    return repr([(f["rule"], f["severity"], f["summary"]) for f in host["findings"]])


def test_a_rank_deadlocked_on_its_own_lock_stalls_the_job_and_is_named(reap, tmp_path: Path) -> None:
    launcher, pids, log = start_ring(reap, tmp_path, TR_CULPRIT="2", TR_HOW="deadlock", TR_AT="40")
    stuck_at(log, pids, DEADLOCK_STEPS, futex={2})
    rc, host = vastprobe_json("--pid", str(launcher))
    assert rc == 1 and host["verdict"] == "stalled", said(host)
    f = next(f for f in host["findings"] if f["rule"] == "culprit-rank")
    assert f["severity"] == "error", said(host)
    assert "all 4 on this host, waits on another, and nothing of the job moved" in f["summary"], f["summary"]
    assert f"ends at rank 2 (pid {pids[2]}, python" in f["summary"], f["summary"]
    assert any(e["source"] == "progress" and "no main thread woke" in e["detail"] for e in f["evidence"]), f


def test_ranks_that_all_receive_first_wait_in_a_cycle(reap, tmp_path: Path) -> None:
    launcher, pids, log = start_ring(reap, tmp_path, TR_SYM="40")
    stuck_at(log, pids, SYMMETRIC_STEPS, futex=set())
    rc, host = vastprobe_json("--pid", str(launcher))
    assert rc == 1 and host["verdict"] == "stalled", said(host)
    f = next(f for f in host["findings"] if f["rule"] == "culprit-rank")
    assert f["severity"] == "error", said(host)
    assert "their receives wait on each other in a cycle, rank " in f["summary"], f["summary"]
    # each rank receives from the one before it: 0 <- 3 <- 2 <- 1 <- 0, from whichever rank it starts
    cycle = f["summary"].split("in a cycle, ")[1].split(" <- ")
    nums = [int(r.removeprefix("rank ")) for r in cycle]
    assert len(nums) == 5 and nums[0] == nums[-1], cycle
    assert all(b == (a - 1) % 4 for a, b in itertools.pairwise(nums)), cycle


@pytest.mark.parametrize("nap", ["0", "0.05"])
def test_a_ring_at_work_is_not_a_ring_waiting_on_itself(reap, tmp_path: Path, nap: str) -> None:
    """The control: the same ring exchanging data, caught in its receives or asleep between steps."""
    launcher, _pids, log = start_ring(reap, tmp_path, TR_STEP_SLEEP=nap)
    wait_for(lambda: last_step(log, 3) > 60, timeout=60, what="the ring at work")
    for _ in range(2):
        rc, host = vastprobe_json("--pid", str(launcher))
        assert rc == 0 and host["verdict"] != "stalled", said(host)
        assert not any(f["rule"] == "culprit-rank" and f["severity"] == "error" for f in host["findings"]), said(host)
