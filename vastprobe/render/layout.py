"""Lines that wrap under their own text (hanging indents) and lines that are cut at the edge.

Both take a `prefix` (spaces, or the guides of a tree: "│  ") that starts every line they print,
so a wrapped line keeps its indent and its guide."""

from __future__ import annotations

from rich.console import Console
from rich.containers import Lines
from rich.style import Style
from rich.text import Text

MIN_BODY = 24  # narrower than this, the body goes under the head instead of beside it
SHORT_HANG = 9  # a head wider than a third of the line: wrapped lines start this far in
#: The style of a part of a cropped line that gives up its middle, not its end, when the line is
#: too wide: a command line, whose end names the script (`/usr/bin/python3 … train.py --lr 3e-4`).
MIDDLE = Style(dim=True, meta={"shorten": "middle"})
MIN_KEPT = 16  # a part shorter than this after shortening is cut at the end as any other


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
    """One line, cut with an ellipsis at the terminal's edge (tree and table rows); a part styled
    MIDDLE gives up its middle first."""
    line = Text(prefix) + line
    line.rstrip()
    over = line.cell_len - console.width
    if over > 0:
        line = shorten_middle(line, over)
    console.print(line, no_wrap=True, overflow="ellipsis", crop=True)


def shorten_middle(line: Text, over: int) -> Text:
    """`line` `over` cells shorter, taken from the middle of its MIDDLE part (marked `…`): the start
    (the program and the script it runs) and the end (the last arguments) stay."""
    span = next(
        (sp for sp in line.spans if isinstance(sp.style, Style) and sp.style.meta.get("shorten") == "middle"), None
    )
    if span is None:
        return line
    part = line.plain[span.start : span.end]
    keep = len(part) - over - 1  # characters; wide ones are cropped at the edge as before
    if keep < MIN_KEPT:
        return line
    return line[: span.start] + Text(middle_cut(part, keep), style=MIDDLE) + line[span.end :]


def middle_cut(command: str, keep: int) -> str:
    """`command` in `keep` characters and one `…`. The head keeps the program and the script or
    module it runs when they fit in two thirds (their directories shortened to `…/` when that makes
    them fit: `…/python3 …/train.py`), else half; the end starts at a whole name when one is near."""
    words = command.split(" ")
    j = next((j for j in range(1, len(words)) if words[j] and not words[j].startswith("-")), len(words) - 1)
    head = " ".join(words[: j + 1])
    if j < len(words) - 1 and len(head) > keep - keep // 2:  # it would not stay whole in the half
        if len(head) > keep * 2 // 3:
            head = " ".join(f"…/{w.rsplit('/', 1)[1]}" if "/" in w.rstrip("/") and not w.startswith("-") else w
                            for w in words[: j + 1])  # fmt: skip
        if len(head) <= keep * 2 // 3:
            return head + "…" + command[len(command) - (keep - len(head)) :]
    start = len(command) - keep // 2  # where the kept end starts: half of what is kept
    reach = max(1, keep // 6)
    starts = [i for i in range(start - reach, start + reach + 1) if 0 < i < len(command) and command[i - 1] in " /"]
    if starts:  # nearest a name's first character, earlier before later: a whole name rather than less
        start = min(starts, key=lambda i: (abs(i - start), i > start))
    return command[: keep - (len(command) - start)] + "…" + command[start:]
