"""Which processes a diagnosis is about: `--pid` roots and `--match` processes with their
descendants; with neither, every non-kernel process outside the probe's own session."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import regex

from vastprobe.analysis.tree import ProcessTree
from vastprobe.model import HostSnapshot

#: Characters of a command line (its arguments joined by spaces) that `--match` reads. A target's
#: processes can carry 64 arguments of 1 KiB each, and Python's regexes backtrack: `python.*train`
#: over 64 KiB of `python python …` took 0.6 s a process (100 such processes: 38 s, past the
#: host's analysis budget); over 4 KiB it takes 3 ms. Real command lines fit.
MATCH_PREFIX = 4096
#: How long one `--match` may search one command line. The pattern is the user's, the text a
#: tenant's: `(x+x+)+y` over forty `x`s backtracks for hours inside the regex engine, where neither
#: the analysis budget nor SIGTERM is checked, and holds every host of a sweep. The `regex` module
#: (the syntax of Python's `re`) bounds a search; a real pattern takes microseconds.
MATCH_TIMEOUT_S = 0.5


class MatchTooSlow(Exception):
    """A `--match` that ran past MATCH_TIMEOUT_S on a command line: the pattern backtracks."""


def match_text(cmdline: Sequence[str], comm: str) -> str:
    """What `--match` is matched against: the command line joined by spaces (the name when it has
    none), its first MATCH_PREFIX characters, without joining all of a huge one first."""
    parts, n = [], 0
    for arg in cmdline:
        parts.append(arg[: MATCH_PREFIX - n])
        n += len(arg) + 1
        if n >= MATCH_PREFIX:
            break
    return (" ".join(parts) or comm)[:MATCH_PREFIX]


def compute_scope(
    snapshot: HostSnapshot,
    pids: Sequence[int] = (),
    matches: Sequence[str] = (),
    tree: ProcessTree | None = None,
    checkpoint: Callable[[str], None] | None = None,
) -> tuple[int, ...]:
    """`checkpoint(stage)` is called between processes: the host's analysis budget (pipeline) can
    stop a match that takes too long there, one host at a time."""
    tree = tree or ProcessTree(snapshot)
    excluded = set(snapshot.excluded_pids)
    candidates = [p for p in snapshot.processes if not p.kernel_thread and p.pid not in excluded]
    if not pids and not matches:
        return tuple(sorted(p.pid for p in candidates))
    regexes = [(m, regex.compile(m)) for m in matches]
    roots = {pid for pid in pids if pid in tree.by_pid}
    seen: dict[str, bool] = {}  # many processes share a command line (workers, ranks): matched once
    for p in candidates if regexes else ():
        if checkpoint is not None:
            checkpoint("--match")
        text = match_text(p.cmdline, p.comm)
        hit = seen.get(text)
        if hit is None:
            hit = seen[text] = any(_search(m, r, text, p.pid) for m, r in regexes)
        if hit:
            roots.add(p.pid)
    chosen = set(roots)
    for root in roots:
        chosen.update(d.pid for d in tree.descendants(root))
    return tuple(sorted(pid for pid in chosen if pid not in excluded))


def _search(pattern: str, compiled: regex.Pattern[str], text: str, pid: int) -> bool:
    try:
        return compiled.search(text, timeout=MATCH_TIMEOUT_S) is not None
    except TimeoutError as exc:
        raise MatchTooSlow(
            f"--match {pattern[:80]!r} ran past {MATCH_TIMEOUT_S:g} s on the command line of pid {pid}: the pattern "
            "backtracks (a quantifier inside a repeated group, such as (a+)+); not diagnosed, write it without one"
        ) from exc
