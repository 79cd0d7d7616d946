"""Where a terminal is, for someone who must type at it: the tmux pane or screen window it belongs to,
else the terminal and its session's leader. Read from /proc, never by running tmux or screen on the
target: a process in a tmux pane inherits TMUX (the server's socket, its pid, the session's number)
and TMUX_PANE (`%3`); one in a screen window inherits STY (`12345.pts-0.host`) and WINDOW. The tmux
server's own command line is the one that started it (`tmux new-session -s train …`): the first
session's name. The probe reads these names only (docs/rules/terminal-prompt.md)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vastprobe.model import Process
from vastprobe.untrusted.numbers import read_int

if TYPE_CHECKING:
    from vastprobe.analysis.view import SnapshotView


SHELLS = frozenset({"bash", "sh", "dash", "zsh", "fish", "ash", "ksh", "mksh", "tcsh", "csh", "busybox"})
TAKES_VALUE = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


def interactive_shell(p: Process) -> bool:
    """A shell started to read commands (a login shell, -i, no script and no -c), by its argv; a
    shell with no argv to read falls back to leading its session, as a terminal's first shell does.
    A shell running a script or -c that reads the terminal is a prompt like any other."""
    if not p.cmdline:
        return p.session == p.pid
    if p.cmdline[0].startswith("-"):
        return True  # login shell
    flags, args = "", list(p.cmdline[1:])
    if p.comm == "busybox" and args[:1] in (["sh"], ["ash"]):
        args.pop(0)
    while args and args[0].startswith(("-", "+")) and args[0] not in ("-", "--"):
        arg = args.pop(0)
        if arg in TAKES_VALUE and args:
            args.pop(0)
        elif not arg.startswith("--"):
            flags += arg[1:]
    if args[:1] in (["-"], ["--"]):
        args.pop(0)
    return "i" in flags or "s" in flags or ("c" not in flags and not args)


@dataclass(frozen=True)
class TerminalPlace:
    words: str  # "in tmux pane %3 (session train, server 812)"; "" when nothing more is known
    attach: str | None  # the command that shows it: `tmux attach -t %3`


def _inherited(ctx: SnapshotView, p: Process, name: str) -> tuple[Process, str] | None:
    """The variable as `p` or its nearest ancestor (16 at most) holds it: the pane's shell has it
    where a program started in it cleared its environment."""
    q: Process | None = p
    for _ in range(16):
        if q is None:
            return None
        value = q.env_value(name)
        if value:
            return q, value
        q = ctx.tree.by_pid.get(q.ppid)
    return None


def _session_name(server: Process | None) -> str | None:
    """`-s NAME` of the command line that started a tmux server (`new-session`/`new`)."""
    args = list(server.cmdline) if server is not None else []
    for i, a in enumerate(args):
        if a == "-s" and i + 1 < len(args):
            return args[i + 1][:64]
        if a.startswith("-s") and len(a) > 2 and not a.startswith("--"):
            return a[2:66]
    return None


def terminal_place(ctx: SnapshotView, p: Process) -> TerminalPlace:
    pane = _inherited(ctx, p, "TMUX_PANE")
    if pane is not None and pane[1].startswith("%") and read_int(pane[1][1:], 10) is not None:
        tmux = pane[0].env_value("TMUX") or ""
        socket, _, rest = tmux.partition(",")
        server_pid, _, session_id = rest.partition(",")
        spid = read_int(server_pid, 10)
        server = ctx.tree.by_pid.get(spid) if spid is not None else None
        # the server's `-s NAME` names the session it started with, id 0; a pane of a later session
        # was said to be in that one (found by a helper): it is named by its id ($N) instead
        sid = read_int(session_id, 10)
        name = _session_name(server) if sid == 0 else f"${sid}" if sid is not None else None
        bits = [f"session {name}" if name else None, f"server {server.pid}" if server is not None else None]
        detail = ", ".join(b for b in bits if b)
        default = socket.startswith("/tmp/tmux-") and socket.endswith("/default")
        sock = "" if default or not socket.startswith("/") else f"-S {shlex.quote(socket[:200])} "
        words = f"in tmux pane {pane[1]}" + (f" ({detail})" if detail else "")
        return TerminalPlace(words, f"tmux {sock}attach -t {pane[1]}")
    screen = _inherited(ctx, p, "STY")
    if screen is not None:
        window = screen[0].env_value("WINDOW")
        sty = screen[1][:120]
        words = f"in screen session {sty}" + (f", window {window}" if window else "")
        return TerminalPlace(
            words, f"screen -r {shlex.quote(sty)}" + (f" -p {shlex.quote(window[:8])}" if window else "")
        )
    leader = ctx.tree.by_pid.get(p.session)
    if leader is not None and leader.pid != p.pid:
        return TerminalPlace(f"in the terminal session of {leader.comm} ({leader.pid})", None)
    return TerminalPlace("", None)
