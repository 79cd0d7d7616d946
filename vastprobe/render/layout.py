"""Lines that wrap under their own text (hanging indents) and lines that are cut at the edge.

Both take a `prefix` (spaces, or the guides of a tree: "│  ") that starts every line they print,
so a wrapped line keeps its indent and its guide."""

from __future__ import annotations

from rich.console import Console
from rich.containers import Lines
from rich.text import Text

MIN_BODY = 24  # narrower than this, the body goes under the head instead of beside it
SHORT_HANG = 9  # a head wider than a third of the line: wrapped lines start this far in


def hanging(
    console: Console, prefix: str, head: Text, body: Text, then: str | None = None, hang: int | None = None
) -> None:
    """`prefix head body`; when `body` wraps, its next lines start under its first character (or,
    after a wide head, a little in; `hang` sets how far), after `then` (default: `prefix`; a tree's
    guide where `prefix` holds its branch)."""
    then = prefix if then is None else then[: len(prefix)].ljust(len(prefix))
    room = console.width - len(prefix)
    first = room - head.cell_len
    if first < MIN_BODY:
        console.print(Text(prefix) + head, no_wrap=True, overflow="ellipsis", crop=True)
        prefix = then = then + "    "
        head = Text("")
        room = first = max(MIN_BODY, console.width - len(prefix))
    if hang is None:
        hang = head.cell_len if head.cell_len * 3 <= room else min(head.cell_len, SHORT_HANG)
    lines = body.wrap(console, first, overflow="fold")
    if len(lines) > 1 and hang != head.cell_len:  # the rest wraps at its own, wider measure
        cut = len(lines[0].plain)
        rest = body[cut:]
        lead = len(rest.plain) - len(rest.plain.lstrip())
        lines = Lines([lines[0], *rest[lead:].wrap(console, max(MIN_BODY, room - hang), overflow="fold")])
    pad = Text(" " * hang)
    for i, line in enumerate(lines):
        line.rstrip()
        start = Text(prefix) + head if i == 0 else Text(then) + pad
        console.print(start + line, no_wrap=True, overflow="crop", crop=True)


def cropped(console: Console, prefix: str, line: Text) -> None:
    """One line, cut with an ellipsis at the terminal's edge (tree and table rows)."""
    line = Text(prefix) + line
    line.rstrip()
    console.print(line, no_wrap=True, overflow="ellipsis", crop=True)
