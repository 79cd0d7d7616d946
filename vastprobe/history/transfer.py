"""`vastprobe history export` / `import`: a history moved between places (an SQLite file into the
shared PostgreSQL database, typically) as NDJSON, one line per row, table by table.

Import merges: ids are renumbered, states and findings are matched to the destination's own, and a
host the destination already knows keeps the destination's record (its rows in the dump are left
out, and named). A sweep is written only when one of its observations is, so importing the same
dump twice adds nothing. The whole import is one write transaction: it lands whole or not at all."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from vastprobe.history.engine import Database
from vastprobe.history.schema import schema_version

FORMAT = "vastprobe.history-export/1"
TABLES: dict[str, tuple[str, ...]] = {  # in dependency order: a row's references come before it
    "states": ("id", "status", "verdict", "rules"),
    "details": ("id", "digest", "body", "last_used"),
    "sweeps": ("id", "started_at", "finished_at", "kind", "shard", "hosts", "complete"),
    "hosts": ("id", "target", "labels", "first_seen", "last_seen", "state_id", "details_id", "episode_id",
              "state_since", "state_sweeps", "verdict_since", "verdict_sweeps", "last_healthy", "transitions_total"),
    "episodes": ("id", "host_id", "state_id", "started_at", "last_seen", "sweeps", "prev_state_id", "prev_last_seen"),
    "observations": ("sweep_id", "host_id", "state_id", "details_id", "connect_ms", "probe_ms", "analysis_ms"),
}  # fmt: skip
_ORDER = {"observations": "sweep_id, host_id"}
_BATCH = 5000


class TransferError(ValueError):
    """One line: what in the dump or the destination stops the import."""


def export_lines(db: Database, source: str, now: float) -> Iterator[str]:
    yield json.dumps({"schema": FORMAT, "schema_version": schema_version(), "source": source, "exported_at": now,
                      "columns": TABLES})  # fmt: skip
    for table, columns in TABLES.items():
        sql = f"SELECT {', '.join(columns)} FROM {table} ORDER BY {_ORDER.get(table, 'id')}"
        for row in db.stream(sql):
            values = [bytes(v).hex() if isinstance(v, (bytes, bytearray, memoryview)) else v for v in row]
            yield json.dumps({"t": table, "r": values}, ensure_ascii=False, separators=(",", ":"))


def check_header(first: str | None) -> None:
    """The dump's first line, checked before anything is opened for writing."""
    if first is None:
        raise TransferError("the dump is empty")
    try:
        head = json.loads(first)
    except ValueError:
        raise TransferError("line 1: not a vastprobe history export (not JSON)") from None
    if not isinstance(head, dict) or head.get("schema") != FORMAT:
        raise TransferError(f"line 1: not a vastprobe history export (want schema {FORMAT})")
    if head.get("columns") != {k: list(v) for k, v in TABLES.items()}:
        raise TransferError(
            f"line 1: the dump's tables are from another vastprobe (schema {head.get('schema_version')})"
        )


def _rows(lines: Iterable[str]) -> Iterator[tuple[str, list[Any]]]:
    it = iter(enumerate(lines, 1))
    check_header(next(it, (1, None))[1])
    for n, line in it:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            table, row = obj["t"], obj["r"]
        except (ValueError, KeyError, TypeError):
            raise TransferError(f"line {n}: not a row of a history export") from None
        if table not in TABLES or not isinstance(row, list) or len(row) != len(TABLES[table]):
            raise TransferError(f"line {n}: not a row of a history export")
        yield table, row


