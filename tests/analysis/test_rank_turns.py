"""Which rank holds a job, from the ranks' CPU over the window (analysis/ranks.py, judge): ranks seen
waiting that worked as much as the ranks seen running are a job at work on shared CPUs, not ranks
held by stragglers (a ring on an overloaded machine named one or two, DEGRADED in 22 sweeps of 40);
ranks that did nothing while one computes are held by that straggler."""

from __future__ import annotations

from vastprobe.analysis.ranks import each_worked, judge
from vastprobe.model import JobRank


def rank(n: int, state: str, share: float | None) -> JobRank:
    return JobRank(n, n, 100 + n, state, "…", busy=share is not None and share >= 0.2, share=share)


def test_ranks_that_worked_by_turns_hold_no_one() -> None:
    ranks = [
        rank(0, "running", 0.13),
        rank(1, "running", 0.12),
        rank(2, "collective", 0.13),
        rank(3, "collective", 0.14),
    ]
    culprits, waiting = judge(ranks, 4)
    assert culprits == () and [r.rank for r in waiting] == [2, 3]
    assert each_worked(ranks) == "each of its 4 ranks used 12-14% of a CPU between the reads"


def test_a_rank_computing_while_the_others_do_nothing_is_the_straggler() -> None:
    for top in (0.95, 0.4):  # alone on its CPU, or sharing a loaded machine's
        ranks = [rank(0, "running", top), rank(1, "collective", 0.0), rank(2, "collective", 0.01)]
        culprits, _waiting = judge(ranks, 3)
        assert [r.rank for r in culprits] == [0]
        assert each_worked(ranks) is None


def test_waiting_ranks_with_a_little_cpu_beside_a_busy_straggler_are_still_held() -> None:
    """A side thread's few percent is not a rank exchanging data as fast as the one computing."""
    ranks = [rank(0, "running", 0.9), rank(1, "collective", 0.06), rank(2, "collective", 0.07)]
    culprits, _waiting = judge(ranks, 3)
    assert [r.rank for r in culprits] == [0]


def test_one_sample_says_nothing_of_turns() -> None:
    ranks = [rank(0, "running", None), rank(1, "collective", None)]
    culprits, _waiting = judge(ranks, 2)
    assert [r.rank for r in culprits] == [0]
    assert each_worked(ranks) is None
