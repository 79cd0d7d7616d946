"""The history: each finished sweep (or `diagnose --history`) is one write transaction that
records every host's state, findings and timings, moves each host's current state on, and prunes
what is older than `--keep`. It lives in an SQLite file or in a PostgreSQL database many
controllers share (`engine`); the SQL is the same.

Overlapping runs are safe: readers go on while one writer writes (SQLite's WAL, PostgreSQL's MVCC),
a write waits for another (SQLite's busy timeout, a PostgreSQL advisory lock) instead of failing,
and the previous state is read under the same write lock that replaces it. Any failure is a
`HistoryError` with one line; callers print it and carry on (history never costs a result)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vastprobe.fileio import create_private
from vastprobe.history import bulk
from vastprobe.history.engine import (
    SQLITE,
    Database,
    DatabaseError,
    connect_postgres,
    connect_sqlite,
    display,
    is_url,
)
from vastprobe.history.schema import SchemaError, migrate, needs_migration
from vastprobe.model import HostReport

DEFAULT_KEEP = 30 * 86400.0
BUSY_TIMEOUT = 20.0  # seconds a writer waits for another one (a sweep writes for milliseconds)
PG_WRITE_WAIT = 120.0  # in a shared database, every shard of a fleet may finish at once
HISTORY_ENV = "VASTPROBE_HISTORY"  # where the history lives when --history is not given
AT_RISK = ("warning", "error", "critical")  # severities whose rules make up a host's state
MAX_PIDS = 64  # per finding, in the record


Location = Path | str  # a file path, or a postgresql:// URL


class HistoryError(Exception):
    """One line: what happened to which file or database (never with a password)."""

    def __init__(self, message: str, shared: bool = False) -> None:
        super().__init__(message)
        self.shared = shared  # a shared database (PostgreSQL): the run fails with exit 2, after its output


def default_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "vastprobe" / "history.sqlite"


def location_of(text: str) -> Location:
    """`--history` or VASTPROBE_HISTORY as given: a database URL stays text, a path is expanded."""
    return text.strip() if is_url(text) else Path(text).expanduser()


def default_location() -> Location:
    """VASTPROBE_HISTORY when set (a URL or a path), else the per-user SQLite file."""
    env = os.environ.get(HISTORY_ENV, "").strip()
    return location_of(env) if env else default_path()


def _driver_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (sqlite3.Error, DatabaseError, OSError, ValueError)
    with contextlib.suppress(ImportError):
        import psycopg

        errors += (psycopg.Error,)
    return errors


@contextlib.contextmanager
def _errors(location: Location, doing: str, secrets: Sequence[str] = ()):  # type: ignore[no-untyped-def]
    from vastprobe.history.engine import reason

    where, shared = display(location), is_url(location)
    try:
        yield
    except HistoryError:
        raise
    except SchemaError as exc:
        raise HistoryError(f"history {where} {exc}; {doing}", shared) from exc
    except _driver_errors() as exc:
        why = reason(exc, secrets)
        why = why.removeprefix(f"{where}: ")  # the engine's own errors name the URL too: once is enough
        raise HistoryError(f"history {where}: {why}; {doing}", shared) from exc


#: Files SQLite opens beside the database: a link planted at any of them would be written through.
SIDE_FILES = ("-wal", "-shm", "-journal")


def _identity(path: Path, doing: str) -> tuple[int, int] | None:
    """(device, inode) of the history file and its side files' check, without following a link at
    any of them; None when the file does not exist yet."""
    found = None
    for name in (str(path), *(str(path) + s for s in SIDE_FILES)):
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise HistoryError(
                f"history {path}: {name} is a symbolic link; not followed (give the file itself); {doing}"
            )
        if not stat.S_ISREG(st.st_mode):
            raise HistoryError(f"history {path}: {name} is not a regular file; {doing}")
        if name == str(path):
            found = (st.st_dev, st.st_ino)
    return found


def _secrets_of(location: Location) -> list[str]:
    from vastprobe.history.engine import url_secrets

    return url_secrets(location) if isinstance(location, str) and is_url(location) else []


def open_history(location: Location, readonly: bool = False, busy_timeout: float = BUSY_TIMEOUT) -> Database:
    """A connection in autocommit mode (transactions are explicit). Read-only opens never create
    the history and never migrate it. A symbolic link at a SQLite file (or at its -wal, -shm,
    -journal) is refused, never followed: a link planted there would have SQLite write through it."""
    doing = "nothing was read" if readonly else "this run was not recorded"
    if isinstance(location, str) and is_url(location):
        with _errors(location, doing, _secrets_of(location)):
            db: Database = connect_postgres(location, readonly)
            try:
                if readonly:
                    _check_readable(db)
                else:
                    migrate(db, max(busy_timeout, PG_WRITE_WAIT))
            except BaseException:
                db.close()
                raise
        return db
    path = Path(location)
    with _errors(path, doing):
        if readonly:
            if _identity(path, doing) is None:
                raise HistoryError(f"history {path}: no such file (a sweep writes it)")
        else:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if _identity(path, doing) is None:
                create_private(path)  # 0600, never through a link; SQLite fills it
        checked = _identity(path, doing)
        db = connect_sqlite(path, readonly, busy_timeout)
        con = db.con
        if checked is None or _identity(path, doing) != checked:  # swapped for a link while SQLite opened it
            con.close()
            raise HistoryError(f"history {path}: the file changed while it was opened; {doing}")
        try:
            con.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if readonly:
                _check_readable(db)
            else:
                _wal(con, busy_timeout)
                con.execute("PRAGMA synchronous = NORMAL")  # with WAL: a power cut loses the last sweep, never the file
                migrate(db, busy_timeout)
        except BaseException:
            con.close()
            raise
    return db


def _check_readable(db: Database) -> None:
    from vastprobe.history.schema import _version

    version = _version(db)
    # an empty file too (no object in it): not "from an older vastprobe" (found by a helper)
    if version[:2] == (0, 0) and (db.engine != SQLITE or version[2] == 0):
        raise SchemaError("holds no vastprobe history yet (a sweep writes it)")
    if needs_migration(db):
        raise SchemaError("is from an older vastprobe; the next sweep migrates it")


def _wal(con: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch a file to WAL (a no-op once it is). The switch wants the file to itself, and SQLite
    answers "locked" at once, without waiting, while other processes are opening a new file too:
    so retry it here, within the same bound as any other wait."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            con.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@dataclass(frozen=True)
class HostMemory:
    """What the history knew of a host when a sweep recorded it: the comparison a summary needs."""

    target: str
    verdict: str
    previous_verdict: str | None  # in the host's last recorded run before this one; None: first seen
    previous_verdict_since: float | None
    verdict_since: float  # start of the current run of this verdict
    verdict_sweeps: int
    last_healthy: float | None
    transitions_total: int
    in_order: bool = True  # False: an overlapping run older than the host's last record; kept as raw only

    @property
    def change(self) -> Literal["new", "still", "recovered"] | None:
        if not self.in_order:
            return None
        if self.verdict == "stalled":
            return "still" if self.previous_verdict == "stalled" else "new"
        if self.previous_verdict == "stalled" and self.verdict in ("healthy", "degraded"):
            return "recovered"
        return None


def state_rules(r: HostReport) -> str:
    return ",".join(sorted({f.rule for f in r.findings if f.severity in AT_RISK}))


def details_body(r: HostReport) -> str | None:
    if r.error is None and not r.findings:
        return None
    findings = [
        {"rule": f.rule, "code": f.code, "severity": f.severity, "summary": f.summary, "pids": list(f.pids[:MAX_PIDS])}
        for f in r.findings
    ]
    return json.dumps({"error": r.error, "findings": findings}, separators=(",", ":"), ensure_ascii=False)


def _ms(timings: dict[str, float], key: str) -> int | None:
    v = timings.get(key)
    return round(v * 1000) if isinstance(v, (int, float)) and v == v else None


@dataclass
class _Host:
    id: int
    target: str
    labels: str | None
    state_id: int
    episode_id: int
    last_seen: float
    state_since: float
    state_sweeps: int
    verdict_since: float
    verdict_sweeps: int
    last_healthy: float | None
    transitions_total: int


class HistoryStore:
    def __init__(self, location: Location, busy_timeout: float = BUSY_TIMEOUT) -> None:
        self.location = location if isinstance(location, str) and is_url(location) else Path(location)
        self.con = open_history(self.location, busy_timeout=busy_timeout)
        self.wait = busy_timeout if self.con.engine == SQLITE else max(busy_timeout, PG_WRITE_WAIT)

    def close(self) -> None:
        self.con.close()

    def peers(self, since: float) -> list[tuple[str, str | None, str]]:
        """(target, labels, features) of every host whose features were recorded since `since`:
        the whole fleet's, whichever run (shard) recorded them."""
        with _errors(self.location, "the group was compared with this run's hosts only", _secrets_of(self.location)):
            rows = self.con.execute(
                "SELECT target, labels, features FROM hosts WHERE features_at >= ? AND features IS NOT NULL", (since,)
            ).fetchall()
        return [(str(t), lab, str(f)) for t, lab, f in rows]

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(
        self,
        reports: Sequence[HostReport],
        *,
        started_at: float,
        finished_at: float,
        kind: str = "sweep",
        shard: str | None = None,
        complete: bool = True,
        keep: float = DEFAULT_KEEP,
        features: Mapping[str, str] | None = None,
    ) -> dict[str, HostMemory]:
        """One transaction: the sweep, every host's observation and new state, the pruning.
        `features`: what `--group-by` compared of each host (JSON text), kept for other shards."""
        latest = {r.target: r for r in reports}  # a target named twice counts once, as last seen
        with _errors(self.location, "this run was not recorded", _secrets_of(self.location)):
            con = self.con
            con.begin_write(self.wait)
            try:
                memory = self._record(
                    con, list(latest.values()), started_at, finished_at, kind, shard, complete, features or {}
                )
                prune(con, finished_at - keep)
                con.commit()
            except BaseException:
                with contextlib.suppress(*_driver_errors()):
                    con.rollback()
                raise
        return memory

    def _record(
        self,
        con: Database,
        reports: list[HostReport],
        t: float,
        finished_at: float,
        kind: str,
        shard: str | None,
        complete: bool,
        features: Mapping[str, str],
    ) -> dict[str, HostMemory]:
        sweep_id = con.execute(
            "INSERT INTO sweeps (started_at, finished_at, kind, shard, hosts, complete) VALUES (?, ?, ?, ?, ?, ?) "
            "RETURNING id",
            (t, finished_at, kind, shard, len(reports), int(complete)),
        ).fetchone()[0]
        states = {(s, v, r): i for i, s, v, r in con.execute("SELECT id, status, verdict, rules FROM states")}
        verdict_of = {i: v for (_, v, _), i in states.items()}
        hosts = {row[1]: _Host(*row) for row in bulk.select_hosts(con, [r.target for r in reports])}
        bodies: dict[str, tuple[bytes, str]] = {}
        for r in reports:
            body = details_body(r)
            if body is not None:
                bodies[r.target] = (hashlib.sha256(body.encode()).digest()[:16], body)
        for key in sorted({(r.status, r.verdict, state_rules(r)) for r in reports} - set(states)):
            states[key] = con.execute(
                "INSERT INTO states (status, verdict, rules) VALUES (?, ?, ?) ON CONFLICT (status, verdict, rules) "
                "DO UPDATE SET status = excluded.status RETURNING id",
                key,
            ).fetchone()[0]
            verdict_of[states[key]] = key[1]
        details_ids = bulk.upsert_details(con, [(d, b, t) for d, b in dict(bodies.values()).items()])
        observations = []
        host_updates = []
        new_hosts = []
        memory: dict[str, HostMemory] = {}
        for r in reports:
            state_id = states[(r.status, r.verdict, state_rules(r))]
            details_id = details_ids[bodies[r.target][0]] if r.target in bodies else None
            labels = json.dumps(r.labels, sort_keys=True) if r.labels else None
            feats = features.get(r.target)
            h = hosts.get(r.target)
            if h is None:
                healthy = t if r.verdict == "healthy" else None
                new_hosts.append((r.target, labels, t, state_id, details_id, healthy, feats,
                                  t if feats is not None else None))  # fmt: skip
                memory[r.target] = HostMemory(r.target, r.verdict, None, None, t, 1, healthy, 0)
                continue
            previous_verdict = verdict_of.get(h.state_id)
            if t < h.last_seen:  # an overlapping run that started earlier finished later
                memory[r.target] = HostMemory(
                    r.target, r.verdict, previous_verdict, h.verdict_since, h.verdict_since,
                    h.verdict_sweeps, h.last_healthy, h.transitions_total, in_order=False,
                )  # fmt: skip
            else:
                memory[r.target] = self._advance(con, h, r, state_id, previous_verdict, t)
                host_updates.append(
                    (labels, t, h.state_id, details_id, h.episode_id, h.state_since, h.state_sweeps,
                     h.verdict_since, h.verdict_sweeps, h.last_healthy, h.transitions_total, feats,
                     t if feats is not None else None, h.id)
                )  # fmt: skip
            observations.append(_observation(sweep_id, h.id, state_id, details_id, r))
        new_ids = bulk.insert_hosts(con, new_hosts)
        by_target = {r.target: r for r in reports}
        for target, _labels, _t, state_id, details_id, *_ in new_hosts:
            observations.append(_observation(sweep_id, new_ids[target], state_id, details_id, by_target[target]))
        bulk.insert_observations(con, observations)
        bulk.update_hosts(con, host_updates)
        return memory

    @staticmethod
    def _advance(
        con: Database, h: _Host, r: HostReport, state_id: int, previous_verdict: str | None, t: float
    ) -> HostMemory:
        """Move a host's current state on by one observation (mutates `h`)."""
        previous_verdict_since = h.verdict_since
        if state_id != h.state_id:
            con.execute(
                "UPDATE episodes SET last_seen = ?, sweeps = ? WHERE id = ?",
                (h.last_seen, h.state_sweeps, h.episode_id),
            )
            h.episode_id = con.execute(
                "INSERT INTO episodes (host_id, state_id, started_at, prev_state_id, prev_last_seen) "
                "VALUES (?, ?, ?, ?, ?) RETURNING id",
                (h.id, state_id, t, h.state_id, h.last_seen),
            ).fetchone()[0]
            h.state_id, h.state_since, h.state_sweeps = state_id, t, 1
            h.transitions_total += 1
        else:
            h.state_sweeps += 1
        if r.verdict != previous_verdict:
            h.verdict_since, h.verdict_sweeps = t, 1
        else:
            h.verdict_sweeps += 1
        if r.verdict == "healthy":
            h.last_healthy = t
        h.last_seen = t
        return HostMemory(
            r.target, r.verdict, previous_verdict, previous_verdict_since, h.verdict_since, h.verdict_sweeps,
            h.last_healthy, h.transitions_total,
        )  # fmt: skip


