"""Where a history lives: an SQLite file (the embedded default) or a PostgreSQL database shared by
many controllers. Both are reached through `Database`, which takes one SQL text written with `?`
parameters, so the store, the schema and the queries are written once.

A location is a database URL when it starts with `postgresql://` or `postgres://` (libpq's own
forms: `postgresql:///fleet?service=vastprobe` reads host, user and password from a service file);
anything else is a file path. A URL is shown everywhere without its password (`display`)."""

from __future__ import annotations

import functools
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from vastprobe.untrusted.secrets import redact_text

SQLITE, POSTGRESQL = "sqlite", "postgresql"
URL_SCHEMES = ("postgresql://", "postgres://")
PG_SCHEMA = "vastprobe"  # every table lives in this schema: a shared database's other tables are never touched
PG_CONNECT_TIMEOUT = 10  # seconds, unless the URL says otherwise (a dead host would take the kernel's minutes)
# one transaction-level advisory lock: at most one run writes at a time, as SQLite's BEGIN IMMEDIATE
PG_WRITE_LOCK = 0x7670736800000001
_SECRET_KEYS = {"password", "sslpassword", "passfile"}


class DatabaseError(Exception):
    """One line: what went wrong with the history's database (never with a password in it)."""


def is_url(location: str | os.PathLike[str]) -> bool:
    return isinstance(location, str) and location.strip().lower().startswith(URL_SCHEMES)


def _userinfo(text: str) -> tuple[str, str, str]:
    """(scheme, user part, the rest) of a URL: the user part runs to the LAST `@`, since a password
    may hold `/`, `?`, `#` or `@` unescaped (urlsplit ends it at the first of those, and the rest of
    the password was printed as the path or the query)."""
    scheme, _, rest = text.partition("://")
    if "@" not in rest:
        return scheme, "", rest
    userinfo, _, rest = rest.rpartition("@")
    return scheme, userinfo, rest


def display(location: str | os.PathLike[str]) -> str:
    """The location as it may be printed: a URL loses its password (in the user part or the query);
    a libpq keyword string (`host=… password=…`) its password value."""
    if not is_url(location):
        return redact_text(str(location)) if "=" in str(location) else str(location)
    text = str(location).strip()
    try:
        scheme, userinfo, rest = _userinfo(text)
        user = userinfo.split(":", 1)[0]
        if any(c in user for c in "/?#"):
            user = "***"
        parts = urlsplit(f"{scheme}://{rest}")
        netloc = f"{user}@{parts.netloc}" if userinfo else parts.netloc
        query = urlencode([(k, "***" if k.lower() in _SECRET_KEYS else v) for k, v in parse_qsl(parts.query)], safe="/")
        if not netloc:  # postgresql:///fleet?service=…: urlunsplit would drop the empty authority
            return f"{parts.scheme}://{parts.path}" + (f"?{query}" if query else "")
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return f"{text.split(':', 1)[0]}://(a URL that could not be read)"


def url_secrets(location: str) -> list[str]:
    """Passwords a URL carries, to scrub from any message a driver returns."""
    found = []
    try:
        _scheme, userinfo, rest = _userinfo(location)
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
        found += [v for k, v in parse_qsl(urlsplit(f"x://{rest}").query) if k.lower() in _SECRET_KEYS and v]
    except ValueError:
        pass
    found += [unquote(s) for s in found]
    return [s for s in dict.fromkeys(found) if len(s) >= 3]


def reason(exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """The first line of an error, without any password in it, bounded."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    for piece in sorted({p for secret in secrets for p in _pieces(secret)}, key=len, reverse=True):
        text = text.replace(piece, "***").replace(quote(piece, safe=""), "***")
    text = _USERINFO.sub(r"\1:***@", text)  # libpq echoes a URI it could not read, password and all
    text = _QUERY_SECRET.sub(r"\1***", text)
    return redact_text(text)[:240]


_DELIMITERS = "/?#@:&="


def _pieces(secret: str) -> list[str]:
    """The secret, and each run of it between the characters a URL parser splits at (libpq echoes
    the part it choked on: `invalid URI query parameter: "v@u@host…"` of the password `x#w?v@u`),
    at least 3 characters long."""
    cuts = [0, *(i for i, c in enumerate(secret) if c in _DELIMITERS), len(secret)][:34]
    out = {secret}
    for a in range(len(cuts)):
        for b in range(a + 1, len(cuts)):
            piece = secret[cuts[a] : cuts[b]].strip(_DELIMITERS)
            if len(piece) >= 3:
                out.add(piece)
    return sorted(out, key=len, reverse=True)


_USERINFO = re.compile(r"(://[^:/@\s\"']*):[^@\s\"']*@")
_QUERY_SECRET = re.compile(r"((?:^|[?&\s])(?:ssl)?password=)[^&\s\"']*", re.I)


@functools.lru_cache(maxsize=256)
def _pg_sql(sql: str) -> str:
    """`?` parameters as psycopg's `%s` (our SQL holds no literal `?` or `%`)."""
    return sql.replace("%", "%%").replace("?", "%s")


class Database:
    """One connection in autocommit mode; transactions are explicit (`begin_write`, `commit`)."""

    engine: str
    where: str  # for messages

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        raise NotImplementedError

    def begin_write(self, wait: float) -> None:
        """Start the one write transaction of a run, waiting at most `wait` s for another writer."""
        raise NotImplementedError

    def stream(self, sql: str) -> Iterator[Sequence[Any]]:
        """Rows of a large query without holding them all."""
        raise NotImplementedError

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        if self.in_transaction:
            self.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def errors(self) -> tuple[type[BaseException], ...]:
        """The driver's exceptions, to be told as one line."""
        raise NotImplementedError


class SqliteDatabase(Database):
    engine = SQLITE

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        self.con = con
        self.where = str(path)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.con.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.con.executemany(sql, rows)

    def begin_write(self, wait: float) -> None:
        self.con.execute("BEGIN IMMEDIATE")  # waits up to the connection's busy timeout

    def stream(self, sql: str) -> Iterator[Sequence[Any]]:
        yield from self.con.execute(sql)

    @property
    def in_transaction(self) -> bool:
        return self.con.in_transaction

    def close(self) -> None:
        self.con.close()

    def errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)


