"""VP105 stopped-child: a watched process stopped by a signal (T) or a tracer (t) for the whole
window. Nothing resumes it by itself, and a parent waiting on it waits forever."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.terminals import SHELLS, interactive_shell
from vastprobe.model import Evidence, Finding, Process
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import resume_hint

META = RuleMeta("stopped-child", "VP105", "error", "a watched process is stopped (SIGSTOP/SIGTSTP or a tracer)")


def check(ctx: Context) -> Iterator[Finding]:
    for p in ctx.in_scope():
        if not ctx.stopped_throughout(p):
            continue  # running between the reads (a tracer stepping it) is not stopped
        if ctx.two_samples and len(p.samples) < 2:
            continue  # seen once, gone by the second sample
        parent = ctx.tree.by_pid.get(p.ppid)
        ev = [Evidence("/proc/stat", f"pid {p.pid} ({p.comm}) state {p.state} in {len(p.samples)} sample(s)")]
        if p.tracer_pid:
            ev.append(Evidence("/proc/status", f"TracerPid {ctx.proc_label(p.tracer_pid)}"))
        if parent is not None:
            ev.append(Evidence("parent", f"{parent.pid} ({parent.comm}) state {parent.state}, wchan {parent.wchan}"))
        hint = resume_hint(ctx, p.pid)
        held = _held_on_purpose(ctx, p) if not ctx.options.explicit_scope else None
        if held is not None:
            # someone at a terminal holds it (Ctrl-Z at a shell's prompt, gdb at its own), on a shared
            # machine: the whole host read STALLED for a suspended pager and for a process under gdb (found by
            # helpers). Named with --pid/--match, it is the job, and a stall
            why, seen = held
            ev.append(seen)
            yield META.finding(f"{p.comm} ({p.pid}) is stopped ({p.state}): {why}", [p.pid], ev, hint, "info")
            continue
        yield META.finding(f"{p.comm} ({p.pid}) is stopped ({p.state})", [p.pid], ev, hint)


#: Programs a person suspends with Ctrl-Z at a terminal: pagers, editors, monitors, REPLs
INTERACTIVE = frozenset({
    "less", "more", "most", "man", "pager", "vi", "vim", "nvim", "view", "nano", "pico", "emacs", "mg", "joe",
    "top", "htop", "btop", "atop", "watch", "mc", "tig", "mutt", "ipython", "ipython3", "psql", "mysql", "sqlite3",
    "redis-cli", "irb", "node",
})  # fmt: skip


def _interactive_tool(p: Process) -> bool:
    """A pager, an editor, a monitor or a REPL (a Python with no script), by its name: what someone
    suspends at a prompt. A trainer `python train.py &` stopped by SIGTTIN or SIGSTOP looks the same in
    /proc, and read HEALTHY on a whole host in a first version (found by a helper)."""
    if p.comm in SHELLS:
        return interactive_shell(p)
    if p.comm in INTERACTIVE:
        return True
    return p.comm.startswith("python") and not [a for a in p.cmdline[1:] if not a.startswith("-")]


def _suspended_at_a_prompt(ctx: Context, p: Process) -> Process | None:
    """The interactive shell whose background job `p` is, stopped by job control (Ctrl-Z, SIGTTIN,
    SIGTTOU), while that shell holds its terminal's foreground (at its prompt, waiting on no child),
    where `p` is a tool someone uses at a terminal (a pager, an editor, a REPL)."""
    if p.state != "T" or p.tracer_pid or not p.tty_nr or not p.tpgid or p.tpgid <= 0 or p.tpgid == p.pgrp:
        return None
    if not _interactive_tool(p):
        return None
    shell = ctx.tree.by_pid.get(p.ppid)
    if shell is None or shell.comm not in SHELLS or not interactive_shell(shell) or shell.pgrp != p.tpgid:
        return None
    return shell if shell.state == "S" and ctx.graph.kind(shell) != "child" else None


def _held_on_purpose(ctx: Context, p: Process) -> tuple[str, Evidence] | None:
    """Why a person at a terminal holds `p` stopped, with the evidence, or None."""
    shell = _suspended_at_a_prompt(ctx, p)
    if shell is not None:
        seen = Evidence("terminal", f"a job of {ctx.proc_label(shell.pid)}, an interactive shell at its prompt")
        return "a job suspended in an interactive shell", seen
    debugger = _debugger_at_its_prompt(ctx, p)
    if debugger is not None:
        seen = Evidence("terminal", f"its tracer {ctx.proc_label(debugger.pid)} waits at its terminal")
        return "held by a debugger someone works in", seen
    return None


def _debugger_at_its_prompt(ctx: Context, p: Process) -> Process | None:
    """The tracer of `p`, asleep in the foreground of its own terminal (gdb at its `(gdb)` prompt)."""
    tracer = ctx.tree.by_pid.get(p.tracer_pid) if p.tracer_pid else None
    if tracer is None or tracer.state != "S" or not tracer.tty_nr or tracer.tpgid != tracer.pgrp:
        return None
    return tracer


RULE = Rule(META, check)
