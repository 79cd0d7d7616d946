"""The history file's schema, its version (`PRAGMA user_version`) and the forward migrations.

A file written by an older vastprobe is migrated in place, inside one write transaction, the
first time a newer one opens it; a file from a newer vastprobe, or an SQLite file that is not a
vastprobe history, is refused rather than touched."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

APPLICATION_ID = 0x76707368  # "vpsh": tells our file from any other SQLite database

_V1 = """
CREATE TABLE sweeps (
    id          INTEGER PRIMARY KEY,
    started_at  REAL NOT NULL,      -- unix time; every observation of this sweep is dated by it
    finished_at REAL NOT NULL,
    kind        TEXT NOT NULL,      -- sweep | diagnose
    shard       TEXT,               -- "K/N" with --shard
    hosts       INTEGER NOT NULL,
    complete    INTEGER NOT NULL    -- 0: interrupted; what finished was recorded
);
CREATE INDEX sweeps_started ON sweeps(started_at);

-- a host's state: what a transition is a change of (status, verdict, the rules at warning or above)
CREATE TABLE states (
    id      INTEGER PRIMARY KEY,
    status  TEXT NOT NULL,
    verdict TEXT NOT NULL,
    rules   TEXT NOT NULL,          -- sorted slugs, comma-separated; '' for none
    UNIQUE (status, verdict, rules)
);

-- the error and findings (rule, code, severity, summary, pids) of an observation, as JSON; a
-- stall seen by many sweeps is stored once
CREATE TABLE details (
    id        INTEGER PRIMARY KEY,
    digest    BLOB NOT NULL UNIQUE,
    body      TEXT NOT NULL,
    last_used REAL NOT NULL         -- pruned with the observations that point here
);

-- one row per host: its current state, kept up to date as sweeps write
CREATE TABLE hosts (
    id                INTEGER PRIMARY KEY,
    target            TEXT NOT NULL UNIQUE,
    labels            TEXT,         -- JSON from the inventory (vast.ai instance id, label)
    first_seen        REAL NOT NULL,
    last_seen         REAL NOT NULL,
    state_id          INTEGER NOT NULL,
    details_id        INTEGER,      -- the last observation's details
    episode_id        INTEGER NOT NULL,
    state_since       REAL NOT NULL,
    state_sweeps      INTEGER NOT NULL,
    verdict_since     REAL NOT NULL,
    verdict_sweeps    INTEGER NOT NULL,
    last_healthy      REAL,
    transitions_total INTEGER NOT NULL  -- never decreases while the host is kept (a counter)
);

-- a run of sweeps in which a host kept one state; last_seen and sweeps are filled in when it ends.
-- Each row also names the state before it, so a transition is one row even after pruning.
CREATE TABLE episodes (
    id             INTEGER PRIMARY KEY,
    host_id        INTEGER NOT NULL,
    state_id       INTEGER NOT NULL,
    started_at     REAL NOT NULL,
    last_seen      REAL,
    sweeps         INTEGER,
    prev_state_id  INTEGER,         -- NULL: the host's first record
    prev_last_seen REAL             -- the last sweep that saw the state before
);
CREATE INDEX episodes_host ON episodes(host_id, started_at);
CREATE INDEX episodes_started ON episodes(started_at);

-- every host of every sweep; clustered by sweep so pruning the oldest is a range delete
CREATE TABLE observations (
    sweep_id    INTEGER NOT NULL,
    host_id     INTEGER NOT NULL,
    state_id    INTEGER NOT NULL,
    details_id  INTEGER,
    connect_ms  INTEGER,
    probe_ms    INTEGER,
    analysis_ms INTEGER,
    PRIMARY KEY (sweep_id, host_id)
) WITHOUT ROWID;

-- for people with the sqlite3 shell
CREATE VIEW observations_readable AS
SELECT datetime(s.started_at, 'unixepoch') AS at_utc, h.target, st.status, st.verdict, st.rules,
       o.connect_ms, o.probe_ms, o.analysis_ms, d.body AS details
FROM observations o
JOIN sweeps s ON s.id = o.sweep_id
JOIN hosts h ON h.id = o.host_id
JOIN states st ON st.id = o.state_id
LEFT JOIN details d ON d.id = o.details_id;
"""


def _to_v1(con: sqlite3.Connection) -> None:
    for statement in _V1.split(";\n"):
        if statement.strip():
            con.execute(statement)


# MIGRATIONS[i] takes a file from version i to i + 1; append, never edit a shipped step
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_to_v1]


def schema_version() -> int:
    return len(MIGRATIONS)


class SchemaError(Exception):
    pass


def _version(con: sqlite3.Connection) -> tuple[int, int, int]:
    """(user_version, application_id, objects in the schema), read in one statement: one snapshot,
    so a file another process is creating right now is never seen half made."""
    row = con.execute(
        "SELECT v.user_version, a.application_id, (SELECT count(*) FROM sqlite_schema) "
        "FROM pragma_user_version AS v, pragma_application_id AS a"
    ).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def _check(version: int, app: int, objects: int) -> None:
    if version == 0 and app == 0:
        if objects:
            raise SchemaError("is an SQLite database, but not a vastprobe history")
        return
    if app != APPLICATION_ID:
        raise SchemaError("is an SQLite database, but not a vastprobe history")
    if version > schema_version():
        raise SchemaError(f"has schema version {version}, newer than this vastprobe's ({schema_version()})")


def migrate(con: sqlite3.Connection) -> None:
    """Bring the file to the current version. Anything but a current file is looked at again
    under the write lock, so two processes opening a new file at once create it once."""
    version, app, _ = _version(con)
    if version == schema_version() and app == APPLICATION_ID:
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        version, app, objects = _version(con)
        _check(version, app, objects)
        for step in MIGRATIONS[version:]:
            step(con)
        con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        con.execute(f"PRAGMA user_version = {schema_version()}")
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


def needs_migration(con: sqlite3.Connection) -> bool:
    version, app, objects = _version(con)
    _check(version, app, objects)
    return version != schema_version()
