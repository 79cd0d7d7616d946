"""Grouping findings by cause (vastprobe/report/incidents.py): what follows from what, in which
order incidents are read, and the headline of each. The findings here are values; the recorded
cases (tests/render/test_table.py) and the live seed container check the same on real processes."""

from __future__ import annotations

from vastprobe.model import Finding
from vastprobe.report.incidents import build_incidents, group_findings, host_headline


def finding(rule: str, severity: str = "error", pids: tuple[int, ...] = (), caused_by: str | None = None,
            summary: str | None = None) -> Finding:  # fmt: skip
    return Finding(rule, "VP000", severity, summary or f"{rule} on {pids}", pids, (), None, caused_by)  # type: ignore[arg-type]


def test_a_chain_follows_the_oom_kill_it_names_and_the_kill_comes_first() -> None:
    wait = finding("do-wait-orphan", pids=(1, 4, 5), caused_by="oom-killed-child")
    oom = finding("oom-killed-child", pids=(4,))
    context = finding("oom-killed-child", "info", summary="31 OOM kill(s) before the watched processes started")
    log = finding("missing-logs", "warning", summary="bench.log ends in fatal-looking lines")
    groups = group_findings([wait, oom, log, context])
    assert groups[0] == [oom, wait, log]  # the symptom follows the worst stall
    assert groups[1] == [context]


def test_the_kill_whose_loser_is_in_the_chain_is_the_cause() -> None:
    other = finding("oom-killed-child", "warning", pids=(77,))
    mine = finding("oom-killed-child", pids=(4,))
    wait = finding("do-wait-orphan", pids=(1, 4, 5), caused_by="oom-killed-child")
    groups = group_findings([other, mine, wait])
    assert [mine, wait] in groups and [other] in groups


def test_a_chain_ending_at_a_stopped_process_follows_it() -> None:
    stopped = finding("stopped-child", pids=(9,))
    sock = finding("socket-peer-wait", pids=(3, 9))
    assert group_findings([sock, stopped]) == [[stopped, sock]]


def test_a_symptom_alone_stays_alone_and_causes_that_name_each_other_do_not_loop() -> None:
    log = finding("missing-logs", "warning")
    zombie = finding("zombie-child", "warning", pids=(1, 2))
    assert group_findings([log, zombie]) == [[log], [zombie]]  # no stall to follow
    a = finding("do-wait-orphan", pids=(1,), caused_by="deadlock")
    b = finding("deadlock", "critical", pids=(1,), caused_by="do-wait-orphan")
    groups = group_findings([b, a])
    assert sorted(len(g) for g in groups) == [2] and set(groups[0]) == {a, b}


def test_worse_and_larger_incidents_come_first() -> None:
    warn = finding("zombie-child", "warning", pids=(1, 2))
    crit = finding("gpu-driver-error", "critical")
    err = finding("stopped-child", pids=(9,))
    follow = finding("do-wait-orphan", pids=(3, 9))
    assert [g[0] for g in group_findings([warn, err, crit, follow])] == [crit, err, warn]


def test_headlines() -> None:
    oom = finding("oom-killed-child", pids=(4,), summary="cuzk-bench was OOM-killed 2026-12-03 00:57:10 UTC")
    wait = finding("do-wait-orphan", pids=(1, 4, 5), caused_by="oom-killed-child",
                   summary="a (1) and b (4) wait on c (5), which makes no progress after an OOM kill in the job")  # fmt: skip
    incidents = build_incidents([wait, oom], None)
    assert incidents[0].headline == (
        "cuzk-bench was OOM-killed 2026-12-03 00:57:10 UTC → a (1) and b (4) wait on c (5), which makes no progress"
    )
    assert host_headline("stalled", incidents, 4, None) == incidents[0].headline
    notes = build_incidents([finding("oom-killed-child", "info")], None)
    assert host_headline("healthy", notes, 3, None) == "nothing stalled or at risk among 3 processes in scope; 1 note"
    assert host_headline("unknown", (), 0, "connection refused\nmore") == "connection refused"
