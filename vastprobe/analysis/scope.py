"""Which processes a diagnosis is about: `--pid` roots and `--match` processes with their
descendants; with neither, every non-kernel process outside the probe's own session."""

from __future__ import annotations

import re
from collections.abc import Sequence

from vastprobe.analysis.tree import ProcessTree
from vastprobe.model import HostSnapshot


def compute_scope(
    snapshot: HostSnapshot, pids: Sequence[int] = (), matches: Sequence[str] = (), tree: ProcessTree | None = None
) -> tuple[int, ...]:
    tree = tree or ProcessTree(snapshot)
    excluded = set(snapshot.excluded_pids)
    candidates = [p for p in snapshot.processes if not p.kernel_thread and p.pid not in excluded]
    if not pids and not matches:
        return tuple(sorted(p.pid for p in candidates))
    regexes = [re.compile(m) for m in matches]
    roots = {pid for pid in pids if pid in tree.by_pid}
    for p in candidates:
        text = " ".join(p.cmdline) or p.comm
        if any(r.search(text) for r in regexes):
            roots.add(p.pid)
    chosen = set(roots)
    for root in roots:
        chosen.update(d.pid for d in tree.descendants(root))
    return tuple(sorted(pid for pid in chosen if pid not in excluded))
