"""A wait chain drawn as the process tree it is: parent above child by PPid, each edge labelled
with what the upper process waits for ("waits for child", "reads pipe:[N] held by"), the
blocker marked. A holder that is not a child of its waiter (an orphan holding a pipe, the
holder of a lock) is named on a line of its own under the waiter and drawn in its own place."""

from __future__ import annotations

from rich.text import Text

from vastprobe.analysis.progress import progress
from vastprobe.model import HostSnapshot, Process, Unavailable, WaitPicture
from vastprobe.render.layout import MIDDLE
from vastprobe.untrusted.safe import safe

BRANCH, LAST, PIPE, SPACE = "├─ ", "└─ ", "│  ", "   "


def node_text(snap: HostSnapshot, p: Process, blocker: str | None = None, parent_note: str | None = None) -> Text:
    """`5 cuzk-daemon  ◀ blocker (idle)  S inet_csk_accept  0.00s cpu  ./cuzk-daemon -c …`"""
    t = Text()
    t.append(f"{p.pid} ", style="bold")
    t.append(safe(p.comm, 32), style="bold")
    if blocker is not None:
        t.append("  ◀ blocker" + (f" ({safe(blocker, 80)})" if blocker else ""), style="bold red")
    wchan = p.wchan if not isinstance(p.wchan, Unavailable) else "?"
    state = p.state if wchan in ("0", "") else f"{p.state} {safe(wchan, 40)}"
    t.append(f"  {state}", style="bold" if p.state in ("T", "t", "D", "Z") else "")
    pr = progress(p)
    if pr.sampled:
        t.append(f"  {pr.cpu_ticks / snap.host.clk_tck:.2f}s cpu", style="dim")
    if parent_note:
        t.append(f"  [{parent_note}]", style="dim")
    t.append("  ")
    t.append(safe(p.command, 400), style=MIDDLE)
    return t


def draw_picture(snap: HostSnapshot, pic: WaitPicture) -> list[Text]:
    """The lines of the drawing, without indent; the caller crops them to the terminal width."""
    by_pid = {p.pid: p for p in snap.processes}
    nodes = [pid for pid in dict.fromkeys(pic.pids) if pid in by_pid]
    if not nodes:
        return []
    drawn = set(nodes)
    parent_of = {
        pid: by_pid[pid].ppid if by_pid[pid].ppid in drawn and by_pid[pid].ppid != pid else None for pid in nodes
    }
    kids: dict[int, list[int]] = {pid: [] for pid in nodes}
    for pid in nodes:
        parent = parent_of[pid]
        if parent is not None:
            kids[parent].append(pid)
    roots = [pid for pid in nodes if parent_of[pid] is None]
    label = {(link.waiter, link.holder): link.label for link in pic.links}
    # edges that are not parent -> child: said under the waiter, the holder drawn in its own place
    cross: dict[int, list[tuple[str, int | None]]] = {}
    for link in pic.links:
        child = link.holder is not None and link.holder in drawn and parent_of.get(link.holder) == link.waiter
        if not child and link.waiter in drawn:
            cross.setdefault(link.waiter, []).append((link.label, link.holder))
    # depth first, each node before its children: with a stack, not a recursive closure (one that
    # calls itself is a reference cycle, and it held the snapshot until the collector ran)
    order: list[int] = []
    stack = list(reversed(roots))
    while stack:
        pid = stack.pop()
        order.append(pid)
        stack.extend(reversed(kids[pid]))
    position = {pid: i for i, pid in enumerate(order)}
    blockers = set(pic.blockers)
    lines: list[Text] = []

    def node(pid: int, root: bool) -> Text:
        p = by_pid[pid]
        note = None
        if root and len(roots) > 1 and pid != roots[0]:
            parent = by_pid.get(p.ppid)
            note = f"parent {p.ppid} {safe(parent.comm, 32)}" if parent is not None else f"parent {p.ppid}"
        why = pic.why or ""
        if why == "stopped" and p.state not in ("T", "t"):
            why = ""  # a blocker of the chain that is not the stopped one: its parent in S was marked so
        return node_text(snap, p, why if pid in blockers else None, note)

    todo: list[tuple[int, str, str, bool]] = [(r, "", "", True) for r in reversed(roots)]
    while todo:
        pid, prefix, guide, root = todo.pop()
        head = Text(prefix + guide)
        parent = parent_of[pid]
        words = label.get((parent, pid)) if parent is not None else None
        if words:
            head.append(f"{safe(words, 200)} → ", style="italic")
        lines.append(head + node(pid, root))
        inner = prefix if guide == "" else prefix + (SPACE if guide == LAST else PIPE)
        edges = cross.get(pid, [])
        n = len(edges) + len(kids[pid])
        for i, (words, holder) in enumerate(edges):
            t = Text(inner + (LAST if i == n - 1 else BRANCH))
            t.append(f"{safe(words, 200)} ", style="italic")
            if holder is None:
                t.append("nobody visible", style="bold red")
            else:
                hp = by_pid.get(holder)
                t.append(f"{holder} {safe(hp.comm, 32) if hp else '(not visible)'}", style="bold")
                if holder in position:
                    t.append(" (below)" if position[holder] > position[pid] else " (above)", style="dim")
            lines.append(t)
        todo.extend(
            (k, inner, LAST if len(edges) + j == n - 1 else BRANCH, False)
            for j, k in reversed(list(enumerate(kids[pid])))
        )
    return lines
