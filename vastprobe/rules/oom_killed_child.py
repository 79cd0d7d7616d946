"""VP102 oom-killed-child: the OOM killer took a process from the job. The parent often just
waits on, and nothing in the job's own logs says why."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.oom import OomMatch, unlogged_kills
from vastprobe.clock import utc_text
from vastprobe.model import Evidence, Finding, Severity
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta("oom-killed-child", "VP102", "error", "the kernel's OOM killer killed a process of the job")
#: Kills elsewhere on the host this recent bear on the job: the host is short of memory now.
RECENT_S = 900.0


def _when(wall: float | None) -> str:
    return utc_text(wall, "%Y-%m-%d %H:%M:%S UTC", "at an unknown time") if wall else "at an unknown time"


def _mib(kb: int | None) -> str:
    return f"{kb / 1024:.0f} MiB" if kb is not None else "?"


def _folded(
    matches: list[OomMatch], when: str, source: str, note: str, hint: str, severity: Severity
) -> Iterator[Finding]:
    """Kills that blame no watched process: one finding for all of them, not one each."""
    if not matches:
        return
    last = matches[-1].event
    names = ", ".join(sorted({m.event.comm or "?" for m in matches})[:20])
    yield META.finding(
        f"{len(matches)} OOM kill(s) {when} (latest: {last.comm} {_when(last.wall_time)})",
        [],
        [Evidence("kernel log", m.event.line[:400]) for m in matches[-3:]]
        + [Evidence(source, f"victims {names}" + (f": {note}" if note else ""))],
        hint,
        severity,
    )


def _where_short(matches: list[OomMatch]) -> str:
    """What ran out of memory, as the kill lines say: a kill a memory cgroup's limit caused says
    nothing of the host's own memory."""
    if matches and all(m.event.detail == "memcg" for m in matches):
        return "memory cgroups outside it (containers or services with a memory limit) hit their limits"
    return "the host (or a neighbour) is short of memory now"


def check(ctx: Context) -> Iterator[Finding]:
    # with no --pid/--match there is no job, only a whole host: say what was in scope, not "the job"
    job = "the watched job" if ctx.options.explicit_scope else "the processes in scope"
    # host-wide facts, said once and only when they bear on the job: kills from before it started
    # never do; kills elsewhere do while they are recent (the host is short of memory now)
    now = ctx.now
    recent = [
        m
        for m in ctx.oom_matches
        if m.tie == "elsewhere" and now is not None and m.event.wall_time and now - m.event.wall_time <= RECENT_S
    ]
    yield from _folded(
        recent,
        # kills before the job started are left out: "in the last 15 minutes" alone counted fewer than
        # dmesg held then (found by a new user's review)
        f"elsewhere on the host in the last {RECENT_S // 60:.0f} minutes since the watched job started, not tied to it"
        if ctx.options.explicit_scope
        else f"outside the processes in scope in the last {RECENT_S // 60:.0f} minutes",
        "context",
        "in other memory cgroups, or tied to no process in scope",
        f"nothing to do for {job}; {_where_short(recent)}",
        "info",
    )
    # a kill tied to the job stalls it when the scope is the job; on a whole host it is a warning
    # unless a waiting chain depends on it (do-wait-orphan then says so, with this as its cause)
    bounded = ctx.bounded
    unnamed = [m for m in ctx.oom_matches if m.relevant and m.loser is None]
    # the cgroups by name: "that memory cgroup" named none (found by a helper)
    cgroups = sorted({g for m in unnamed if (g := m.event.task_memcg or m.cgroup or m.event.memcg)})
    where = ", ".join(cgroups[:4]) + (f" and {len(cgroups) - 4} more" if len(cgroups) > 4 else "")
    yield from _folded(
        unnamed,
        "in memory cgroups of watched processes, with no watched parent to name",
        "context",
        "the host lost processes to the OOM killer" + (f"; in {where}" if where else ""),
        f"check which service runs in {where or 'that memory cgroup'}, and give it more memory",
        "warning",
    )
    # one finding for the kills one parent lost of one program: a cgroup that OOMs every minute gave
    # one warning and one incident each, all headed with the first kill's time (found by a helper)
    groups: dict[tuple[int, str, bool], list[OomMatch]] = {}
    for m in ctx.oom_matches:
        if m.relevant and m.loser is not None:
            groups.setdefault((m.loser, m.event.comm or "?", m.guessed), []).append(m)
    for (loser, _comm, _guessed), group in sorted(groups.items(), key=lambda kv: ctx.oom_matches.index(kv[1][-1])):
        yield _kills_finding(ctx, loser, group, bounded)
    yield from _from_cgroups(ctx)


