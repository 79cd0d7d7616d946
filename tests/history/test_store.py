"""The history store on real SQLite files: states, since, transitions, flapping, pruning, schema
migration, damaged and locked files, overlapping writers."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import sqlite3
import time
from pathlib import Path

import pytest

from vastprobe.history import schema
from vastprobe.history.queries import host_histories, select_targets
from vastprobe.history.store import HistoryError, HistoryStore, open_history, record_safely
from vastprobe.model import Finding, HostReport

T0 = 1_796_000_000.0  # 2026-11-30
STEP = 300.0


def report(target: str, verdict: str = "healthy", rules: tuple[str, ...] = (), status: str = "ok") -> HostReport:
    sev = {"stalled": "error", "degraded": "warning"}.get(verdict, "info")
    findings = tuple(Finding(r, "VP105", sev, f"{r} on {target} (pid 42)", (42,), (), None) for r in rules)  # type: ignore[arg-type]
    if status != "ok":
        return HostReport(target, status, f"{target}: connection refused", "unknown", (), None, {"connect": 0.01})  # type: ignore[arg-type]
    return HostReport(target, "ok", None, verdict, findings, None, {"connect": 0.1, "probe": 0.25, "analysis": 0.01})  # type: ignore[arg-type]


H, S = ("healthy", ()), ("stalled", ("stopped-child",))
PLAN = {  # five sweeps: a stays healthy, b stalls at 3, c clears at 5, d flaps, e stalls at 5
    "a": [H, H, H, H, H],
    "b": [H, H, S, S, S],
    "c": [S, S, S, S, H],
    "d": [S, H, S, H, S],
    "e": [H, H, H, H, S],
}


def five_sweeps(path: Path) -> list[dict]:
    out = []
    with HistoryStore(path) as store:
        for i in range(5):
            reports = [report(t, v, r) for t, seq in PLAN.items() for v, r in [seq[i]]]
            t = T0 + i * STEP
            out.append(store.record(reports, started_at=t, finished_at=t + 20))
    return out


def test_sweep_five_marks_new_still_and_recovered(tmp_path: Path) -> None:
    memory = five_sweeps(tmp_path / "h.sqlite")[-1]
    assert {t: m.change for t, m in memory.items()} == {
        "a": None, "b": "still", "c": "recovered", "d": "new", "e": "new"
    }  # fmt: skip
    assert memory["b"].verdict_since == T0 + 2 * STEP and memory["b"].verdict_sweeps == 3
    assert memory["c"].previous_verdict_since == T0  # stalled since the first sweep, cleared at the fifth
    assert memory["c"].last_healthy == T0 + 4 * STEP and memory["b"].last_healthy == T0 + STEP
    assert memory["d"].transitions_total == 4 and memory["a"].transitions_total == 0


def test_history_since_transitions_and_flapping(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    five_sweeps(path)
    con = open_history(path, readonly=True)
    hist, missing = host_histories(con, [], since=T0 - 1)
    by = {h.target: h for h in hist}
    assert missing == [] and sorted(by) == list(PLAN)
    b = by["b"]
    assert (b.state.verdict, b.state.rules, b.since, b.sweeps) == ("stalled", ("stopped-child",), T0 + 2 * STEP, 3)
    assert b.last_healthy == T0 + STEP
    assert [(t.at, t.after_seen, t.before.verdict, t.after.verdict) for t in b.transitions] == [
        (T0 + 2 * STEP, T0 + STEP, "healthy", "stalled")
    ]
    d = by["d"]
    assert d.flapping and d.verdict_changes == 4 and d.stalls == 2 and d.since == T0 + 4 * STEP
    assert not any(by[t].flapping for t in "abce")
    assert by["a"].transitions == () and by["a"].since == T0 and by["a"].sweeps == 5
    assert by["b"].findings[0]["summary"] == "stopped-child on b (pid 42)"
    # a window that starts after d's second stall: only the last two changes
    hist, _ = host_histories(con, ["d"], since=T0 + 2.5 * STEP)
    assert [t.after.verdict for t in hist[0].transitions] == ["healthy", "stalled"] and not hist[0].flapping


def test_a_rule_set_change_is_a_transition_but_the_stall_goes_on(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.record([report("x", "stalled", ("stopped-child",))], started_at=T0, finished_at=T0)
        m = store.record(
            [report("x", "stalled", ("stopped-child", "zombie-child"))], started_at=T0 + 60, finished_at=T0 + 60
        )
        hist, _ = host_histories(store.con, ["x"], since=0)
    assert m["x"].change == "still" and m["x"].verdict_since == T0 and m["x"].transitions_total == 1
    (t,) = hist[0].transitions
    assert t.kind == "rules" and t.after.rules == ("stopped-child", "zombie-child")
    assert hist[0].state_since == T0 + 60 and hist[0].since == T0 and hist[0].verdict_changes == 0


def test_status_changes_and_unprobed_hosts(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.record([report("x", "stalled", ("stopped-child",))], started_at=T0, finished_at=T0)
        m = store.record([report("x", status="unreachable")], started_at=T0 + 60, finished_at=T0 + 60)
        hist, _ = host_histories(store.con, ["x"], since=0)
    assert m["x"].change is None  # no longer seen stalled is not "recovered"
    assert hist[0].state.status == "unreachable" and hist[0].error == "x: connection refused"


def test_pruning_keeps_the_true_start_of_a_long_stall(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    keep = 10 * STEP
    with HistoryStore(path) as store:
        for i in range(40):
            t = T0 + i * STEP
            reports = [report("long", "stalled", ("stopped-child",))]
            reports.append(report("gone", "healthy") if i < 5 else report("flap", *(S if i % 2 else H)))
            store.record(reports, started_at=t, finished_at=t, keep=keep)
        con = store.con
        oldest = con.execute("SELECT min(started_at) FROM sweeps").fetchone()[0]
        assert oldest >= T0 + 39 * STEP - keep
        assert con.execute("SELECT count(*) FROM observations").fetchone()[0] == 2 * 11
        assert [r[0] for r in con.execute("SELECT target FROM hosts ORDER BY target")] == ["flap", "long"]
        episodes_of_flap = con.execute(
            "SELECT count(*) FROM episodes e JOIN hosts h ON h.id = e.host_id WHERE h.target = 'flap'"
        ).fetchone()[0]
        assert episodes_of_flap <= 12  # ended ones older than the cutoff went
        hist, _ = host_histories(con, ["long"], since=0)
        assert hist[0].since == T0 and hist[0].sweeps == 40  # the stall began before anything kept
        assert con.execute("SELECT count(*) FROM details").fetchone()[0] <= 3


def test_an_overlapping_run_that_finishes_late_does_not_rewind_a_host(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.record([report("x", "stalled", ("stopped-child",))], started_at=T0 + 60, finished_at=T0 + 70)
        late = store.record([report("x")], started_at=T0, finished_at=T0 + 80)
        hist, _ = host_histories(store.con, ["x"], since=0)
        assert store.con.execute("SELECT count(*) FROM observations").fetchone()[0] == 2
    assert not late["x"].in_order and late["x"].change is None
    assert hist[0].state.verdict == "stalled" and hist[0].last_seen == T0 + 60


def test_targets_are_named_exactly_or_by_host() -> None:
    known = ["root@10.0.0.1:2222", "root@gpu01", "[::1]:22", "local"]
    assert select_targets(known, ["10.0.0.1", "gpu01", "::1", "local", "nope"]) == (
        ["root@10.0.0.1:2222", "root@gpu01", "[::1]:22", "local"], ["nope"]
    )  # fmt: skip


def _write_v1(path: Path) -> None:
    with HistoryStore(path) as store:
        store.record([report("x", "stalled", ("stopped-child",))], started_at=T0, finished_at=T0)


def test_forward_migration_keeps_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "h.sqlite"
    _write_v1(path)

    def to_v2(con: sqlite3.Connection) -> None:
        con.execute("ALTER TABLE hosts ADD COLUMN note TEXT DEFAULT 'v2'")

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, to_v2])
    with pytest.raises(HistoryError, match="older vastprobe; the next sweep migrates it"):
        open_history(path, readonly=True)
    with HistoryStore(path) as store:
        m = store.record([report("x", "stalled", ("stopped-child",))], started_at=T0 + 60, finished_at=T0 + 60)
        assert store.con.execute("PRAGMA user_version").fetchone()[0] == len(schema.MIGRATIONS)
        assert store.con.execute("SELECT note FROM hosts").fetchone()[0] == "v2"
    assert m["x"].change == "still" and m["x"].verdict_since == T0


def test_an_empty_file_holds_no_history_yet_and_the_next_sweep_writes_it(tmp_path: Path) -> None:
    """Found by a helper: a 0-byte --history was called "from an older vastprobe"."""
    path = tmp_path / "h.sqlite"
    path.touch()
    with pytest.raises(HistoryError, match="holds no vastprobe history yet"):
        open_history(path, readonly=True)
    with HistoryStore(path) as store:
        m = store.record([report("x", "stalled", ("stopped-child",))], started_at=T0, finished_at=T0)
    assert m["x"].change == "new" and m["x"].verdict == "stalled"


def test_a_newer_file_and_a_foreign_database_are_refused_untouched(tmp_path: Path) -> None:
    newer = tmp_path / "newer.sqlite"
    _write_v1(newer)
    with sqlite3.connect(newer) as con:
        con.execute("PRAGMA user_version = 99")
    before = newer.read_bytes()
    memory, warning = record_safely(newer, [report("x")], started_at=T0, finished_at=T0)
    assert memory == {} and warning is not None and "schema version 99, newer than" in warning
    assert "\n" not in warning and newer.read_bytes() == before
    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as con:
        con.execute("CREATE TABLE accounts (id INTEGER)")
    memory, warning = record_safely(foreign, [report("x")], started_at=T0, finished_at=T0)
    assert warning is not None and "not a vastprobe history" in warning
    with sqlite3.connect(foreign) as con:
        assert [r[0] for r in con.execute("SELECT name FROM sqlite_schema")] == ["accounts"]


@pytest.mark.parametrize("damage", ["garbage", "torn"])
def test_a_damaged_file_is_one_warning_line(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "h.sqlite"
    if damage == "garbage":
        path.write_bytes(b"this is not sqlite\n" * 200)
    else:  # a real history whose pages were overwritten in the middle
        with HistoryStore(path) as store:
            for i in range(30):
                store.record([report(f"h{j}") for j in range(200)], started_at=T0 + i, finished_at=T0 + i)
        data = bytearray(path.read_bytes())
        data[4096 : len(data) - 4096] = b"\xa5" * (len(data) - 8192)
        path.write_bytes(bytes(data))
    memory, warning = record_safely(path, [report("x")], started_at=T0 + 99, finished_at=T0 + 99)
    assert memory == {} and warning is not None and "\n" not in warning, warning
    assert str(path) in warning and "not recorded" in warning
    assert "not a database" in warning or "malformed" in warning, warning


def test_a_locked_file_waits_then_gives_up_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    _write_v1(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        t = time.monotonic()
        memory, warning = record_safely(path, [report("x")], started_at=T0 + 60, finished_at=T0 + 60, busy_timeout=0.5)
        waited = time.monotonic() - t
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert memory == {} and warning is not None and "locked" in warning and "\n" not in warning
    assert 0.4 < waited < 10
    memory, warning = record_safely(path, [report("x")], started_at=T0 + 60, finished_at=T0 + 60)
    assert warning is None and memory["x"].change == "recovered"  # x was stalled in _write_v1


def _writer(path: str, worker: int, sweeps: int, hosts: int) -> None:
    with HistoryStore(Path(path)) as store:
        for i in range(sweeps):
            t = T0 + i * 10 + worker
            reports = [report(f"w{worker}-h{j}", *(S if (i + j) % 3 == 0 else H)) for j in range(hosts)]
            reports.append(report("shared", *(S if i % 2 else H)))
            store.record(reports, started_at=t, finished_at=t)


def test_overlapping_writers_lose_nothing(tmp_path: Path) -> None:
    """Four processes write the same new file at once: it is created once, every sweep is there."""
    path = tmp_path / "h.sqlite"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 20, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM sweeps").fetchone()[0] == 80
    assert con.execute("SELECT count(*) FROM observations").fetchone()[0] == 80 * 41
    assert con.execute("SELECT count(*) FROM hosts").fetchone()[0] == 4 * 40 + 1
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "vastprobe" / "history.sqlite"
    _write_v1(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"


def _open_at_once(path: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()
    HistoryStore(Path(path)).close()


def test_many_processes_creating_one_file_at_once() -> None:
    """Openers race on a new file: each sees it either absent or whole, never half made."""
    import tempfile

    ctx = multiprocessing.get_context("fork")
    for _ in range(15):
        with tempfile.TemporaryDirectory() as d:
            path = str(Path(d) / "h.sqlite")
            barrier = ctx.Barrier(6)
            procs = [ctx.Process(target=_open_at_once, args=(path, barrier)) for _ in range(6)]
            for p in procs:
                p.start()
            for p in procs:
                p.join(60)
            assert [p.exitcode for p in procs] == [0] * 6
            with sqlite3.connect(path) as con:
                assert con.execute("PRAGMA user_version").fetchone()[0] == schema.schema_version()


def test_a_link_planted_at_the_history_path_is_never_written_through(tmp_path: Path) -> None:
    """The issue's case: `--history` named a symlink to an empty 0644 file, and SQLite made that
    file the database. Now the link is refused with one line, and nothing is written through it;
    a link at a side file (-wal, -shm, -journal) is refused the same way."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"")
    victim.chmod(0o644)
    link = tmp_path / "h.sqlite"
    link.symlink_to(victim)
    with pytest.raises(HistoryError, match="is a symbolic link; not followed"):
        open_history(link)
    with pytest.raises(HistoryError, match="is a symbolic link; not followed"):
        open_history(link, readonly=True)
    assert victim.read_bytes() == b"" and link.is_symlink()
    real = tmp_path / "real.sqlite"
    open_history(real).close()
    wal = Path(str(real) + "-wal")
    wal.unlink(missing_ok=True)
    wal.symlink_to(victim)
    with pytest.raises(HistoryError, match=r"real\.sqlite-wal is a symbolic link"):
        open_history(real)
    assert victim.read_bytes() == b""


