"""The store's many-row steps, one per engine. SQLite runs in the process: a statement a row costs
microseconds. PostgreSQL is a server: a statement a row is a round trip and a plan each, which for
20,000 hosts took 25 s under load, so there each step is one statement over arrays (`unnest`) or a
COPY. Both write the same rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vastprobe.history.engine import SQLITE, Database

HOST_COLUMNS = (
    "id, target, labels, state_id, episode_id, last_seen, state_since, state_sweeps, verdict_since, "
    "verdict_sweeps, last_healthy, transitions_total"
)
_CHUNK = 500  # SQLite's bound on ? parameters is 32766; stay far below it
_DETAILS_UPSERT = (
    "ON CONFLICT (digest) DO UPDATE SET last_used = CASE WHEN excluded.last_used > details.last_used "
    "THEN excluded.last_used ELSE details.last_used END RETURNING id, digest"
)


def _columns(rows: Sequence[Sequence[Any]], n: int) -> list[list[Any]]:
    return [[row[i] for row in rows] for i in range(n)]


def select_hosts(con: Database, targets: Sequence[str]) -> list[Sequence[Any]]:
    if con.engine != SQLITE:
        return list(con.execute(f"SELECT {HOST_COLUMNS} FROM hosts WHERE target = ANY(?)", (list(targets),)))
    out: list[Sequence[Any]] = []
    for i in range(0, len(targets), _CHUNK):
        chunk = targets[i : i + _CHUNK]
        out += con.execute(f"SELECT {HOST_COLUMNS} FROM hosts WHERE target IN ({','.join('?' * len(chunk))})", chunk)
    return out


def upsert_details(con: Database, rows: Sequence[tuple[bytes, str, float]]) -> dict[bytes, int]:
    """(digest, body, last used) rows, distinct digests: {digest: id}."""
    if not rows:
        return {}
    if con.engine == SQLITE:
        ids = {}
        for row in rows:
            sql = f"INSERT INTO details (digest, body, last_used) VALUES (?, ?, ?) {_DETAILS_UPSERT}"
            i, d = con.execute(sql, row).fetchone()
            ids[bytes(d)] = int(i)
        return ids
    cur = con.execute(
        "INSERT INTO details (digest, body, last_used) SELECT * FROM unnest(?::bytea[], ?::text[], ?::float8[]) "
        + _DETAILS_UPSERT,
        _columns(sorted(rows), 3),  # in digest order: two writers never wait on each other's rows in turn
    )
    return {bytes(d): int(i) for i, d in cur.fetchall()}


_NEW_HOST = (
    "target, labels, first_seen, last_seen, state_id, details_id, episode_id, state_since, state_sweeps, "
    "verdict_since, verdict_sweeps, last_healthy, transitions_total, features, features_at"
)


def insert_hosts(con: Database, rows: Sequence[tuple[Any, ...]]) -> dict[str, int]:
    """New hosts, each with its first episode: rows of (target, labels, t, state_id, details_id,
    last_healthy, features, features_at); {target: id}."""
    if not rows:
        return {}
    ids: dict[str, int] = {}
    if con.engine == SQLITE:
        for target, labels, t, state_id, details_id, healthy, feats, feats_at in rows:
            host_id = con.execute(
                f"INSERT INTO hosts ({_NEW_HOST}) VALUES (?, ?, ?, ?, ?, ?, 0, ?, 1, ?, 1, ?, 0, ?, ?) RETURNING id",
                (target, labels, t, t, state_id, details_id, t, t, healthy, feats, feats_at),
            ).fetchone()[0]
            episode = con.execute(
                "INSERT INTO episodes (host_id, state_id, started_at) VALUES (?, ?, ?) RETURNING id",
                (host_id, state_id, t),
            ).fetchone()[0]
            con.execute("UPDATE hosts SET episode_id = ? WHERE id = ?", (episode, host_id))
            ids[target] = int(host_id)
        return ids
    cols = _columns(rows, 8)
    cur = con.execute(
        f"INSERT INTO hosts ({_NEW_HOST}) SELECT u.target, u.labels, u.t, u.t, u.state_id, u.details_id, 0, u.t, 1, "
        "u.t, 1, u.healthy, 0, u.feats, u.feats_at FROM unnest(?::text[], ?::text[], ?::float8[], ?::int8[], "
        "?::int8[], ?::float8[], ?::text[], ?::float8[]) AS u(target, labels, t, state_id, details_id, healthy, "
        "feats, feats_at) RETURNING id, target",
        cols,
    )
    ids = {str(target): int(i) for i, target in cur.fetchall()}
    con.execute(
        "WITH e AS (INSERT INTO episodes (host_id, state_id, started_at) SELECT h.id, h.state_id, h.first_seen "
        "FROM hosts h WHERE h.id = ANY(?) RETURNING id, host_id) "
        "UPDATE hosts SET episode_id = e.id FROM e WHERE hosts.id = e.host_id",
        (list(ids.values()),),
    )
    return ids


_OBSERVATION = ("sweep_id", "host_id", "state_id", "details_id", "connect_ms", "probe_ms", "analysis_ms")


def insert_observations(con: Database, rows: Sequence[tuple[Any, ...]]) -> None:
    if not rows:
        return
    if con.engine == SQLITE:
        con.executemany(f"INSERT INTO observations ({', '.join(_OBSERVATION)}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        return
    con.copy_rows("observations", _OBSERVATION, rows)


_UPDATE = (
    "labels = ?, last_seen = ?, state_id = ?, details_id = ?, episode_id = ?, state_since = ?, state_sweeps = ?, "
    "verdict_since = ?, verdict_sweeps = ?, last_healthy = ?, transitions_total = ?, "
    "features = COALESCE(?, features), features_at = COALESCE(?, features_at)"
)


def update_hosts(con: Database, rows: Sequence[tuple[Any, ...]]) -> None:
    """Rows of (labels, last_seen, state_id, details_id, episode_id, state_since, state_sweeps,
    verdict_since, verdict_sweeps, last_healthy, transitions_total, features, features_at, id)."""
    if not rows:
        return
    if con.engine == SQLITE:
        con.executemany(f"UPDATE hosts SET {_UPDATE} WHERE id = ?", rows)
        return
    con.execute(
        "UPDATE hosts SET labels = u.labels, last_seen = u.last_seen, state_id = u.state_id, "
        "details_id = u.details_id, episode_id = u.episode_id, state_since = u.state_since, "
        "state_sweeps = u.state_sweeps, verdict_since = u.verdict_since, verdict_sweeps = u.verdict_sweeps, "
        "last_healthy = u.last_healthy, transitions_total = u.transitions_total, "
        "features = COALESCE(u.features, hosts.features), features_at = COALESCE(u.features_at, hosts.features_at) "
        "FROM unnest(?::text[], ?::float8[], ?::int8[], ?::int8[], ?::int8[], ?::float8[], ?::int8[], ?::float8[], "
        "?::int8[], ?::float8[], ?::int8[], ?::text[], ?::float8[], ?::int8[]) AS u(labels, last_seen, state_id, "
        "details_id, episode_id, state_since, state_sweeps, verdict_since, verdict_sweeps, last_healthy, "
        "transitions_total, features, features_at, id) WHERE hosts.id = u.id",
        _columns(sorted(rows, key=lambda r: r[-1]), 14),
    )
