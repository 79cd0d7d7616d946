"""Wait chains: a process blocked waiting for its children, followed down through children that
wait in turn, to the process at the end and what that one is blocked on."""

from __future__ import annotations

from dataclasses import dataclass

from vastprobe.analysis.tree import ProcessTree
from vastprobe.analysis.wchan_families import is_child_wait
from vastprobe.model import Process, Unavailable


@dataclass(frozen=True)
class WaitChain:
    pids: tuple[int, ...]  # waiter first, the blocker last

    @property
    def waiter(self) -> int:
        return self.pids[0]

    @property
    def end(self) -> int:
        return self.pids[-1]


def waits_on_children(p: Process, tree: ProcessTree) -> bool:
    if isinstance(p.wchan, Unavailable) or p.state not in ("S", "D"):
        return False
    return is_child_wait(p.wchan) and any(k.state != "Z" for k in tree.kids(p.pid))


def wait_chains(root: Process, tree: ProcessTree, limit: int = 32) -> list[WaitChain]:
    """Every path from a waiting process down to a live process that does not itself wait."""
    chains: list[WaitChain] = []

    def walk(p: Process, path: tuple[int, ...]) -> None:
        if len(chains) >= limit or len(path) > 64:
            return
        kids = [k for k in tree.kids(p.pid) if k.state != "Z" and k.pid not in path]
        if waits_on_children(p, tree) and kids:
            for k in kids:
                walk(k, (*path, k.pid))
        else:
            chains.append(WaitChain(path))

    if waits_on_children(root, tree):
        walk(root, (root.pid,))
    return chains
