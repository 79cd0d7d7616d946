"""What the wait rules share: a chain in words, and how sure a stalled chain is.

Severity of a chain of waits, the same for every kind: `error` when the blocker cannot end the
wait by itself (stopped, gone, an orphan, a cycle), when it is proven not to over the window (an
idle server that never read the request, a listener that accepts nothing, an idle lock holder, a
session idle in a transaction: StalledChain.proof) or when other evidence says work should be
happening (an OOM kill in the job, a silent log, an idle GPU); `warning` when the blocker made no
progress over the window and nothing proves it will not; nothing when it is working (a slow server, a busy lock holder). With one
sample there is no window: a chain with neither a dead end nor evidence is a note.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.stalls import ChainKind, StalledChain, StallEvidence
from vastprobe.analysis.waitgraph.edges import Chain, WaitEdge
from vastprobe.model import Evidence, Process, Severity, Unavailable
from vastprobe.rules.base import ONE_SAMPLE, Context

#: How each kind of resource edge reads in a chain (children and pipes are worded in edge_words).
EDGE_WORDS = {
    "fifo-open": "opens",
    "unix-socket": "connected to",
    "tcp": "connected to",
    "file-lock": "waits for lock held by",
    "fuse": "waits for FUSE server",
    "db-lock": "waits for",
}


def link(ctx: Context, pid: int) -> str:
    p = ctx.tree.by_pid.get(pid)
    if p is None:
        return f"{pid} (gone)"
    pr = ctx.progress.get(pid)
    if pr and pr.sampled:
        cpu = f"{pr.cpu_ticks / ctx.snapshot.host.clk_tck:.2f}s cpu"
    else:
        cpu = "gone by the second sample" if pr and pr.gone else "not sampled"
    return f"{p.pid} {p.comm} [{p.state} {p.wchan if not isinstance(p.wchan, Unavailable) else '?'}, {cpu}]"


def edge_words(edge: WaitEdge) -> str:
    if edge.kind == "child":
        return "waits for child"
    if edge.kind in ("pipe", "fifo"):
        return f"{edge.what}; other end held by"
    return f"{EDGE_WORDS[edge.kind]} ({edge.what})"


def chain_text(ctx: Context, chain: Chain) -> str:
    parts = []
    for hop in chain.hops:
        parts.append(link(ctx, hop.pid))
        if hop.edge is not None:
            who = f"thread {hop.edge.thread}: " if hop.edge.thread is not None else ""
            parts.append(f"-[{who}{edge_words(hop.edge)}]->")
    if chain.dangling is not None:
        parts.append(f"-[{edge_words(chain.dangling)}]-> nobody")
    return " ".join(parts)


def thread_evidence(ctx: Context, pids: tuple[int, ...]) -> list[Evidence]:
    """The threads of the chain's multi-threaded processes: their names and waits, and how many the
    probe's bound left unread (said, never guessed); with --py-spy, their Python stacks."""
    out = []
    for pid in dict.fromkeys(pids):
        p = ctx.tree.by_pid.get(pid)
        if p is None or p.threads < 2:
            continue
        read = p.threads_detail
        shown = ", ".join(f"{t.tid}{' ' + t.comm if t.comm else ''} [{t.state} {t.wchan or '?'}]" for t in read[:6])
        more = len(read) - 6 if len(read) > 6 else 0
        unread = p.threads - 1 - len(read)
        tail = (f" and {more} more" if more else "") + (
            f"; {unread} not read (the probe's bound)" if unread > 0 else ""
        )
        out.append(Evidence("threads", f"{p.pid} ({p.comm}): {p.threads} threads: {shown or 'none read'}{tail}"))
    return out[:4] + stack_evidence(ctx, pids)


def stack_evidence(ctx: Context, pids: tuple[int, ...], programs: int = 2) -> list[Evidence]:
    """Where the first Python programs among `pids` are, as py-spy read them (--py-spy): each
    thread's innermost frames."""
    out = []
    for pid in [p for p in dict.fromkeys(pids) if ctx.snapshot.python_stack(p) is not None][:programs]:
        stack = ctx.snapshot.python_stack(pid)
        assert stack is not None
        out += [Evidence("py-spy", f"{ctx.proc_label(pid)}: {line}") for line in stack.thread_lines()]
    return out


