"""VP119 culprit-rank: a distributed job hangs because one of its ranks is not in the collective
the others wait in, and that rank is named.

Every rank but one waits in the same collective (its main thread waits for the collective's work
while its communication thread polls the other ranks; on GPUs it spins at full utilisation with no
progress); the one that holds them is elsewhere: stopped, gone (killed, OOM-killed), in D state, or
blocked on something that is not another rank. The waiting ranks' own findings (a peer that does not
answer, a busy GPU without progress) are this finding's consequences, not separate roots. Ranks and
the job come from the processes' environments (an allow-list of names: RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID, SLURM_JOB_ID, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

from vastprobe.analysis.flight import Stuck, compare, job_dumps
from vastprobe.analysis.rank_waits import DEADLOCK_HINT, how_they_wait, outside_collective, outside_hint
from vastprobe.analysis.ranks import holder_words, straggler_hint
from vastprobe.model import DistributedJob, Evidence, Finding, FlightDump, JobRank, Severity
from vastprobe.rules.base import ONE_SAMPLE, Context, Rule, RuleMeta
from vastprobe.rules.chains import chain_evidence, resume_hint, stack_command, stack_evidence

META = RuleMeta("culprit-rank", "VP119", "error", "one rank of a distributed job holds the others in a collective")


def check(ctx: Context) -> Iterator[Finding]:
    for job in ctx.jobs:
        if not any(r.pid in ctx.scope for r in job.ranks if r.pid is not None):
            continue
        procs = [ctx.tree.by_pid[r.pid] for r in job.ranks if r.pid is not None and r.pid in ctx.tree.by_pid]
        starts = [t for p in procs if (t := ctx.start_wall(p)) is not None]
        dumps = job_dumps(ctx.snapshot.flight_dumps, procs, min(starts) if starts else None)
        yield from _refused(dumps)
        stuck = compare(dumps)
        named_by_ranks: set[int] = set()
        waiting = ", ".join(str(r.rank) for r in job.waiting[:8]) + (" …" if len(job.waiting) > 8 else "")
        if not job.culprits and job.elsewhere:
            yield _off_host(ctx, job, waiting)
        if job.deadlocked:
            yield _deadlocked(ctx, job)
        for culprit in job.culprits:
            if culprit.rank is not None:
                named_by_ranks.add(culprit.rank)
            yield _culprit(ctx, job, culprit, waiting, stuck)
        for st in stuck:  # the dumps alone name ranks the processes here did not (their host is elsewhere)
            if not set(st.missing) & named_by_ranks:
                yield _from_dumps(st)


#: What to do about a dump that was not read: the probe ran out (cut), or the file is not plain data.
_CUT_HINT = (
    "the probe ran out of time or room while it sent this dump; nothing is known of what it holds: "
    "probe again, with a longer --timeout if this repeats"
)
_REFUSED_HINT = (
    "vastprobe reads dumps as plain data and never runs pickle code; a dump that is more than that "
    "(a global, a call, an object) or past its bounds was written by something else: look at who wrote it"
)


def _refused(dumps: list[FlightDump]) -> Iterator[Finding]:
    for d in dumps:
        if d.refused:
            yield META.finding(
                f"a flight recorder dump was not read: {d.path}: {d.refused}",
                [],
                [Evidence("flight recorder", f"{d.path}: {d.refused}")],
                _CUT_HINT if d.cut else _REFUSED_HINT,
                "info",  # a file any tenant can write under the prefix must not change the verdict
            )


def _flight_evidence(stuck: list[Stuck]) -> list[Evidence]:
    return [
        Evidence(
            "flight recorder",
            f"process group {st.pg}: every rank entered collective #{st.last_all}; ranks "
            f"{', '.join(map(str, st.entered))} entered #{st.next_seq} ({st.op}, sizes {st.sizes}), ranks "
            f"{', '.join(map(str, st.missing))} did not",
        )
        for st in stuck[:4]
    ]


def _from_dumps(st: Stuck) -> Finding:
    missing = ", ".join(map(str, st.missing))
    return META.finding(
        f"the flight recorder dumps say rank(s) {missing} never entered collective #{st.next_seq} ({st.op}) of process "
        f"group {st.pg}, which rank(s) {', '.join(map(str, st.entered))} entered and wait in",
        [],
        _flight_evidence([st]),
        f"diagnose the host(s) of rank(s) {missing}: what they do instead of #{st.next_seq} is the cause",
        "error",
    )


def _culprit(ctx: Context, job: DistributedJob, c: JobRank, waiting: str, stuck: list[Stuck]) -> Finding:
    n = len(job.waiting)
    if n:
        others = f"{n} other rank{'s' if n != 1 else ''} ({waiting}) wait on it in a collective"
    else:  # its ranks here hold; the others are on other hosts
        away = (job.world_size or 0) - len(job.ranks)
        others = f"the job's {away} other rank(s) are on other hosts (a sweep of them says whether they wait on it)"
    summary = f"{holder_words(job, c)}; {others}"
    ev = [
        Evidence("environ", f"job {job.key}, world size {job.world_size or '?'}, {len(job.ranks)} rank(s) on this host")
    ]
    ev += [Evidence("rank", f"{r.name} (pid {r.pid if r.pid else '-'}): {r.why}") for r in job.ranks[:16]]
    chain = next((s for s in ctx.stalled_chains if c.pid is not None and c.pid in s.chain.pids), None)
    if chain is not None:
        ev += chain_evidence(ctx, chain)
    elif c.pid is not None:
        ev += stack_evidence(ctx, (c.pid,))
    ev += _flight_evidence([st for st in stuck if c.rank in st.missing])
    severity: Severity = "error"
    caused_by = None
    if c.state == "stopped" and c.pid is not None:
        hint = resume_hint(ctx, c.pid)
    elif c.state == "gone":
        hint = (
            "the rank is gone and the others will wait until the collective times out "
            "(TORCH_NCCL_TIMEOUT / the process group's timeout, 10 to 30 minutes by default): restart the job"
            + (" with more memory (the kernel's OOM killer took it)" if "OOM" in c.why else "")
        )
        caused_by = "oom-killed-child" if "OOM" in c.why else None
    elif c.state == "missing":
        severity = "warning"  # it may yet come: the rendezvous waits for it until its timeout
        hint = (
            f"{c.name} has not joined the others: see whether its process started (the launcher's log, a node "
            "that did not start it); the ranks here wait in their rendezvous until its timeout (init_process_group's, "
            "30 minutes by default), then fail"
        )
    elif c.state == "running":
        severity = "warning"
        hint = straggler_hint(c, stack_command(ctx, c.pid) if c.pid else "its stack")
    else:
        hint = (
            f"{c.name} is not in the collective: fix what it waits on (the evidence shows its chain), or kill the job; "
            f"see where it is ({stack_command(ctx, c.pid) if c.pid else 'its stack'})"
        )
    hint += "; " + _recorder_words(ctx, job)
    if c.state == "elsewhere" and c.waits_on and any(r.busy for r in (c, *job.waiting)):
        # blocked on a connection to another host while it or the ranks waiting on it computed over the
        # window: a job exchanging data, caught receiving (a training ring read STALLED; found by a helper).
        # Not a tick or a written line: a stuck rank's watchdog thread makes those (found by a helper)
        severity = "info"
        summary += "; the ranks computed over the window (a job exchanging data, caught receiving)"
    if c.goes_on is not None and severity == "error":
        # it holds the others, yet nothing proves it will not go on by itself: a rank downloading slowly,
        # waiting on a `sleep`, writing a checkpoint through a slow disk read STALLED (found by a helper)
        severity = "warning"  # holder_words says why
        hint = (
            f"{c.name} may go on by itself ({c.goes_on}): diagnose again; if it has not moved on, see where it is "
            f"({stack_command(ctx, c.pid) if c.pid else 'its stack'})"
        )
    if not ctx.two_samples and severity == "error" and c.state in ("running", "elsewhere"):
        severity = "warning"
        summary += ONE_SAMPLE
    pids = [p for p in (c.pid, *(r.pid for r in job.waiting)) if p is not None]
    return META.finding(summary, pids, ev, hint, severity, caused_by=caused_by)


def _deadlocked(ctx: Context, job: DistributedJob) -> Finding:
    """Every rank of the world is here and waits on another, and nothing of the job moved: no rank is
    left outside the wait to end it. Before, no rank was named, and the job read DEGRADED (a rank
    deadlocked on its own lock) or HEALTHY (a watchdog thread beside it; found by a helper)."""
    how = how_they_wait(job.ranks)
    named = outside_collective(job.ranks)
    ranks = [*named, *(r for r in job.ranks if r not in named)]  # a rank outside the collective first
    window = f"{ctx.snapshot.sample_window:.1f}s"
    summary = (
        f"every rank of job {job.words}, all {len(job.ranks)} on this host, waits on another, and nothing of the "
        f"job moved over {window}: {how}"
    )
    ev = [Evidence("environ", f"job {job.key}, world size {job.world_size}, every rank on this host")]
    ev += [Evidence("rank", f"{r.name} (pid {r.pid}): {r.why}") for r in job.ranks[:16]]
    ev.append(Evidence("progress", job.still or ""))
    ev += stack_evidence(ctx, tuple(r.pid for r in ranks[:4] if r.pid))
    if named:
        where = stack_command(ctx, named[0].pid) if named[0].pid else "its stack"
        todo = outside_hint(named[0], where)
    else:
        stacks = ", ".join(stack_command(ctx, r.pid) for r in ranks[:2] if r.pid) + (" …" if len(ranks) > 2 else "")
        todo = f"{DEADLOCK_HINT} ({stacks}), then restart the job"
    hint = f"{todo}; {_recorder_words(ctx, job)}"
    return META.finding(summary, [r.pid for r in ranks if r.pid], ev, hint, "error")


def _off_host(ctx: Context, job: DistributedJob, waiting: str) -> Finding:
    here = {r.rank for r in job.ranks if r.rank is not None}
    # nine at most: WORLD_SIZE is the target's word (10^9 took 5.8 GB; found by a helper)
    missing = list(islice((n for n in range(job.world_size or 0) if n not in here), 9))
    shown = ", ".join(map(str, missing[:8])) + (" …" if len(missing) > 8 else "")
    summary = (
        f"every rank of job {job.words} on this host ({waiting}) waits in a collective: the rank holding "
        f"them is on another host (ranks {shown})"
    )
    ev = [Evidence("rank", f"{r.name} (pid {r.pid}): {r.why}") for r in job.ranks[:16]]
    pids = [r.pid for r in job.waiting if r.pid]
    if job.closed:
        # the other end closed a pair of the job: the rank there exited (or tore its group down), and a
        # collective with it never completes, however long the window
        ends = ", ".join(job.closed[:4]) + (" …" if len(job.closed) > 4 else "")
        ev.append(Evidence("/proc/net/tcp", f"closed by the other end, unread (CLOSE_WAIT): connection(s) to {ends}"))
        hint = (
            f"a rank of the job at {job.closed[0]} exited or closed its connections: diagnose that host (its "
            "kernel log says whether it was OOM-killed), then restart the job; the ranks here wait until the "
            "collective times out (TORCH_NCCL_TIMEOUT: 10 to 30 minutes by default)"
        )
        return META.finding(f"{summary}, and the other end of its connection to {job.closed[0]} closed it "
                            "(CLOSE_WAIT): a rank there exited", pids, ev, hint, "error")  # fmt: skip
    hint = (
        "diagnose the job's other hosts (a sweep of them names the culprit when it finds it; `--group-by` compares "
        "them); " + _recorder_words(ctx, job)
    )
    sev: Severity = "warning" if ctx.two_samples else "info"
    return META.finding(summary + ("" if ctx.two_samples else ONE_SAMPLE), pids, ev, hint, sev)


def _recorder_words(ctx: Context, job: DistributedJob) -> str:
    """Whether PyTorch's flight recorder was on: which variables would have recorded this hang."""
    procs = [ctx.tree.by_pid[r.pid] for r in job.ranks if r.pid is not None and r.pid in ctx.tree.by_pid]
    on = any(
        (p.env_value("TORCH_NCCL_TRACE_BUFFER_SIZE") or p.env_value("TORCH_FR_BUFFER_SIZE") or "0") not in ("", "0")
        for p in procs
    )
    if on:
        return "the flight recorder is on: its dumps (TORCH_NCCL_DEBUG_INFO_TEMP_FILE, /tmp/nccl_trace_rank_*) name the last collective each rank entered"
    return (
        "to record the next hang, start the job with TORCH_FR_BUFFER_SIZE=2000 (TORCH_NCCL_TRACE_BUFFER_SIZE on older "
        "PyTorch) and TORCH_NCCL_DUMP_ON_TIMEOUT=1: each rank then dumps its last collectives"
    )


RULE = Rule(META, check)
