"""The small parts of fleet memory: time specs, shards, the outlier vote, the summary's marks and
the textfile's history metrics."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from fixtures.procfs.record import parse_fixture
from tests.paths import REPO
from vastprobe.history.shard import ShardError, in_shard, parse_shard, shard_of
from vastprobe.history.store import HostMemory
from vastprobe.history.timespec import TimeSpecError, parse_duration, parse_since, span
from vastprobe.model import Finding, HostReport
from vastprobe.render.prometheus import render_prometheus
from vastprobe.render.summary import summary_lines
from vastprobe.report.outliers import GroupByError, features, group_key, mark_outliers

FIXTURES = REPO / "fixtures" / "procfs"


def test_durations_and_times() -> None:
    assert parse_duration("30d") == 30 * 86400 and parse_duration("90m") == 5400 and parse_duration("3600") == 3600
    assert parse_duration("1.5h") == 5400 and parse_duration("2w") == 14 * 86400
    for bad in ("", "0", "-5m", "1y", "30 days", "1e9", "nan", "١٢h", "9" * 50):
        with pytest.raises(TimeSpecError):
            parse_duration(bad)
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("2026-12-02T14:00Z") == 1796220000.0
    assert parse_since("2026-12-02T14:00+01:00") == 1796216400.0
    with pytest.raises(TimeSpecError):
        parse_since("last tuesday")
    assert [span(s) for s in (5, 47 * 60, 3 * 3600 + 300, 2 * 86400 + 4 * 3600)] == [
        "5 s", "47 min", "3 h 05 min", "2 d 4 h"
    ]  # fmt: skip


def test_shards_are_stable_and_cover_once() -> None:
    targets = [f"root@gpu{i:04d}:22" for i in range(3000)]
    shards = [in_shard(targets, targets, k, 3) for k in (1, 2, 3)]
    assert sorted(t for s in shards for t in s) == sorted(targets)
    assert all(900 < len(s) < 1100 for s in shards), [len(s) for s in shards]
    # the hash is sha256 of the target, so every controller and every Python agrees
    want = int.from_bytes(hashlib.sha256(b"root@gpu0001:22").digest()[:8], "big") % 7 + 1
    assert shard_of("root@gpu0001:22", 7) == want
    assert parse_shard("2/3") == (2, 3) and parse_shard("1/1") == (1, 1)
    for bad in ("0/3", "4/3", "1/0", "a/b", "1/3/5", "-1/3", "1 / 3x"):
        with pytest.raises(ShardError):
            parse_shard(bad)


def test_group_key() -> None:
    r = HostReport("root@train-a-07:22", "ok", None, "healthy", (), None, {}, labels={"label": "job-x"})
    assert group_key("label")(r) == "job-x"
    assert group_key(r"@(train-[a-z])-")(r) == "train-a"
    assert group_key(r"@(nomatch)")(r) is None
    with pytest.raises(GroupByError, match="needs a group"):
        group_key(r"train-\d+")
    with pytest.raises(GroupByError):
        group_key("(")


def _fleet(n: int) -> list[HostReport]:
    """n copies of one real capture (a PID namespace with sleeping, stopped and zombie processes)."""
    snap = parse_fixture(FIXTURES / "pidns-unshare")
    scope = tuple(p.pid for p in snap.processes if not p.kernel_thread)
    base = HostReport("x", "ok", None, "healthy", (), snap, {}, scope)
    return [replace(base, target=f"job-{i:02d}") for i in range(n)]


def _with_wchan(r: HostReport, comm: str, wchan: str) -> HostReport:
    assert r.snapshot is not None
    procs = tuple(replace(p, wchan=wchan) if p.comm == comm else p for p in r.snapshot.processes)
    return replace(r, snapshot=replace(r.snapshot, processes=procs))


def test_one_host_whose_job_waits_elsewhere_is_flagged_alone() -> None:
    fleet = _fleet(12)
    fleet[5] = _with_wchan(fleet[5], "sleep", "pipe_read")  # same verdict, the job waits on something else
    marked = mark_outliers(fleet, r"^(job)-")
    flagged = [r for r in marked if r.outlier_of is not None]
    assert [r.target for r in flagged] == ["job-05"]
    o = flagged[0].outlier_of
    assert o is not None and (o.group, o.group_size, o.majority_size) == ("job", 12, 11)
    assert any(d.startswith("processes: sleep S in pipe_read") for d in o.differences), o.differences
    assert [r.target for r in marked] == [r.target for r in fleet]


def test_benign_variety_and_small_groups_flag_no_one() -> None:
    fleet = _fleet(12)
    for i in range(5):  # a third of the hosts sleep in a restarted syscall: variety, not an outlier
        fleet[i] = _with_wchan(fleet[i], "sleep", "do_syscall_64")
    assert not any(r.outlier_of for r in mark_outliers(fleet, r"^(job)-"))
    pair = _fleet(2)
    pair[1] = replace(pair[1], verdict="stalled")
    assert not any(r.outlier_of for r in mark_outliers(pair, r"^(job)-"))


def test_unprobed_and_skipped_hosts() -> None:
    fleet = _fleet(6)
    fleet[2] = HostReport("job-02", "unreachable", "refused", "unknown", (), None, {})
    fleet[3] = HostReport("job-03", "skipped", "exited", "unknown", (), None, {})
    marked = mark_outliers(fleet, r"^(job)-")
    assert [r.target for r in marked if r.outlier_of] == ["job-02"]
    o = marked[2].outlier_of
    assert o is not None and o.group_size == 5 and o.differences[0] == "status unreachable (the group: ok)"
    assert not any(d.startswith("processes") for d in o.differences)


def test_features_of_a_real_capture() -> None:
    feats = features(_fleet(1)[0])
    assert ("proc", "sh", "T", "do_signal_stop") in feats and ("proc", "sleep", "Z", "0") in feats
    assert ("verdict", "healthy") in feats and ("gpu", "none") in feats


def _report(target: str, verdict: str) -> HostReport:
    findings = (Finding("stopped-child", "VP105", "error", "sleep (7) is stopped (T)", (7,), (), None),)
    return HostReport(target, "ok", None, verdict, findings if verdict == "stalled" else (), None, {"probe": 0.2})  # type: ignore[arg-type]


NOW = 1_796_220_000.0  # 2026-12-02 14:00 UTC


def _memory() -> tuple[list[HostReport], dict[str, HostMemory]]:
    reports = [_report("a", "healthy"), _report("b", "stalled"), _report("c", "healthy"), _report("d", "stalled")]
    memory = {
        "a": HostMemory("a", "healthy", "healthy", NOW - 9000, NOW - 9000, 30, NOW, 0),
        "b": HostMemory("b", "stalled", "stalled", NOW - 2820, NOW - 2820, 10, NOW - 3000, 3),
        "c": HostMemory("c", "healthy", "stalled", NOW - 1200, NOW, 1, NOW, 5),
        "d": HostMemory("d", "stalled", "healthy", NOW - 600, NOW, 1, NOW - 300, 6),
    }
    return reports, memory


def test_summary_marks_new_still_and_recovered(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    reports, memory = _memory()
    lines = summary_lines(reports, memory, now=NOW)
    assert lines[:4] == [
        "4 hosts: 4 ok",
        "STALLED (2): b, d",
        "  new d  sleep (7) is stopped (T)",  # groups of one host each, in the order of their marks
        "  still b  stalled since 2026-12-02 13:13 (47 min, 10 sweeps): sleep (7) is stopped (T)",
    ]
    assert lines[-1] == "RECOVERED (1): c (stalled since 2026-12-02 13:40)"
    # without a history, one story: one line (host `d` is no part of "stopped" when names fold)
    assert summary_lines(reports)[2:4] == ["  [2: b, d]: sleep (7) is stopped (T)", "HEALTHY (2): a, c"]
    assert "RECOVERED" not in "\n".join(summary_lines(reports))


def test_textfile_history_metrics() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    reports, memory = _memory()
    text = render_prometheus(reports, now=NOW, memory=memory, shard=(2, 3))
    fam = {f.name: f for f in text_string_to_metric_families(text)}
    since = {s.labels["target"]: s.value for s in fam["vastprobe_host_stalled_since_timestamp_seconds"].samples}
    assert since == {"b": NOW - 2820, "d": NOW}
    healthy = {s.labels["target"]: s.value for s in fam["vastprobe_host_last_healthy_timestamp_seconds"].samples}
    assert healthy == {"a": NOW, "b": NOW - 3000, "c": NOW, "d": NOW - 300}
    assert fam["vastprobe_host_transitions"].type == "counter"
    assert {s.labels["target"]: s.value for s in fam["vastprobe_host_transitions"].samples} == {
        "a": 0, "b": 3, "c": 5, "d": 6
    }  # fmt: skip
    assert fam["vastprobe_sweep_shard_info"].samples[0].labels == {"shard": "2", "shards": "3"}
    plain = render_prometheus(reports, now=NOW)
    assert "stalled_since" not in plain and "transitions" not in plain and "shard" not in plain


def test_a_process_passing_between_the_samples_and_a_group_of_odd_hosts_flag_no_one() -> None:
    """Found sweeping 16 hosts by label with no --match: each host had a short-lived process of its
    own (seen in one sample), so every host was "odd" ("0 of 12 hosts alike")."""
    fleet = _fleet(12)
    for i, r in enumerate(fleet):
        assert r.snapshot is not None
        sh = next(p for p in r.snapshot.processes if p.comm == "sh")
        passing = replace(sh, pid=9000 + i, comm=f"cron-{i}", samples=sh.samples[:1])  # gone by the second
        fleet[i] = replace(r, snapshot=replace(r.snapshot, processes=(*r.snapshot.processes, passing)),
                           scope=(*r.scope, passing.pid))  # fmt: skip
    assert not any(r.outlier_of for r in mark_outliers(fleet, r"^(job)-"))
    for i in range(7):  # most of the group differs from the rest: nobody is the odd one out
        fleet[i] = _with_wchan(fleet[i], "sleep", "pipe_read")
    assert not any(r.outlier_of for r in mark_outliers(fleet, r"^(job)-"))
    fleet = _fleet(12)
    fleet[3] = _with_wchan(fleet[3], "sleep", "pipe_read")  # one still is
    assert [r.target for r in mark_outliers(fleet, r"^(job)-") if r.outlier_of] == ["job-03"]


def test_hosts_are_listed_in_natural_order() -> None:
    from vastprobe.history.queries import select_targets

    known = ["root@127.0.0.10:22", "root@127.0.0.2:22", "root@127.0.0.1:22"]
    assert select_targets(known, [])[0] == ["root@127.0.0.1:22", "root@127.0.0.2:22", "root@127.0.0.10:22"]