def test_a_new_history_file_is_private_from_its_first_instant(tmp_path: Path) -> None:
    """Created 0600 whatever the umask (host and process names are in it), and still 0600 once
    SQLite has written it."""
    import os

    old = os.umask(0)
    try:
        path = tmp_path / "new" / "h.sqlite"
        con = open_history(path)
        con.close()
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700


def test_a_version_1_file_is_migrated_to_keep_group_features(tmp_path: Path) -> None:
    """A file written before the features columns existed (version 1) gets them, its rows kept."""
    path = tmp_path / "h.sqlite"
    _write_v1(path)
    with sqlite3.connect(path) as con:  # as version 1 left it
        con.execute("ALTER TABLE hosts DROP COLUMN features")
        con.execute("ALTER TABLE hosts DROP COLUMN features_at")
        con.execute("PRAGMA user_version = 1")
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 1
        assert "features" not in [r[1] for r in con.execute("PRAGMA table_info(hosts)")]
    with HistoryStore(path) as store:
        m = store.record([report("x", "stalled", ("stopped-child",))], started_at=T0 + 60, finished_at=T0 + 60,
                         features={"x": '[["verdict","stalled"]]'})  # fmt: skip
        assert store.peers(T0) == [("x", None, '[["verdict","stalled"]]')] and store.peers(T0 + 61) == []
    assert m["x"].change == "still" and m["x"].verdict_since == T0
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == schema.schema_version()