class _Importer:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.states: dict[Any, int] = {}
        self.details: dict[Any, int] = {}
        self.sweep_rows: dict[Any, list[Any]] = {}
        self.sweeps: dict[Any, int] = {}
        self.hosts: dict[Any, int] = {}
        self.episodes: dict[Any, int] = {}
        self.host_episode: dict[int, Any] = {}  # destination host id -> the dump's episode id
        self.skipped: list[str] = []
        self.pending: list[tuple[Any, ...]] = []
        self.counts = {"hosts": 0, "sweeps": 0, "episodes": 0, "observations": 0}
        self.known = {t for (t,) in db.execute("SELECT target FROM hosts").fetchall()}
        self.state_ids = {(s, v, r): i for i, s, v, r in db.execute("SELECT id, status, verdict, rules FROM states")}

    def _id(self, sql: str, params: tuple[Any, ...]) -> int:
        return int(self.db.execute(sql + " RETURNING id", params).fetchone()[0])

    def state(self, row: list[Any]) -> None:
        key = (row[1], row[2], row[3])
        if key not in self.state_ids:
            self.state_ids[key] = self._id("INSERT INTO states (status, verdict, rules) VALUES (?, ?, ?)", key)
        self.states[row[0]] = self.state_ids[key]

    def detail(self, row: list[Any]) -> None:
        digest = bytes.fromhex(row[1])
        self.details[row[0]] = self._id(
            "INSERT INTO details (digest, body, last_used) VALUES (?, ?, ?) ON CONFLICT (digest) DO UPDATE SET "
            "last_used = CASE WHEN excluded.last_used > details.last_used THEN excluded.last_used "
            "ELSE details.last_used END",
            (digest, row[2], row[3]),
        )

    def sweep(self, row: list[Any]) -> None:
        self.sweep_rows[row[0]] = row

    def host(self, row: list[Any]) -> None:
        if row[1] in self.known:
            self.skipped.append(row[1])
            return
        new = self._id(
            "INSERT INTO hosts (target, labels, first_seen, last_seen, state_id, details_id, episode_id, state_since, "
            "state_sweeps, verdict_since, verdict_sweeps, last_healthy, transitions_total) "
            "VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?)",
            (row[1], row[2], row[3], row[4], self.states[row[5]], self.details.get(row[6]), *row[8:]),
        )
        self.known.add(row[1])
        self.hosts[row[0]] = new
        self.host_episode[new] = row[7]
        self.counts["hosts"] += 1

    def episode(self, row: list[Any]) -> None:
        host = self.hosts.get(row[1])
        if host is None:
            return
        prev = self.states[row[6]] if row[6] is not None else None
        self.episodes[row[0]] = self._id(
            "INSERT INTO episodes (host_id, state_id, started_at, last_seen, sweeps, prev_state_id, prev_last_seen) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (host, self.states[row[2]], row[3], row[4], row[5], prev, row[7]),
        )
        self.counts["episodes"] += 1

    def observation(self, row: list[Any]) -> None:
        host = self.hosts.get(row[1])
        if host is None:
            return
        if row[0] not in self.sweeps:
            s = self.sweep_rows[row[0]]
            self.sweeps[row[0]] = self._id(
                "INSERT INTO sweeps (started_at, finished_at, kind, shard, hosts, complete) VALUES (?, ?, ?, ?, ?, ?)",
                tuple(s[1:]),
            )
            self.counts["sweeps"] += 1
        self.pending.append(
            (self.sweeps[row[0]], host, self.states[row[2]], self.details.get(row[3]) if row[3] is not None else None,
             row[4], row[5], row[6])
        )  # fmt: skip
        if len(self.pending) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        self.db.executemany("INSERT INTO observations VALUES (?, ?, ?, ?, ?, ?, ?)", self.pending)
        self.counts["observations"] += len(self.pending)
        self.pending = []

    def finish(self) -> None:
        self.flush()
        self.db.executemany(
            "UPDATE hosts SET episode_id = ? WHERE id = ?",
            [(self.episodes.get(ep, 0), host) for host, ep in self.host_episode.items()],
        )


def import_lines(db: Database, lines: Iterable[str], wait: float) -> tuple[dict[str, int], list[str]]:
    """Merge a dump into `db` in one write transaction: (what was written, targets left out)."""
    db.begin_write(wait)
    try:
        imp = _Importer(db)
        handlers: dict[str, Callable[[list[Any]], None]] = {
            "states": imp.state, "details": imp.detail, "sweeps": imp.sweep, "hosts": imp.host,
            "episodes": imp.episode, "observations": imp.observation,
        }  # fmt: skip
        for table, row in _rows(lines):
            try:
                handlers[table](row)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise TransferError(f"a {table} row refers to what the dump does not hold ({exc!r:.80})") from None
        imp.finish()
        db.commit()
    except BaseException:
        db.rollback()
        raise
    return imp.counts, imp.skipped


def read_lines(stream: IO[str]) -> Iterator[str]:
    for line in stream:
        yield line.rstrip("\n")
