"""The history in a real PostgreSQL server (a private cluster this module starts: tests/pg_cluster.py):
many shards writing one database at once, the same answers as SQLite, migrations, a dead or wrong
database, the URL from VASTPROBE_HISTORY and a libpq service file, export and import."""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.synchronize
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg_cluster
from tests.helpers import proc_state, wait_for
from tests.history.test_store import PLAN, STEP, T0, five_sweeps, report
from tests.sshd import free_port
from vastprobe.history import schema
from vastprobe.history.queries import host_histories
from vastprobe.history.shard import shard_of
from vastprobe.history.store import HistoryError, HistoryStore, open_history, record_safely

pytestmark = pytest.mark.slow  # a private PostgreSQL cluster, processes writing it at once
SHARDS = 8
SWEEPS = 6
HOSTS = 200


@pytest.fixture(scope="module")
def pg() -> Iterator[pg_cluster.Cluster]:
    cluster = pg_cluster.start()
    if isinstance(cluster, str):
        pytest.skip(f"no private PostgreSQL cluster: {cluster}")
    try:
        yield cluster
    finally:
        cluster.stop()


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "VASTPROBE_"))}
    return subprocess.run([sys.executable, "-m", "vastprobe", *args], capture_output=True, text=True, timeout=300,
                          env={**base, "TZ": "UTC", **(env or {})}, input=stdin)  # fmt: skip


def fleet_reports(sweep: int, shard: int) -> list:
    """Sweep `sweep` of shard `shard`: hosts that stall, recover, flap and go unreachable on a schedule."""
    out = []
    for j in range(HOSTS):
        target = f"root@10.0.{j // 250}.{j % 250}:22"
        if shard_of(target, SHARDS) != shard:
            continue
        phase = (j * 7 + sweep) % 5
        if j % 17 == 0:
            out.append(report(target, status="unreachable" if sweep % 2 else "ok"))
        elif phase == 0:
            out.append(report(target, "stalled", ("stopped-child",)))
        elif phase == 1 and j % 3 == 0:
            out.append(report(target, "degraded", ("zombie-child",)))
        else:
            out.append(report(target))
    return out