def _progress_words(ctx: Context, s: StalledChain) -> str:
    """Who moved over the window, by name: the chain's stillness was said of its blockers, and a
    stopped server read "some CPU, I/O or state change" for its client's tick (found by a helper)."""
    window = f"over {ctx.snapshot.sample_window:.1f}s"
    who = ", ".join(ctx.proc_label(b) for b in s.blockers[:4])
    if s.idle:
        return f"{who}: no CPU, I/O or state change {window}"

    def moved(pid: int) -> bool:
        pr = ctx.progress.get(pid)
        return pr is not None and pr.moved

    if any(moved(b) for b in s.blockers[:4]):
        return f"{', '.join(ctx.proc_label(b) for b in s.blockers[:4] if moved(b))}: some CPU, I/O or state change {window}"
    movers = ", ".join(ctx.proc_label(p) for p in s.chain.pids if moved(p))
    return f"{who}: no CPU, I/O or state change {window}" + (f"; {movers}: some" if movers else "")


def chain_evidence(ctx: Context, s: StalledChain) -> list[Evidence]:
    ev = [Evidence("wait chain", chain_text(ctx, s.chain)), *thread_evidence(ctx, s.chain.pids)]
    seen = set()
    for edge in (*s.chain.edges, *([s.chain.dangling] if s.chain.dangling else [])):
        for e in edge.evidence:
            if e not in seen:
                seen.add(e)
                ev.append(e)
    if s.idle is not None:
        ev.append(Evidence("progress", _progress_words(ctx, s)))
    if s.dead_end:
        ev.append(Evidence("blocker", s.dead_end))
    if s.proof:
        ev.append(Evidence("proof", s.proof))
    return ev


def severity(ctx: Context, s: StalledChain, stall: StallEvidence) -> Severity | None:
    if s.dead_end:
        return "error"
    if s.idle is False and not s.proof and not locked_handlers(ctx, s.edge):
        # a proof with the chain moving: its holder is locked for ever; a server whose handlers all wait on
        # locks moves only in its accepting loop's wakes, which answer nobody
        return None
    if stall.logs_only and not s.proof and (_blockers_woke(ctx, s) or ctx.wake_by_themselves(s.blockers)):
        # a quiet log alone, beside a blocker that was scheduled over the window: no proof it is still (a
        # server taking an upload 16 KiB at a time read "does not answer", STALLED; found by a helper); nor
        # beside blockers asleep on a timer, which go on when it is up (a server sending 1 KiB every 5 s, one
        # reading an upload 4 KiB every 2 s, read STALLED behind a log quiet for 10 minutes; found by a helper)
        return "warning"
    if stall or s.proof:
        return "error"  # the end is proven not to move, or other evidence says work should be happening
    if s.idle is None:
        return "info"  # one sample, no dead end, no evidence: a wait seen once, as every process waits
    return "warning"


def locked_handlers(ctx: Context, edge: WaitEdge | None) -> bool:
    """The wait's holders are servers whose every thread but the accepting loop waits on a lock with no
    timeout (graph.handlers_locked): a deadlocked handler, or long polls; seen, never proof."""
    return edge is not None and bool(edge.holders) and all(ctx.graph.handlers_locked(h) for h in edge.holders)


#: The two readings of a server whose handlers all wait on locks, which /proc cannot tell apart
LOCKED_HANDLERS_READINGS = "a deadlocked handler, or long polls waiting for an event a new request would set"


def locked_handlers_hint(restart: str) -> str:
    """How to tell the two readings apart (a stack), and what each asks; `restart`: what to do of the
    deadlocked one."""
    return (
        f"a lock taken twice or two locks in opposite orders is a deadlocked handler ({restart}); an Event, "
        "Condition or queue wait is a long poll"
    )


def _blockers_woke(ctx: Context, s: StalledChain) -> bool:
    """A blocker of the chain that was scheduled between the samples at work (view.woke_at_work)."""
    return any(ctx.woke_at_work(b) for b in s.blockers)


def marked(summary: str, s: StalledChain, sev: Severity) -> str:
    """The summary of a chain finding, marked when one sample is all it rests on (a note, see severity)."""
    return summary + ONE_SAMPLE if s.idle is None and sev == "info" else summary


def stalled(ctx: Context, *kinds: ChainKind) -> Iterator[tuple[StalledChain, WaitEdge, StallEvidence, Severity]]:
    """The stalled chains of these kinds that are worth a finding, with their resource edge, the
    evidence that work should be happening, and the severity; a chain whose blocker works is left out."""
    for s in ctx.stalled_chains:
        if s.kind not in kinds or s.edge is None:
            continue
        stall = ctx.stall_evidence(s)
        sev = severity(ctx, s, stall)
        if sev is not None:
            yield s, s.edge, stall, sev