def _observation(sweep_id: int, host_id: int, state_id: int, details_id: int | None, r: HostReport) -> tuple:
    return (sweep_id, host_id, state_id, details_id, _ms(r.timings, "connect"), _ms(r.timings, "probe"),
            _ms(r.timings, "analysis"))  # fmt: skip


def prune(con: Database, cutoff: float) -> None:
    """Drop what ended before `cutoff`. A host's current state is kept with its true start, however
    old; a host not seen since the cutoff goes with all it had."""
    old = con.execute("SELECT max(id) FROM sweeps WHERE started_at < ?", (cutoff,)).fetchone()[0]
    if old is not None:
        con.execute("DELETE FROM observations WHERE sweep_id <= ?", (old,))
        con.execute("DELETE FROM sweeps WHERE id <= ?", (old,))
    con.execute(  # through the started_at index: only what began before the cutoff is looked at
        "DELETE FROM episodes WHERE started_at < ? AND last_seen IS NOT NULL AND last_seen < ?", (cutoff, cutoff)
    )
    gone = [row[0] for row in con.execute("SELECT id FROM hosts WHERE last_seen < ?", (cutoff,))]
    if gone:
        con.executemany("DELETE FROM episodes WHERE host_id = ?", [(i,) for i in gone])
        con.executemany("DELETE FROM hosts WHERE id = ?", [(i,) for i in gone])
    con.execute("DELETE FROM details WHERE last_used < ?", (cutoff,))


