"""`vastprobe history`: what the recorded sweeps say per host; `history export` and `history
import` move a whole history between stores (docs/history.md, docs/deploy.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

from vastprobe.commands.common import EXIT_OK, EXIT_USAGE, usage_error, write_or_say
from vastprobe.commands.fleet import default_history, history_location
from vastprobe.commands.options import P_HISTORY, HistoryOpt, JsonOpt, ListingFormatOpt, complete_targets
from vastprobe.commands.settings import output_format
from vastprobe.notices import say

ExportOutputOpt = Annotated[
    Optional[Path],
    typer.Option("-o", "--output", metavar="FILE", rich_help_panel=P_HISTORY,
                 help="history export: write the dump here (default: stdout)."),
]  # fmt: skip


def history_command(
    targets: Annotated[
        Optional[list[str]],
        typer.Argument(
            metavar="[TARGET|NODESET...]",
            help="Targets as swept, host names, or ranges like gpu\\[01-04]; all when none.",
            autocompletion=complete_targets,
        ),
    ] = None,
    history: HistoryOpt = None,
    since: Annotated[
        str,
        typer.Option(
            "--since",
            metavar="WHEN",
            rich_help_panel=P_HISTORY,
            help="Window for transitions and flapping: back from now (24h, 7d) or a time (2026-12-02T14:00).",
        ),
    ] = "24h",
    fmt: ListingFormatOpt = None,
    json_flag: JsonOpt = False,
    output: ExportOutputOpt = None,
) -> None:
    """What the recorded sweeps say per host: the state and since when, the last time healthy,
    transitions and flapping. Exit 2 when the history is missing or unreadable.
    `history export` writes the whole history as NDJSON; `history import FILE|-` adds such a dump to
    --history (an SQLite file into a shared PostgreSQL database: docs/deploy.md); a host --history
    already holds keeps its record, and the dump's observations of it are not imported.

    [b]Examples[/b]
      vastprobe history
      vastprobe history 'gpu\\[01-04]' --since 7d
      vastprobe history --history postgresql:///fleet?service=vastprobe --format json
      vastprobe history export --history old.sqlite > dump.ndjson
      vastprobe history import dump.ndjson --history postgresql:///fleet
    """
    import time

    from vastprobe.history.queries import host_histories
    from vastprobe.history.store import HistoryError, open_history
    from vastprobe.history.timespec import TimeSpecError, parse_since
    from vastprobe.render.formats import emit
    from vastprobe.render.history import HistoryDocument
    from vastprobe.targets import InventoryError, expand_nodeset

    location = history_location(history) if history is not None else default_history()
    if targets and targets[0] in ("export", "import"):  # a host named so: user@export, export:22
        _history_transfer(list(targets), location, output)
    if output is not None:
        usage_error("-o/--output goes with history export")
    now = time.time()
    try:
        start = parse_since(since, now)
    except TimeSpecError as exc:
        usage_error(f"--since: {exc}")
    try:
        words = [t for text in targets or () for t in expand_nodeset(text)]
    except InventoryError as exc:
        usage_error(str(exc))
    from vastprobe.history.engine import display

    path = display(location)  # as it may be printed: a URL without its password
    try:
        con = open_history(location, readonly=True)
        try:
            found, missing = host_histories(con, words, start)
        finally:
            con.close()
    except HistoryError as exc:
        say(f"vastprobe history: {exc} (see vastprobe history -h)")
        raise typer.Exit(EXIT_USAGE) from exc
    if missing:
        names = f"{', '.join(missing[:20])}{' ...' if len(missing) > 20 else ''}"
        if not found:  # a usage error, worded as every other
            say(f"vastprobe history: no history for {names} in {path} (see vastprobe history -h)")
            raise typer.Exit(EXIT_USAGE)
        say(f"vastprobe history: no history for {names} in {path}")
    emit(HistoryDocument(found, start, now, missing), output_format(fmt, json_flag))
    raise typer.Exit(EXIT_OK)


def _history_transfer(words: list[str], location, output: Optional[Path]) -> NoReturn:  # type: ignore[no-untyped-def]
    """`history export [-o FILE]` and `history import FILE|-`: exit 0, or 2 with one line."""
    import time

    from vastprobe.history.engine import display
    from vastprobe.history.store import HistoryError, _errors, open_history
    from vastprobe.history.transfer import TransferError, export_lines, import_lines, read_lines

    verb, args = words[0], words[1:]
    where = display(location)
    if verb == "export":
        if args:
            usage_error(f"history export takes no targets ({args[0]!r}); it writes the whole history")
        try:
            db = open_history(location, readonly=True)
            try:
                with _errors(location, "nothing was exported"):
                    lines = "".join(line + "\n" for line in export_lines(db, where, time.time()))
            finally:
                db.close()
        except HistoryError as exc:
            say(f"vastprobe history: {exc} (see vastprobe history -h)")
            raise typer.Exit(EXIT_USAGE) from exc
        if output is None:
            sys.stdout.write(lines)
        elif not write_or_say(output.expanduser(), lines, "-o"):
            raise typer.Exit(EXIT_USAGE)  # as collect's -o: a full disk was an "internal error", exit 4
        raise typer.Exit(EXIT_OK)
    if len(args) != 1:
        usage_error("history import takes one dump: a file from history export, or - for stdin")
    if output is not None:
        usage_error("-o/--output goes with history export")
    try:
        source = sys.stdin if args[0] == "-" else open(args[0], encoding="utf-8", errors="strict")  # noqa: SIM115
    except OSError as exc:
        usage_error(f"{args[0]}: {exc.strerror or exc}")
    try:
        import itertools

        from vastprobe.history.store import BUSY_TIMEOUT, PG_WRITE_WAIT
        from vastprobe.history.transfer import check_header

        dump = read_lines(source)
        first = next(dump, None)
        check_header(first)  # a file that is no dump opens (or creates) no history
        db = open_history(location)
        try:
            with _errors(location, "nothing was imported"):
                rows = itertools.chain([first or ""], dump)
                counts, skipped = import_lines(db, rows, max(BUSY_TIMEOUT, PG_WRITE_WAIT))
        finally:
            db.close()
    except (HistoryError, TransferError, UnicodeDecodeError) as exc:
        name = "stdin" if args[0] == "-" else args[0]
        why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
        say(f"vastprobe history: import {name}: {why}; nothing was imported")
        raise typer.Exit(EXIT_USAGE) from exc
    finally:
        if source is not sys.stdin:
            source.close()
    note = f"; {len(skipped)} host(s) already in it kept their record: {', '.join(skipped[:8])}" if skipped else ""
    say(f"vastprobe history: imported {counts['hosts']} hosts, {counts['sweeps']} sweeps, "
        f"{counts['observations']} observations into {where}{note}")  # fmt: skip
    raise typer.Exit(EXIT_OK)
