"""Every output format, declared once: how it streams one host as it finishes and how it writes a
whole document. diagnose, sweep, analyze and history all print through `emit`, so a new format is
one entry in FORMATS, and --format offers it everywhere at once.

Nothing here imports rich or orjson: a format's writer imports what it draws with.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import IO, Any, Protocol


class Document(Protocol):
    """What a command prints, in the shapes the formats draw on (render/documents.py, render/history.py)."""

    def items(self) -> Iterable[Any]:
        """The hosts, in the order they are printed."""

    def item(self, host: Any) -> Any:
        """One host as a JSON value: a line of NDJSON."""

    def whole(self) -> Any:
        """The whole document as one JSON value."""

    def end(self) -> Any | None:
        """The JSON value of the line that ends an NDJSON stream (None: the stream has no such line)."""

    def table(self, out: IO[str]) -> None:
        """The document for a person to read."""


def _dumps(value: Any, indent: int | None = None) -> str:
    from vastprobe.render.jsonable import dumps

    return dumps(value, indent=indent)


def _write_table(doc: Document, out: IO[str], streamed: bool) -> None:
    doc.table(out)


def _write_json(doc: Document, out: IO[str], streamed: bool) -> None:
    out.write(_dumps(doc.whole(), indent=1 if out.isatty() else None) + "\n")  # compact for pipes and files


def _ndjson_line(doc: Document, host: Any) -> str:
    return _dumps(doc.item(host)) + "\n"


def _write_ndjson(doc: Document, out: IO[str], streamed: bool) -> None:
    lines = "" if streamed else "".join(_ndjson_line(doc, h) for h in doc.items())
    end = doc.end()
    out.write(lines + ("" if end is None else _dumps(end) + "\n"))


@dataclass(frozen=True)
class Format:
    name: str
    #: The whole document; `streamed`: its hosts already went out one by one through `stream`.
    write: Callable[[Document, IO[str], bool], None]
    #: One host's text the moment it finishes; None: the format prints everything at the end.
    stream: Callable[[Document, Any], str] | None = None
    #: Whether --snapshot's parsed evidence can appear in it.
    shows_snapshot: bool = True


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("table", _write_table, shows_snapshot=False),
        Format("json", _write_json),
        Format("ndjson", _write_ndjson, stream=_ndjson_line),
    )
}

#: --format's choices, in FORMATS' order.
OutputFormat = StrEnum("OutputFormat", {name: name for name in FORMATS})  # type: ignore[misc]


def emit(doc: Document, fmt: Format, out: IO[str] | None = None, streamed: bool = False) -> None:
    """Write `doc` whole in `fmt` (stdout by default), then flush: what follows on stderr comes after it."""
    out = sys.stdout if out is None else out
    fmt.write(doc, out, streamed)
    out.flush()


def document_text(doc: Document, fmt: Format) -> str:
    """`doc` whole in `fmt`, as a file gets it (JSON compact: no terminal reads it)."""
    buf = io.StringIO()
    fmt.write(doc, buf, False)
    return buf.getvalue()