def _shard_writer(url: str, shard: int, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()  # all eight open the new database (and create its schema) at once
    with HistoryStore(url) as store:
        for i in range(SWEEPS):
            t = T0 + i * STEP + shard  # shards start a second apart, as cron jobs do
            store.record(fleet_reports(i, shard), started_at=t, finished_at=t + 30, shard=f"{shard}/{SHARDS}")


def test_eight_shards_write_at_once_and_answer_as_sqlite(pg: pg_cluster.Cluster, tmp_path: Path) -> None:
    url = pg.url(pg.create_database("shards"))
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(SHARDS)
    procs = [ctx.Process(target=_shard_writer, args=(url, k, barrier)) for k in range(1, SHARDS + 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    assert [p.exitcode for p in procs] == [0] * SHARDS
    # the same sweeps, one writer at a time, in SQLite
    path = tmp_path / "h.sqlite"
    with HistoryStore(path) as store:
        for i in range(SWEEPS):
            for k in range(1, SHARDS + 1):
                t = T0 + i * STEP + k
                store.record(fleet_reports(i, k), started_at=t, finished_at=t + 30, shard=f"{k}/{SHARDS}")
    with pg.connect("shards") as con:
        q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
        assert q("SELECT count(*) FROM vastprobe.sweeps") == [(SHARDS * SWEEPS,)]
        assert q("SELECT count(*), count(DISTINCT target) FROM vastprobe.hosts") == [(HOSTS, HOSTS)]
        assert q("SELECT count(*) FROM vastprobe.observations") == [(HOSTS * SWEEPS,)]
        assert q("SELECT count(*) FROM (SELECT host_id FROM vastprobe.observations GROUP BY host_id "
                 "HAVING count(*) <> 6) x") == [(0,)]  # fmt: skip
        assert q("SELECT count(*) FROM vastprobe.states") == q("SELECT count(DISTINCT (status, verdict, rules)) "
                                                               "FROM vastprobe.states")  # fmt: skip
        assert q("SELECT sum(hosts) FROM vastprobe.sweeps") == [(HOSTS * SWEEPS,)]
        # every host's current episode is its latest, and each is one transition after the one before
        assert q("SELECT count(*) FROM vastprobe.hosts h JOIN vastprobe.episodes e ON e.id = h.episode_id "
                 "WHERE e.host_id <> h.id OR e.last_seen IS NOT NULL") == [(0,)]  # fmt: skip
    pg_db = open_history(url, readonly=True)
    lite = open_history(path, readonly=True)
    try:
        ours, _ = host_histories(pg_db, [], since=T0 - 1)
        theirs, _ = host_histories(lite, [], since=T0 - 1)
    finally:
        pg_db.close()
        lite.close()
    assert len(ours) == HOSTS and ours == theirs
    assert {h.state.verdict for h in ours} >= {"stalled", "healthy", "degraded", "unknown"}
    # and the command's answer: the same document but for when it was made
    since = "2026-11-29T00:00"
    a, b = (
        run("history", "--history", url, "--since", since, "--format", "json"),
        run("history", "--history", str(path), "--since", since, "--format", "json"),
    )
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr

    def same(doc: str) -> dict:
        d = json.loads(doc)
        d.pop("generated_at")
        for h in d["hosts"]:
            h.pop("for_seconds")
        return d

    assert same(a.stdout) == same(b.stdout)


def test_migrations_and_foreign_schemas(pg: pg_cluster.Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    url = pg.url(pg.create_database("migrate"))
    with HistoryStore(url) as store:
        store.record([report("x", "stalled", ("stopped-child",))], started_at=T0, finished_at=T0)

    def to_v2(db) -> None:  # type: ignore[no-untyped-def]
        db.execute("ALTER TABLE hosts ADD COLUMN note TEXT DEFAULT 'v2'")

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, to_v2])
    with pytest.raises(HistoryError, match="older vastprobe; the next sweep migrates it"):
        open_history(url, readonly=True)
    with HistoryStore(url) as store:
        m = store.record([report("x", "stalled", ("stopped-child",))], started_at=T0 + 60, finished_at=T0 + 60)
        assert store.con.execute("SELECT note FROM hosts").fetchone()[0] == "v2"
        assert store.con.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == str(
            len(schema.MIGRATIONS)
        )
    assert m["x"].change == "still" and m["x"].verdict_since == T0
    newer = len(schema.MIGRATIONS)
    monkeypatch.undo()
    memory, warning = record_safely(url, [report("x")], started_at=T0 + 120, finished_at=T0 + 120)
    assert memory == {} and warning is not None and f"schema version {newer}, newer than" in warning
    # a schema named vastprobe that another program made is refused untouched
    foreign = pg.url(pg.create_database("foreign"))
    with pg.connect("foreign") as con:
        con.execute("CREATE SCHEMA vastprobe")
        con.execute("CREATE TABLE vastprobe.accounts (id int)")
    memory, warning = record_safely(foreign, [report("x")], started_at=T0, finished_at=T0)
    assert warning is not None and "not a vastprobe history" in warning
    with pg.connect("foreign") as con:
        assert con.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'vastprobe'").fetchall() == [
            ("accounts",)
        ]


@pytest.mark.parametrize("broken", ["dead", "no-database", "wrong-password"])
def test_a_dead_or_wrong_database_is_one_line_and_exit_2_after_the_output(
    pg: pg_cluster.Cluster, tmp_path: Path, broken: str
) -> None:
    url = {
        "dead": pg.url(db="vastprobe").replace(pg_cluster.quote(pg.socket_dir, safe=""), "%2Ftmp%2Fno-such-vp-dir"),
        "no-database": pg.url(db="no_such_db"),
        "wrong-password": pg.url(db="postgres", user=pg_cluster.SECRET_USER, password="wrong-pass-Q7"),
    }[broken]
    dead = f"root@127.0.0.1:{free_port()}"
    out = tmp_path / "last.ndjson"
    prom = tmp_path / "vastprobe.prom"
    r = run("sweep", dead, "--history", url, "--format", "ndjson", "--output", str(out), "--prom", str(prom))
    assert r.returncode == 2, (r.returncode, r.stderr)
    rows = [row for line in r.stdout.splitlines() if "target" in (row := json.loads(line))]  # (and the summary line)
    assert [row["target"] for row in rows] == [dead]  # the findings, printed
    written = [json.loads(line) for line in out.read_text().splitlines()]  # the host's line, the summary's
    assert (
        written[0]["status"] == "unreachable" and "summary" in written[-1] and "vastprobe_host_up" in prom.read_text()
    )
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("vastprobe: error: history postgresql://") and "this run was not recorded" in r.stderr
    assert "wrong-pass-Q7" not in r.stderr and "***" not in r.stderr.split("?")[0]
    want = {"dead": "No such file or directory", "no-database": 'database "no_such_db" does not exist',
            "wrong-password": "password authentication failed"}[broken]  # fmt: skip
    assert want in r.stderr, r.stderr
    shown = run("history", "--history", url)
    assert shown.returncode == 2 and shown.stderr.count("\n") == 1 and "wrong-pass-Q7" not in shown.stderr


def test_a_stall_found_while_the_database_is_down_exits_1(pg: pg_cluster.Cluster, reap) -> None:
    """Found by a helper: a sweep that found a stalled host exited 2 with its PostgreSQL history down,
    and cron, which acts on 1, never saw the stall. The stall wins; stderr still says the history is gone."""
    url = pg.url(db="vastprobe").replace(pg_cluster.quote(pg.socket_dir, safe=""), "%2Ftmp%2Fno-such-vp-dir")
    job = subprocess.Popen(["sleep", "600"])
    reap.append(job)
    os.kill(job.pid, signal.SIGSTOP)
    wait_for(lambda: proc_state(job.pid) == "T", what="the job stopped")
    r = run("sweep", "local", "--pid", str(job.pid), "--history", url, "--format", "json")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert json.loads(r.stdout)["hosts"][0]["verdict"] == "stalled"
    assert r.stderr.startswith("vastprobe: error: history postgresql://") and "this run was not recorded" in r.stderr
    assert r.stderr.count("postgresql://") == 1, r.stderr  # the URL once (it was said twice)


def test_a_malformed_url_is_a_usage_error_before_any_host(tmp_path: Path) -> None:
    r = run("sweep", f"root@127.0.0.1:{free_port()}", "--history", "postgresql://u:topsecret@h/db?nosuch=1")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert "invalid URI query parameter" in r.stderr and "topsecret" not in r.stderr
    r = run("history", env={"VASTPROBE_HISTORY": "postgresql://u:topsecret@[::1/db"})
    assert r.returncode == 2 and "VASTPROBE_HISTORY" in r.stderr and "topsecret" not in r.stderr, r.stderr


def test_the_url_from_the_environment_and_a_service_file(pg: pg_cluster.Cluster, tmp_path: Path) -> None:
    db = pg.create_database("service")
    services = tmp_path / "pg_service.conf"
    services.write_text(
        f"[vastprobe]\nhost={pg.socket_dir}\ndbname={db}\nuser={pg_cluster.SECRET_USER}\n"
        f"password={pg_cluster.SECRET_PASSWORD}\n"
    )
    env = {"VASTPROBE_HISTORY": "postgresql:///?service=vastprobe", "PGSERVICEFILE": str(services)}
    dead = f"root@127.0.0.1:{free_port()}"
    r = run("sweep", dead, "--format", "json", env=env)
    assert r.returncode == 3 and r.stderr == "", r.stderr
    shown = run("history", "--format", "json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert [h["target"] for h in json.loads(shown.stdout)["hosts"]] == [dead]
    services.write_text(services.read_text().replace(pg_cluster.SECRET_PASSWORD, "not-the-password-X3"))
    r = run("sweep", dead, "--format", "json", env=env)
    assert r.returncode == 2 and "password authentication failed" in r.stderr, r.stderr
    assert "not-the-password-X3" not in r.stderr and pg_cluster.SECRET_PASSWORD not in r.stderr


def test_export_moves_a_sqlite_history_into_postgresql(pg: pg_cluster.Cluster, tmp_path: Path) -> None:
    old = tmp_path / "old.sqlite"
    five_sweeps(old)
    other = tmp_path / "other.sqlite"
    with HistoryStore(other) as store:  # a second controller's file: other hosts, and one of the same
        store.record([report("f", "stalled", ("stopped-child",)), report("a", "stalled", ("stopped-child",))],
                     started_at=T0 + 30, finished_at=T0 + 40)  # fmt: skip
    url = pg.url(pg.create_database("imported"))
    dump = run("history", "export", "--history", str(old))
    assert dump.returncode == 0 and dump.stderr == "", dump.stderr
    r = run("history", "import", "-", "--history", url, stdin=dump.stdout)
    assert r.returncode == 0 and "imported 5 hosts, 5 sweeps, 25 observations" in r.stderr, r.stderr
    again = run("history", "import", "-", "--history", url, stdin=dump.stdout)
    assert again.returncode == 0 and "imported 0 hosts, 0 sweeps, 0 observations" in again.stderr
    assert "5 host(s) already in it kept their record" in again.stderr
    (tmp_path / "other.ndjson").write_text(run("history", "export", "--history", str(other)).stdout)
    merged = run("history", "import", str(tmp_path / "other.ndjson"), "--history", url)
    assert merged.returncode == 0 and "imported 1 hosts" in merged.stderr and ": a" in merged.stderr
    pg_db, lite = open_history(url, readonly=True), open_history(old, readonly=True)
    try:
        ours, _ = host_histories(pg_db, list(PLAN), since=T0 - 1)
        theirs, _ = host_histories(lite, [], since=T0 - 1)
        f, _ = host_histories(pg_db, ["f"], since=T0 - 1)
    finally:
        pg_db.close()
        lite.close()
    assert ours == theirs  # a's record is the first file's: the second's "a" was left out
    assert f[0].state.verdict == "stalled" and f[0].since == T0 + 30
    # a broken dump changes nothing
    bad = run("history", "import", "-", "--history", url, stdin=dump.stdout.replace('"t":"hosts"', '"t":"hostz"', 1))
    assert bad.returncode == 2 and "nothing was imported" in bad.stderr and bad.stderr.count("\n") == 1
    assert run("history", "import", "-", "--history", url, stdin="hello\n").returncode == 2
    with pg.connect("imported") as con:
        assert con.execute("SELECT count(*) FROM vastprobe.hosts").fetchone()[0] == 6
