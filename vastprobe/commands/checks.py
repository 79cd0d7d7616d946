"""Option checks, run while the command line is parsed: before any target is read or contacted.

Each check takes the parsed value and returns it (possibly normalised) or raises
`typer.BadParameter` with a sentence; click names the option ("Invalid value for '--sample': …")
and `cli.run` prints that as one line and exits 2. A new option is defined in commands/options.py
with its check, `typer.Option(..., callback=checks.X)`; a check that needs another option's value
belongs in the command body, before the first connection (see settings.ssh_options).

Nothing here imports asyncssh or rich; the history's checks import vastprobe.history only when
their option is given (`diagnose` without --history imports none of it).
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

T = TypeVar("T")
#: Linux's PID_MAX_LIMIT (4M): no process can have a larger PID.
PID_MAX = 4_194_304


def _bad(text: str) -> typer.BadParameter:
    return typer.BadParameter(text)


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


_DURATION = re.compile(r"\s*([0-9]{1,12}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})\s*(ms|s|m|h|d)?\s*", re.ASCII)
_UNIT_S = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str | float) -> float:
    """Seconds from `1.5`, `500ms`, `5s`, `2m`, `1h` or `1d`: every duration option takes units, as
    `--keep 30d` does. The option's own check bounds it (`seconds`)."""
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return float(text)  # a plain number, nan and -1 included: `seconds` says what is wrong with it
    except ValueError:
        pass
    m = _DURATION.fullmatch(text.lower())
    if m is None:
        raise _bad(f"{text!r} is not a duration: want seconds (1.5) or a number with a unit (500ms, 5s, 2m, 1h)")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def seconds(lo: float, hi: float, zero: bool = False) -> Callable[[float | None], float | None]:
    """A finite number of seconds in [lo, hi]; with `zero`, 0 is allowed too (it means "off")."""

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value):
            raise _bad(f"{value} is not a number of seconds (want a finite number)")
        if zero and value == 0:
            return 0.0
        if not lo <= value <= hi:
            also = " (or 0)" if zero else ""
            raise _bad(f"{_n(value)} is out of range: want {_n(lo)} to {_n(hi)} seconds{also}")
        return value

    return check


def whole(lo: int, hi: int, what: str = "number") -> Callable[[int | None], int | None]:
    def check(value: int | None) -> int | None:
        if value is None:
            return None
        if not lo <= value <= hi:
            raise _bad(f"{value} is out of range: want a {what} from {lo} to {hi}")
        return value

    return check


def port(value: int | None) -> int | None:
    if value is not None and not 0 < value < 65536:
        raise _bad(f"{value} is not a TCP port (want 1-65535)")
    return value


def pids(values: list[int] | None) -> list[int] | None:
    for v in values or ():
        if not 0 < v <= PID_MAX:
            raise _bad(f"{v} is not a process ID (want 1-{PID_MAX})")
    return values


def regexes(values: list[str] | None) -> list[str] | None:
    import regex

    for m in values or ():
        if not m or len(m) > 4096:
            raise _bad(f"{m[:40]!r}: want a regular expression of 1 to 4096 characters")
        try:
            regex.compile(m)  # what analysis.scope matches with: re's syntax, each search bounded
        except regex.error as exc:
            raise _bad(f"{m!r} is not a regular expression: {exc}") from exc
    return values


def texts(values: list[str] | None) -> list[str] | None:
    """Remote paths and globs: non-empty (they reach the target single-quoted, as data)."""
    for v in values or ():
        if not v:
            raise _bad("an empty path")
    return values


def user(value: str | None) -> str | None:
    from vastprobe.targets import text_problem

    if value is None:
        return None
    bad = text_problem(value, "user name")
    if bad:
        raise _bad(bad)
    return value


def _file_problem(path: Path, allow_dir: bool = False) -> str | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path}: no such file"
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISDIR(st.st_mode) and not allow_dir:
        return f"{path}: is a directory, not a file"
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        return f"{path}: cannot read it: {exc.strerror}"
    return None


def readable_files(values: list[Path] | None) -> list[Path] | None:
    """Files vastprobe must read here (keys, hostfiles): existing, regular, readable."""
    for v in values or ():
        bad = _file_problem(v.expanduser())
        if bad:
            raise _bad(bad)
    return values


def readable_file(value: Path | None) -> Path | None:
    if value is not None:
        readable_files([value])
    return value