class PostgresDatabase(Database):
    engine = POSTGRESQL

    def __init__(self, con: Any, location: str) -> None:
        import psycopg

        self.con = con
        self.where = display(location)
        self.secrets = url_secrets(location)
        self._psycopg = psycopg

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if not params:  # psycopg reads placeholders only when there are parameters
            return self.con.execute(sql)
        return self.con.execute(_pg_sql(sql), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            with self.con.cursor() as cur:
                cur.executemany(_pg_sql(sql), rows)

    def begin_write(self, wait: float) -> None:
        self.con.execute("BEGIN")
        self.con.execute(f"SET LOCAL lock_timeout = '{max(1, round(wait * 1000))}ms'")
        self.con.execute("SELECT pg_advisory_xact_lock(%s)", (PG_WRITE_LOCK,))

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """Many rows in one COPY: no statement, no plan, no round trip a row."""
        with self.con.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def stream(self, sql: str) -> Iterator[Sequence[Any]]:
        with self.con.transaction(), self.con.cursor(name="vastprobe_stream") as cur:
            cur.itersize = 5000
            cur.execute(sql)
            yield from cur

    @property
    def in_transaction(self) -> bool:
        return bool(self.con.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE)

    def close(self) -> None:
        self.con.close()

    def errors(self) -> tuple[type[BaseException], ...]:
        return (self._psycopg.Error,)


def connect_sqlite(path: Path, readonly: bool, busy_timeout: float) -> SqliteDatabase:
    if readonly:
        mode = "rw" if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK) else "ro"
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode={mode}", uri=True, timeout=busy_timeout)
    else:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        new = not path.exists()
        con = sqlite3.connect(path, timeout=busy_timeout)
        if new:  # host names and process names: readable by the owner only, before anything is in it
            os.chmod(path, 0o600)
    con.isolation_level = None
    return SqliteDatabase(con, path)


_HAS_TIMEOUT = re.compile(r"(^|[?&])connect_timeout=", re.I)


def connect_postgres(location: str, readonly: bool) -> PostgresDatabase:
    """Connect (libpq reads the service file, PGPASSFILE and PG* variables as psql does)."""
    where = display(location)
    try:
        import psycopg
    except ImportError as exc:
        raise DatabaseError(
            f"{where}: a PostgreSQL history needs psycopg 3: pip install 'vastprobe[postgres]'"
        ) from exc
    url = location.strip()
    extra: dict[str, Any] = {"application_name": "vastprobe", "autocommit": True}
    if not _HAS_TIMEOUT.search(urlsplit(url).query) and not os.environ.get("PGCONNECT_TIMEOUT"):
        extra["connect_timeout"] = PG_CONNECT_TIMEOUT
    try:
        con = psycopg.connect(url, **extra)
    except psycopg.Error as exc:
        raise DatabaseError(f"{where}: cannot connect: {reason(exc, url_secrets(url))}") from exc
    except ValueError as exc:  # a URL libpq could not read never reaches the server
        raise DatabaseError(f"{where}: not a usable PostgreSQL URL: {reason(exc, url_secrets(url))}") from exc
    try:
        con.execute(f"SET search_path TO {PG_SCHEMA}")
        if readonly:
            con.execute("SET default_transaction_read_only = on")
    except psycopg.Error as exc:
        con.close()
        raise DatabaseError(f"{where}: {reason(exc, url_secrets(url))}") from exc
    return PostgresDatabase(con, url)