def record_safely(
    location: Location,
    reports: Sequence[HostReport],
    *,
    started_at: float,
    finished_at: float,
    kind: str = "sweep",
    shard: str | None = None,
    complete: bool = True,
    keep: float = DEFAULT_KEEP,
    busy_timeout: float = BUSY_TIMEOUT,
    on_error: list[HistoryError] | None = None,
    features: Mapping[str, str] | None = None,
    peers_since: float | None = None,
    peers_out: list[tuple[str, str | None, str]] | None = None,
) -> tuple[dict[str, HostMemory], str | None]:
    """Record and compare, or say in one line why not: (memory, warning). Never raises; the error
    itself is appended to `on_error` when given (a shared database's failure fails the run)."""
    from vastprobe.history.engine import reason

    try:
        with HistoryStore(location, busy_timeout) as store:
            memory = store.record(
                reports, started_at=started_at, finished_at=finished_at, kind=kind, shard=shard,
                complete=complete, keep=keep, features=features,
            )  # fmt: skip
            if peers_since is not None and peers_out is not None:
                peers_out.extend(store.peers(peers_since))
        return memory, None
    except HistoryError as exc:
        if on_error is not None:
            on_error.append(exc)
        return {}, str(exc)
    except Exception as exc:  # history never costs a result, whatever went wrong
        err = HistoryError(
            f"history {display(location)}: {type(exc).__name__}: {reason(exc, _secrets_of(location))}; "
            "this run was not recorded",
            isinstance(location, str) and is_url(location),
        )
        if on_error is not None:
            on_error.append(err)
        return {}, str(err)
