"""VP128 pool-lost-task: a worker pool that lost a task. The parent waits for results, every worker
idles on the task queue, and one worker is younger than its siblings: it replaced one that died.

`multiprocessing.Pool` replaces a worker that dies (SIGKILL, the OOM killer, a segfault in a C
extension) but not the task it was running: `map()` waits for ever for that result (the task's
chunk is never re-sent). Nothing waits on anything a process holds (the parent waits on a condition
of its own, the workers on the task queue's pipe and its shared lock), so no wait edge shows it;
the pool's shape does: every process of it did nothing over the window, and a worker started
well after the rest. A thread of the parent asleep on a timer is the pool's task handler inside a
slow source of tasks (`imap` over a generator that sleeps), which will hand out more: no proof; nor
is a parent that holds a listening socket (a service, whose requests bring the next tasks).
With one sample nothing can be said of the window: a note.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.waitgraph.edges import FUTEX_PRIVATE_FLAG, private_untimed_wait
from vastprobe.analysis.wchan_families import wait_kind
from vastprobe.model import Evidence, Finding, Process, Severity, Syscall
from vastprobe.rules.base import ONE_SAMPLE, Context, Rule, RuleMeta
from vastprobe.rules.chains import is_python, pool_children, stack_command

META = RuleMeta(
    "pool-lost-task", "VP128", "error", "a worker pool lost a task to a worker that died; the parent waits for ever"
)

#: A worker started at least this long after the pool's first one replaced a worker that died.
REPLACED_AFTER_S = 0.5


def _idle_worker(ctx: Context, w: Process, parent: int) -> str | None:
    """How a worker waits for its next task, in words, or None when it does something else: reading
    the task pipe its parent writes, or asleep on the queue's lock (a futex shared between the
    processes of the pool)."""
    if w.state != "S" or w.threads != 1:
        return None
    sc = w.syscall if isinstance(w.syscall, Syscall) else None
    kind = wait_kind(w.wchan if isinstance(w.wchan, str) else None, sc)
    if kind == "pipe-read" and any(e.kind == "pipe" and parent in e.holders for e in ctx.graph.edges(w.pid)):
        return "reads the task queue's pipe"
    if sc is not None and sc.name == "futex" and len(sc.args) > 1 and not sc.args[1] & FUTEX_PRIVATE_FLAG:
        return "waits for the task queue's lock (a futex shared by the pool)"
    return None


def _workers(ctx: Context, parent: Process) -> list[Process]:
    """The pool's processes, alive: the parent's children, where one is multiprocessing's forkserver
    its children instead (the `forkserver` start method, Python 3.14's default on Linux: the workers
    are the server's children, and a pool that lost a task read HEALTHY; found by a helper)."""
    return [k for k in pool_children(ctx, parent) if k.state != "Z"]


def _still(ctx: Context, pids: list[int]) -> bool | None:
    if not ctx.two_samples:
        return None
    return not any(ctx.progress[p].moved for p in pids if p in ctx.progress) and all(p in ctx.progress for p in pids)


def check(ctx: Context) -> Iterator[Finding]:
    tck = ctx.snapshot.host.clk_tck
    for parent in ctx.in_scope():
        if parent.threads < 2 or not is_python(ctx, parent.pid):
            continue
        kids = _workers(ctx, parent)
        if len(kids) < 2 or not all(is_python(ctx, k.pid) for k in kids):
            continue
        waits = {k.pid: _idle_worker(ctx, k, parent.pid) for k in kids}
        if not all(waits.values()):
            continue  # a worker works, or does something else: no pool stuck on a lost task
        first = min(k.starttime for k in kids)
        younger = [k for k in kids if (k.starttime - first) / tck >= REPLACED_AFTER_S]
        if not younger or len(younger) == len(kids):
            continue
        main = private_untimed_wait(parent.syscall)
        if main is None:
            continue  # its main thread does something else than wait for results (or it was not read)
        if any(ctx.graph.task_kind(parent, t) == "sleep" for t in ctx.graph.tasks(parent)):
            continue  # a thread on a timer: the task handler in a slow source of tasks (imap over a generator)
        if ctx.graph.listens(parent):
            # a server: its tasks come with its requests, and a thread waiting for the next one (in
            # Queue.get, or joining the accepting thread) makes the very futex call a wait for results
            # does. An idle service whose maxtasksperchild workers were replaced read STALLED, with a
            # hint to kill it (found by a helper, 12 runs of 12)
            continue
        still = _still(ctx, [parent.pid, *waits])
        if still is False:
            continue
        ev = [Evidence("worker", f"{ctx.proc_label(pid)} {how}") for pid, how in list(waits.items())[:6]]
        ev += [
            Evidence("replaced", f"{ctx.proc_label(k.pid)} started {(k.starttime - first) / tck:.1f}s after the "
                     "pool's first worker: it replaced one that died")
            for k in younger[:4]
        ]  # fmt: skip
        ev.append(Evidence("/proc/syscall", f"{ctx.proc_label(parent.pid)} main thread: {main}: waits for results"))
        killed = [m for m in ctx.oom_matches if m.loser == parent.pid]
        ev += [Evidence("oom-killed-child", f"{m.event.comm} was OOM-killed; {m.how}") for m in killed[:2]]
        if still:
            ev.append(
                Evidence("progress", f"the pool's {1 + len(waits)} processes: no CPU, I/O or state change over "
                         f"{ctx.snapshot.sample_window:.1f}s")
            )  # fmt: skip
        died = "was OOM-killed" if killed else "died (killed, or crashed)"
        if not killed and not ctx.snapshot.kernel_log.readable:  # no OOM line, because no log was read
            died = "died (killed, or crashed; the kernel log was not read, so an OOM kill could not be checked)"
        summary = (
            f"{parent.comm} ({parent.pid})'s worker pool lost a task: a worker {died}, "
            f"{', '.join(ctx.proc_label(k.pid) for k in younger[:2])} replaced it, and every worker idles on the task "
            "queue while the parent waits for results that will never come (map() waits for ever)"
        )
        hint = (
            f"the task the dead worker ran is lost (multiprocessing.Pool does not re-send it): end {parent.pid} and "
            "rerun; find why the worker died (the kernel log, its memory limit, a crash in a C extension); "
            "concurrent.futures.ProcessPoolExecutor raises BrokenProcessPool instead of waiting, and map_async(...)"
            f".get(timeout) bounds the wait; see where it waits: {stack_command(ctx, parent.pid)}"
        )
        sev: Severity = "error" if still else "info"
        yield META.finding(
            summary + (ONE_SAMPLE if still is None else ""),
            (parent.pid, *waits),
            ev,
            hint,
            sev,
            caused_by="oom-killed-child" if killed else None,
        )


RULE = Rule(META, check)