def still_evidence(ctx: Context) -> list[Evidence]:
    """The window's line for a process proven still (asleep_throughout): none with one sample."""
    if not ctx.two_samples:
        return []
    return [Evidence("progress", f"no CPU, I/O or state change over {ctx.snapshot.sample_window:.1f}s")]


def asleep_throughout(ctx: Context, p: Process) -> bool:
    """Asleep (S) in every sample and, with two, did nothing over the window: where a state is the
    proof (a lock no thread is left to release), one sample is enough."""
    if p.state != "S" or not p.samples or any(s.state != "S" for s in p.samples):
        return False
    if ctx.two_samples:
        pr = ctx.progress.get(p.pid)
        return pr is not None and pr.sampled and not pr.moved
    return True


def is_python(ctx: Context, pid: int) -> bool:
    p = ctx.tree.by_pid.get(pid)
    if p is None:
        return False
    prog = p.cmdline[0].rsplit("/", 1)[-1] if p.cmdline else ""
    return p.comm.startswith("python") or prog.startswith("python")


def pool_children(ctx: Context, p: Process) -> list[Process]:
    """`p`'s children, a multiprocessing forkserver among them standing for its own (the `forkserver`
    start method, Python 3.14's default on Linux: a pool's workers are the server's children),
    zombies included."""
    out: list[Process] = []
    for k in ctx.tree.kids(p.pid):
        out += ctx.tree.kids(k.pid) if any("multiprocessing.forkserver" in a for a in k.cmdline[:4]) else [k]
    return out


def stack_command(ctx: Context, pid: int) -> str:
    """How to see where a process waits: its Python stack when --py-spy took it; py-spy for a Python
    program only, else its kernel stack and gdb."""
    if ctx.snapshot.python_stack(pid) is not None:
        return f"its Python stack, taken by py-spy, is in the evidence; py-spy dump --pid {pid} again to compare"
    if is_python(ctx, pid):
        why = f": {ctx.snapshot.python_stacks_note}" if ctx.snapshot.python_stacks_note else ""
        return f"py-spy dump --pid {pid}" + (f" ({why[2:]})" if why else "")
    return f"cat /proc/{pid}/stack, gdb -p {pid}"


def resume_hint(ctx: Context, pid: int) -> str:
    """How to resume a stopped process, by what stopped it: a tracer (detach it, or resume the
    tracer when it is stopped itself), a terminal (a background job that read or wrote its terminal
    stops again on `kill -CONT`: `fg`, or stdin from /dev/null), else SIGSTOP or Ctrl-Z."""
    p = ctx.tree.by_pid.get(pid)
    if p is None:
        return f"resume {pid} with `kill -CONT {pid}`"
    if p.state == "t" or p.tracer_pid:
        tracer = ctx.tree.by_pid.get(p.tracer_pid or 0)
        if tracer is not None and tracer.state in ("T", "t"):
            return (
                f"{p.comm} ({pid}) is traced by {tracer.comm} ({tracer.pid}), which is stopped itself: resume the "
                f"tracer (`kill -CONT {tracer.pid}`) or end it, which detaches {pid}"
            )
        if tracer is not None:
            return f"{p.comm} ({pid}) is held by its tracer {tracer.comm} ({tracer.pid}): continue or detach it there"
        return f"{p.comm} ({pid}) is stopped by a tracer: detach it (or end the debugger)"
    if p.tty_nr and p.tpgid is not None and p.tpgid > 0 and p.tpgid != p.pgrp:
        return (
            f"{p.comm} ({pid}) is a background job of its terminal, stopped (SIGTTIN/SIGTTOU when it reads or "
            f"writes the terminal, or Ctrl-Z): `kill -CONT {pid}` only lets it stop again at its next terminal read; "
            f"bring it to the foreground with `fg` in the shell that started it, or restart it with stdin from "
            "/dev/null (`< /dev/null`) or under nohup"
        )
    return f"resume {p.comm} ({pid}) with `kill -CONT {pid}`, or find who stopped it (SIGSTOP, Ctrl-Z)"


def names(ctx: Context, pids: tuple[int, ...], limit: int = 4) -> str:
    text = ", ".join(ctx.proc_label(p) for p in pids[:limit])
    return text + (f" and {len(pids) - limit} more" if len(pids) > limit else "")
