"""OOM kills matched to the watched processes.

Kernel-log PIDs are host PIDs, so inside a container a victim is matched by cgroup (`task_memcg`)
and name, and by time: a kill from before a process started cannot be that process's loss."""

from __future__ import annotations

from dataclasses import dataclass

from vastprobe.analysis.tree import ProcessTree
from vastprobe.analysis.waitchain import waits_on_children
from vastprobe.model import HostSnapshot, KernelEvent, Process, available


@dataclass(frozen=True)
class OomMatch:
    event: KernelEvent
    loser: int | None  # the in-scope process that most likely lost the victim
    how: str  # how the loser was chosen
    relevant: bool  # happened while a watched process was alive; False = context only


def start_wall(snapshot: HostSnapshot, p: Process) -> float | None:
    btime = available(snapshot.host.btime)
    return None if btime is None else btime + p.starttime / snapshot.host.clk_tck


def job_is_bounded(snapshot: HostSnapshot, explicit_scope: bool) -> bool:
    """Whether "a waiting process that was alive when the victim died" may be blamed without a
    cgroup or name match: only when the scope is the job — named by --pid/--match, or a container
    (a PID namespace shows no kernel threads). On a whole host that would blame any idle shell."""
    return explicit_scope or not any(p.kernel_thread for p in snapshot.processes)


def match_oom_kills(
    snapshot: HostSnapshot, scope: frozenset[int], tree: ProcessTree, explicit_scope: bool = False
) -> list[OomMatch]:
    kills = [e for e in snapshot.kernel_log.events if e.kind == "oom-kill"]
    if not kills:
        return []
    watched = [p for p in snapshot.processes if p.pid in scope and not p.kernel_thread and p.state != "Z"]
    # starttime is truncated to clock ticks: a process that started within one tick after the kill
    # would look older than it; count it as younger (context, not blame)
    tick = 1 / snapshot.host.clk_tck
    starts = {p.pid: start_wall(snapshot, p) for p in watched}
    # indexes built once: a host's log can hold hundreds of kills, a host hundreds of processes
    by_cgroup_index: dict[str, list[Process]] = {}
    by_name_index: dict[str, list[Process]] = {}
    for p in watched:
        for path in {p.memory_cgroup, p.cgroup_v2} - {None}:
            by_cgroup_index.setdefault(path, []).append(p)  # type: ignore[arg-type]
        # a wrapper that names the victim's program in its arguments (timeout, nohup, srun,
        # mpirun); comm is the program's file name cut to 15 bytes
        for name in {a.rsplit("/", 1)[-1][:15] for a in p.cmdline[1:8]}:
            by_name_index.setdefault(name, []).append(p)
    known = [t for t in starts.values() if t is not None]
    unknown_start = len(known) < len(starts)
    earliest = min(known) if known else None
    waiting = {p.pid for p in watched if waits_on_children(p, tree)}
    bounded = job_is_bounded(snapshot, explicit_scope)
    out = []
    for ev in kills:
        when = ev.wall_time

        def alive_before(p: Process, when: float | None = when) -> bool:
            s = starts[p.pid]
            return when is None or s is None or s + tick <= when

        if not (when is None or unknown_start or (earliest is not None and earliest + tick <= when)):
            out.append(OomMatch(ev, None, "the kill happened before every watched process started", False))
            continue
        by_cgroup = [p for p in by_cgroup_index.get(ev.task_memcg or "", []) if alive_before(p)]
        by_name = [p for p in by_name_index.get(ev.comm or "", []) if alive_before(p)] if ev.comm else []
        waiters = [p for p in watched if p.pid in waiting and alive_before(p)] if bounded else []
        for pool, how in (
            ([p for p in by_cgroup if p.pid in waiting], "waits on children in the victim's memory cgroup"),
            (by_name, "its command line runs the victim's program"),
            (by_cgroup, "in the victim's memory cgroup"),
            (waiters, "waits on children and was running when the victim died"),
        ):
            if pool:
                loser = max(pool, key=lambda p: (p.starttime, p.pid))  # the closest parent: started last
                out.append(OomMatch(ev, loser.pid, how, True))
                break
        else:
            out.append(OomMatch(ev, None, "no watched process could be tied to the victim", True))
    return out