def known_hosts(value: Path | None) -> Path | None:
    """An existing known_hosts must be readable; a new one needs its directory (accept-new makes it)."""
    if value is None:
        return None
    p = value.expanduser()
    if p.exists() or p.is_symlink():
        bad = _file_problem(p)
        if bad:
            raise _bad(bad)
    elif not p.parent.is_dir():
        raise _bad(f"{p.parent}: no such directory")
    return value


def output_file(value: Path | None) -> Path | None:
    """A file vastprobe will write (atomically, in its directory); `-` is stdout."""
    from vastprobe.fileio import output_path_problem

    if value is None or str(value) == "-":
        return value
    bad = output_path_problem(value.expanduser())
    if bad:
        raise _bad(bad)
    return value


def config_options(values: list[str] | None) -> list[str] | None:
    """`-o Key=Value`: keys vastprobe honours, values of the right kind."""
    from vastprobe.transport.ssh.settings import parse_config_option

    for v in values or ():
        try:
            parse_config_option(v)
        except ValueError as exc:
            raise _bad(str(exc)) from exc
    return values


def jump_hosts(value: str | None) -> str | None:
    """`-J [user@]host[:port][,...]`, or `none`."""
    from vastprobe.targets import TargetError, parse_target

    if value is None or value.lower() == "none":
        return value
    for hop in value.split(","):
        try:
            parse_target(hop.strip())
        except TargetError as exc:
            raise _bad(str(exc)) from exc
    return value


# ---- history and fleet (docs/history.md) ---------------------------------------------------------

DEFAULT_KEEP = "30d"  # the default of --keep (written out in each command)


def keep(value: str) -> str:
    if value == DEFAULT_KEEP:  # the default needs no check, and `diagnose` without --history imports no history
        return value
    from vastprobe.history.timespec import TimeSpecError, parse_duration

    try:
        parse_duration(value)
    except TimeSpecError as exc:
        raise typer.BadParameter(str(exc)) from exc
    return value


def shard(value: str | None) -> str | None:
    if value is not None and value.strip() != "auto":  # auto: read from the environment once all options are in
        from vastprobe.history.shard import ShardError, parse_shard

        try:
            parse_shard(value)
        except ShardError as exc:
            raise typer.BadParameter(str(exc)) from exc
    return value


def group_by(value: str | None) -> str | None:
    if value is not None:
        from vastprobe.report.outliers import GroupByError, group_key

        try:
            group_key(value)
        except GroupByError as exc:
            raise typer.BadParameter(str(exc)) from exc
    return value


def history(value: str | None) -> str | None:
    if value is not None:
        problem = history_url_problem(value)
        if problem:
            raise typer.BadParameter(problem)
    return value


#: `host=… dbname=…`: libpq's keyword/value form, which a history location is not (a path is)
_LIBPQ_KEYWORDS = re.compile(
    r"\s*(?:host|hostaddr|port|dbname|user|password|passfile|service|sslmode|options)\s*=\S*(?:\s+\w+\s*=\S*)+\s*$"
)


def history_url_problem(value: str) -> str | None:
    """What is wrong with a database URL that no server need be asked (its syntax, the driver)."""
    from vastprobe.history.engine import display, is_url, reason

    if not is_url(value):
        if _LIBPQ_KEYWORDS.match(value):  # `host=db password=…`: taken for a file name, the password in it
            return (
                f"{display(value)}: a libpq keyword string is not a history location; give a URL "
                "(postgresql://user@host/db, the password in ~/.pgpass or a service file: "
                "postgresql:///db?service=NAME)"
            )
        if not value.strip():
            return "an empty path"
        parent = Path(value).expanduser().parent
        # a typo in a crontab's --history made a directory tree (at / as root) instead of an error, where
        # --prom and -o refuse a missing directory (found by a new user's review)
        return None if parent.is_dir() else f"{parent}: no such directory"
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return f"{display(value)}: a PostgreSQL history needs psycopg 3: pip install 'vastprobe[postgres]'"
    try:
        conninfo_to_dict(value.strip())
    except Exception as exc:  # psycopg.ProgrammingError: libpq could not read it
        from vastprobe.history.engine import url_secrets

        return f"{display(value)}: not a usable PostgreSQL URL: {reason(exc, url_secrets(value))}"
    return None


def kube_context(value: str | None) -> str | None:
    """A kubeconfig context name: never an option (it reaches kubectl's argv), never control characters."""
    if value is not None and (not value or value.startswith("-") or not value.isprintable()):
        raise _bad(f"not a kubectl context: {value!r}")
    return value