def _kills_finding(ctx: Context, loser: int, group: list[OomMatch], bounded: bool) -> Finding:
    """The kills of one program one watched process lost (the latest's detail; the last three lines)."""
    m = group[-1]
    e = m.event
    rss = (e.anon_rss_kb or 0) + (e.file_rss_kb or 0) if e.anon_rss_kb is not None else None
    ev = [Evidence("kernel log", k.event.line[:400]) for k in group[-3:]]
    ev.append(
        Evidence("victim", f"{e.comm} (host pid {e.pid}), {_mib(rss)} resident at death, killed {_when(e.wall_time)}")
    )
    limit = f"memory cgroup limit {_mib(e.limit_kb)} ({e.memcg or e.task_memcg})" if e.limit_kb else None
    if limit is None:
        where = e.task_memcg or m.cgroup
        cg = next((c for c in ctx.snapshot.cgroups if where and c.path == where), None)
        if cg is not None and cg.limit_bytes:
            limit = f"memory cgroup limit {cg.limit_bytes // 2**20} MiB ({cg.path})"
        elif e.constraint and "MEMCG" not in e.constraint:
            limit = f"the whole machine ran out of memory ({e.constraint})"
    if limit:
        ev.append(Evidence("limit", limit))
    ev.append(Evidence("lost by", f"{ctx.proc_label(loser)}: {m.how}"))
    # the closest watched process is no sign of a parent: a service sharing the cgroup was said to
    # have lost a child it never had (found by a helper)
    them = "it" if len(group) == 1 else "them"
    lost = (
        f"{ctx.proc_label(loser)}, in its memory cgroup, may have lost {them}"
        if m.guessed
        else (f"{ctx.proc_label(loser)} lost {them}")
    )
    when = _when(e.wall_time) if len(group) == 1 else f"{len(group)} times, the latest {_when(e.wall_time)}"
    summary = f"{e.comm} was OOM-killed {when}; {lost}"
    sev: Severity | None = None if bounded else "warning"
    went_on = _went_on(ctx, loser, whole_scope=m.guessed)
    if went_on and sev is None:
        # a job that noticed and went on (a retry with a smaller batch) is not stalled by a past kill:
        # it read STALLED beside its growing log (found by a helper)
        sev, summary = "warning", summary + ": the job went on"
        ev.append(Evidence("progress", went_on))
    hint = (
        "give the job more memory (or a smaller batch), and make its parent notice a child killed by SIGKILL (exit 137)"
    )
    return META.finding(summary, [loser], ev, hint, sev)


def _went_on(ctx: Context, loser: int, whole_scope: bool = False) -> str | None:
    """What says the process that lost the victim went on over the window, in words: it computes, or
    it did I/O (a retry loop's `echo >> job.log`, its next worker started). None when it did not, or
    with one sample. The loser itself: a heartbeat sidecar writing the job's log beside a launcher
    that waits for ever on its killed worker's result made the kill a warning (found by a helper). A
    guessed loser (only the memory cgroup ties it) is no sign of which part lost it: then any of the
    job."""
    if not ctx.two_samples:
        return None
    for pid in tuple(sorted(ctx.scope)) if whole_scope else (loser,):
        pr = ctx.progress.get(pid)
        if pr is None or not pr.sampled or not pr.moved:
            continue
        if ctx.computes(pid):
            return f"{ctx.proc_label(pid)} used {ctx.cpu_seconds(pid):.2f}s of CPU over the window"
        if pr.io_bytes:
            return f"{ctx.proc_label(pid)} read or wrote {pr.io_bytes} B over the window"
    # a worker it started again, computing (a launcher that retried waits for it): CPU only, not a
    # sidecar's writes (a launcher retrying its killed worker read STALLED; found by a helper)
    for d in ctx.tree.descendants(loser):
        pr = ctx.progress.get(d.pid)
        if pr is not None and pr.sampled and ctx.computes(d.pid):
            return f"{ctx.proc_label(d.pid)}, under it, used {ctx.cpu_seconds(d.pid):.2f}s of CPU over the window"
    return None


def _from_cgroups(ctx: Context) -> Iterator[Finding]:
    """cgroup oom_kill counters: the only witness when the kernel log is not readable."""
    snap = ctx.snapshot
    watched_paths = {p.memory_cgroup for p in ctx.in_scope()} | {p.cgroup_v2 for p in ctx.in_scope()}
    logged = sum(1 for m in ctx.oom_matches if m.relevant)
    for cg in snap.cgroups:
        if not cg.oom_kill or cg.path not in watched_paths:
            continue
        if snap.kernel_log.readable and logged:
            continue  # the log's lines already say it, with names and times
        if not unlogged_kills(snap, ctx.oom_matches, cg):
            continue  # the log holds every kill it counted, each matched above (before the job: context)
        members = [p.pid for p in ctx.in_scope() if cg.path in (p.memory_cgroup, p.cgroup_v2)]
        ev = [
            Evidence(
                f"{cg.directory}/memory.{'oom_control' if cg.version == 'v1' else 'events'}", f"oom_kill {cg.oom_kill}"
            )
        ]
        if cg.limit_bytes:
            ev.append(Evidence("limit", f"{cg.limit_bytes // 2**20} MiB; peak {((cg.peak_bytes or 0) // 2**20)} MiB"))
        why = snap.kernel_log.reason if not snap.kernel_log.readable else "the kernel log no longer holds the lines"
        ev.append(Evidence("kernel log", f"not usable: {why}"))
        # the job's own cgroup (not the root one, where the whole host's kills count) lost a process: where
        # the scope is the job, that is its loss, whatever the kernel log no longer says
        own = ctx.bounded and cg.path not in ("/", "")
        yield META.finding(
            f"memory cgroup {cg.path} counts {cg.oom_kill} OOM kill(s); when and which process is unknown",
            members[:1],
            ev,
            "the counter only grows: compare it with the next sweep to date the kill; give the job more memory"
            + ("; the job lost a process to it: a parent waiting on that child waits for ever" if own else ""),
            "error" if own else "warning",
        )


RULE = Rule(META, check)
