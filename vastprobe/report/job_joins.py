"""A distributed job read once across the hosts of a run. Its hosts are grouped by the job's id (its
ranks' environment, analysis/ranks.py). Where one host's rank holds the job (stopped, gone, blocked on
something that is not another rank), every other host with ranks of the job is held too, whatever
its ranks look like from there: a rank spinning in a collective burns its CPU and its GPU as a rank
that computes does. So such a host is told "rank R (pid, host H) holds job J" at the holder's
severity, and its verdict follows, unless its own ranks show progress (bytes written between the
samples, a GPU drawing half its power limit or more). The holding host is told who waits on it. A job whose
rendezvous is a loopback address, or whose ranks all live on one host, is no multi-host job: hosts
that each run their own single-node job with torchrun's defaults are not joined."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import islice

from vastprobe.analysis.rank_waits import DEADLOCK_HINT, how_they_wait, outside_collective, outside_hint
from vastprobe.analysis.ranks import each_worked, goes_on_words, holder_words, judge, straggler_hint, works_by_turns
from vastprobe.model import (
    HOLDING,
    NO_PROCESS,
    ONE_SAMPLE,
    DistributedJob,
    Evidence,
    Finding,
    HostReport,
    JobRank,
    Severity,
    split_endpoint,
)
from vastprobe.report.edits import added, swap
from vastprobe.report.hops import host_addresses

RULE, CODE = "culprit-rank", "VP119"  # the joined findings are the culprit-rank rule's, read across hosts
_LOCAL_RENDEZVOUS = ("rendezvous:127.", "rendezvous:localhost:", "rendezvous:[::1]:", "rendezvous:::1:")


@dataclass(frozen=True)
class JobAcrossHosts:
    """One job as the run saw it: its hosts' parts, the rank that holds it and where."""

    key: str
    parts: tuple[tuple[str, DistributedJob], ...]  # (target, the job as that host saw it)
    holder: tuple[str, JobRank] | None  # (target, rank)
    missing: tuple[int, ...]  # global ranks no host of the run has, alive or gone
    world_size: int | None
    #: the other ranks on other hosts that hold the job too (a stopped rank on A and a D-state one on
    #: C): naming one sent the operator to fix it and find the job still stuck (found by a helper)
    also: tuple[tuple[str, JobRank], ...] = ()

    @property
    def held(self) -> tuple[tuple[str, DistributedJob], ...]:
        """The parts a holder on another host holds: not the holder's, and naming no culprit of their own."""
        if self.holder is None:
            return ()
        return tuple((t, j) for t, j in self.parts if t != self.holder[0] and not j.culprits)

    @property
    def waiting(self) -> tuple[tuple[str, DistributedJob], ...]:
        """The held parts whose ranks show no progress of their own: they wait on the holder."""
        return tuple((t, j) for t, j in self.held if j.progress is None)

    @property
    def moving(self) -> tuple[tuple[str, DistributedJob], ...]:
        """The held parts whose ranks still show progress (bytes written, a GPU drawing power)."""
        return tuple((t, j) for t, j in self.held if j.progress is not None)


def jobs_across_hosts(reports: Sequence[HostReport]) -> list[JobAcrossHosts]:
    """The multi-host jobs of the run with ranks on two or more of its hosts, or on one host whose
    ranks hold connections that another host of the run closed (its ranks gone, _gone_from)."""
    by_key: dict[str, list[tuple[str, DistributedJob]]] = {}
    for r in reports:
        for j in r.jobs:
            by_key.setdefault(j.key, []).append((r.target, j))
    out = []
    addresses: dict[str, set[str]] = {}
    groups = [(key, g) for key, parts in by_key.items() for g in _one_job_each(reports, parts, addresses)]
    for key, parts in groups:
        world = max((j.world_size or 0 for _t, j in parts), default=0)
        # a loopback rendezvous, or a job one host holds whole, is a single-node job on each host
        if key.startswith(_LOCAL_RENDEZVOUS) or any(world <= len(j.ranks) for _t, j in parts):
            continue
        if len(parts) < 2 and not parts[0][1].closed:
            continue
        owners = _owners(parts)  # the ranks' ends do not change with their states: read once
        parts = _rejudged(parts, world or None, owners)
        # of equal strength, by rank number: the order the hosts finished in chose before, and the job's
        # holder changed from one sweep to the next (found by a helper)
        holding = sorted(
            ((t, c) for t, j in parts for c in j.culprits if c.state in HOLDING),
            key=lambda h: (_STRENGTH[h[1].state], h[1].rank is None, h[1].rank or 0, h[0]),
        )
        straggling = [(t, c) for t, j in parts for c in j.culprits if c.state not in HOLDING]
        if _each_held_elsewhere(parts, holding):
            holding = []  # no rank holds the others: each waits on something that is not a rank
        named = holding or straggling
        seen = {r.rank for _t, j in parts for r in j.ranks if r.rank is not None}
        # the first MAX_MISSING: WORLD_SIZE is the target's word (10^8 made 79 MB of JSON, 10^20 a MemoryError;
        # found by a helper)
        missing = tuple(islice((n for n in range(world) if n not in seen), MAX_MISSING))
        holder = (
            named[0] if named else _gone_from(reports, parts, missing) or _sink(reports, parts, owners, straggler=True)
        )
        if len(parts) < 2 and holder is None:
            continue
        also = tuple(h for h in holding[1:] if holder is not None and h[0] != holder[0])
        out.append(JobAcrossHosts(key, tuple(parts), holder, missing, world or None, also[:8]))
    return out


def _one_job_each(
    reports: Sequence[HostReport], parts: list[tuple[str, DistributedJob]], addresses: dict[str, set[str]]
) -> list[list[tuple[str, DistributedJob]]]:
    """The parts of one job id, split where they are several jobs: two clusters without a run id and
    the same rendezvous (`node0:29500`) were joined, and a busy healthy cluster read STALLED, held
    by the other's stopped rank (found by a helper). A rank number alive on two hosts, or more live
    ranks than the world, says so; the hosts whose ranks connect to each other are one job then, and
    a group that still repeats a rank is not joined at all."""
    if not _collides(parts):
        return [parts]
    if not addresses:
        addresses.update((r.target, host_addresses(r)) for r in reports)
    group = list(range(len(parts)))

    def root(i: int) -> int:
        while group[i] != i:
            i = group[i]
        return i

    ends = [{split_endpoint(e)[0].strip("[]").lower() for e in j.peers} for _t, j in parts]
    for i, (ti, _ji) in enumerate(parts):
        for k in range(i + 1, len(parts)):
            if ends[i] & addresses.get(parts[k][0], set()) or ends[k] & addresses.get(ti, set()):
                group[root(k)] = root(i)
    split: dict[int, list[tuple[str, DistributedJob]]] = {}
    for i, part in enumerate(parts):
        split.setdefault(root(i), []).append(part)
    return [g for g in split.values() if not _collides(g)]


def _collides(parts: Sequence[tuple[str, DistributedJob]]) -> bool:
    alive = [x.rank for _t, j in parts for x in j.ranks if x.pid and x.rank is not None]
    world = max((j.world_size or 0 for _t, j in parts), default=0)
    return len(alive) != len(set(alive)) or (world > 0 and len(alive) > world)


#: Which holder names the job first: a rank that cannot move (gone, stopped, in D) before one that
#: waits on something else.
#: The most ranks a job's summary lists as seen on no host of the run (the first ones)
MAX_MISSING = 1024

_STRENGTH = {"gone": 0, "exited": 0, "stopped": 1, "uninterruptible": 1, "elsewhere": 2, "missing": 3}


def _owners(parts: Sequence[tuple[str, DistributedJob]]) -> dict[str, tuple[str, JobRank]]:
    """The local end of each rank's connection -> (its host, the rank)."""
    owner: dict[str, tuple[str, JobRank]] = {}
    for t, j in parts:
        for x in j.ranks:
            for end in x.ends:
                owner.setdefault(end, (t, x))
    return owner


def _rejudged(
    parts: list[tuple[str, DistributedJob]], world: int | None, owner: dict[str, tuple[str, JobRank]]
) -> list[tuple[str, DistributedJob]]:
    """The parts, a rank blocked on a connection whose other end is a rank of the job on another host
    of the run waiting on that rank, not "elsewhere": each host saw an end it could not name and called
    it "not on another rank", so a training ring read STALLED on a random host and a deadlocked rank's
    neighbours were named its holders (found by a helper)."""
    out = []
    for t, j in parts:
        ranks = []
        for x in j.ranks:
            o = owner.get(x.waits_on) if x.waits_on else None
            if x.state == "elsewhere" and o is not None and o[0] != t:
                why = f"waits on {o[1].label} on {o[0]} ({x.waits_on}), a rank of the job"
                x = replace(x, state="collective", why=why, goes_on=None)
            ranks.append(x)
        if ranks != list(j.ranks):
            culprits, waiting = judge(ranks, world)
            j = replace(j, ranks=tuple(ranks), culprits=culprits, waiting=waiting)
        out.append((t, j))
    return out


def _sink(
    reports: Sequence[HostReport],
    parts: Sequence[tuple[str, DistributedJob]],
    owner: dict[str, tuple[str, JobRank]],
    straggler: bool = False,
) -> tuple[str, JobRank] | None:
    """The rank every chain of waits over the job's connections ends at, itself blocked on no rank,
    where its own host proves it stuck (an error naming it: a lock no thread of its own releases): the
    one holding the others. A chain that comes back on itself (every rank receives before it sends)
    has no holder; nor has one whose end is only caught between two steps (a ring at work named its
    rank 0 so: a rank waiting in a futex looks the same)."""
    ranks = [x for _t, j in parts for x in j.ranks]
    if any(x.busy for x in ranks if x.state != "running"):
        return None  # a waiting rank at work: the ranks exchange data (a ring caught mid-step named its rank 0)
    rank_of: dict[tuple[str, int | None], JobRank] = {(t, x.pid): x for t, j in parts for x in j.ranks if x.pid}
    link: dict[tuple[str, int | None], tuple[str, int | None]] = {}
    for t, j in parts:
        for x in j.ranks:
            o = owner.get(x.waits_on) if x.waits_on and x.state == "collective" else None
            if o is not None and (o[0], o[1].pid) != (t, x.pid):
                link[(t, x.pid)] = (o[0], o[1].pid)
    ends = set()
    for start in link:
        seen, cur = set(), start
        while cur in link:
            if cur in seen:
                return None
            seen.add(cur)
            cur = link[cur]
        ends.add(cur)
    if len(ends) != 1 or len(link) < 2:
        return None
    end = next(iter(ends))
    sink = rank_of.get(end)
    if straggler and sink is not None and sink.state == "running" and sink.busy:
        if works_by_turns([x for x in ranks if x is not sink and x.state != "running"], [sink]):
            return None  # the ranks waiting on it worked as it did: a ring at work on shared CPUs
        # every other rank's wait ends at a rank that computes, the waiting ones still: a straggler (a
        # warning), as on one host; across hosts the job read HEALTHY, every host a note (found by a helper)
        return end[0], replace(
            sink, why=f"{sink.why}, while every other rank's wait over the job's connections ends at it"
        )
    if any(x.state == "running" for x in ranks):
        return None
    if sink is None or sink.state != "collective" or sink.waits_on:
        return None
    report = next((r for r in reports if r.target == end[0]), None)
    if report is None or not _proven_here(report, sink):
        return None
    why = f"{sink.why}, and is blocked on no rank: every other rank's wait over the job's connections ends at it"
    return end[0], replace(sink, state="elsewhere", why=why)


def _each_held_elsewhere(parts: Sequence[tuple[str, DistributedJob]], holding: Sequence[tuple[str, JobRank]]) -> bool:
    """Every host's ranks wait on something that is not a rank, and none waits on another rank: a
    job stuck at its rendezvous, each rank reading the stopped store. The first host's rank was said
    to hold the job, and the operator sent there (found by a helper)."""
    return (
        len({t for t, _c in holding}) > 1
        and all(c.state == "elsewhere" for _t, c in holding)
        and not any(j.waiting for _t, j in parts)
    )


def _gone_from(
    reports: Sequence[HostReport], parts: Sequence[tuple[str, DistributedJob]], missing: tuple[int, ...]
) -> tuple[str, JobRank] | None:
    """The rank no host of the run has, where the run shows where it was: a rank here holds a
    connection whose other end closed it (CLOSE_WAIT), at an address only one other host of the run
    has, and that host has no rank of the job left. A job of one rank a host whose rank on B was
    killed read HEALTHY on both hosts (found by a helper): B had no rank left to say one was gone."""
    if not missing or not any(j.closed for _t, j in parts):
        return None
    with_job = {t for t, _j in parts}
    # once, not once a closed connection; only hosts the run read: of one it could not reach, nothing
    # says no process of the job is left there (an unreachable host was told so; found by a helper)
    addresses = [(r.target, host_addresses(r)) for r in reports if r.status == "ok"]
    for target, part in parts:
        for end in part.closed:
            ip = split_endpoint(end)[0].strip("[]").lower()
            hosts = [t for t, own in addresses if t != target and ip in own]
            if len(hosts) != 1 or hosts[0] in with_job:
                continue
            waiting = next((x for x in part.ranks if x.pid), None)
            who = f"{waiting.label} on {target}" if waiting is not None else target
            which = (
                "" if len(missing) == 1 else f" (ranks {', '.join(map(str, missing[:8]))} are on no host of the run)"
            )
            why = (f"gone: no rank of the job is left on {hosts[0]}{which}, and {who} holds its connection to "
                   f"{end}, which {hosts[0]} closed (CLOSE_WAIT)")  # fmt: skip
            return hosts[0], JobRank(missing[0] if len(missing) == 1 else None, None, None, "gone", why)
    return None


def join_jobs(reports: Sequence[HostReport]) -> list[HostReport]:
    """The reports, each multi-host job's holder joined to every other host of the job."""
    out = list(reports)
    index = {r.target: i for i, r in enumerate(out)}
    for job in jobs_across_hosts(reports):
        cleared = []  # parts whose own culprit the run no longer holds for one
        for target, part in job.parts:  # the parts as the run judged them (a rank's wait named across hosts)
            before = out[index[target]]
            out[index[target]] = _with_part(before, part)
            was = next((j for j in before.jobs if j.key == part.key and j.ranks != part.ranks), None)
            changed = was is not None and was.culprits != part.culprits
            # or it said the holder is on another host, and the run read those hosts
            if (changed or part.elsewhere) and (job.holder is None or job.holder[0] != target):
                cleared.append((target, part))
        if job.holder is None:
            if _everyone_waits(job):
                # once for the job, not once a host (a ring over 256 hosts took minutes; found by a helper)
                still = _deadlock_words(job) if _held_still(job) else None
                for target, part in job.parts:
                    out[index[target]] = _told_everyone_waits(out[index[target]], part, job, still)
            else:
                for target, part in cleared:
                    out[index[target]] = _told_waits_on_rank(out[index[target]], part, job)
            continue
        h_target, c = job.holder
        h = index[h_target]
        hjob = next((j for t, j in job.parts if t == h_target), None)
        held = _culprit_finding(out[h], c, hjob)
        severity: Severity = held.severity if held is not None else "error" if c.state == "gone" else "warning"
        if held is not None and severity != "error" and _proven_here(out[h], c):
            # the holder the run found by following the ranks' waits, proven stuck by its own host
            severity = "error"
            out[h] = swap(out[h], held, held := replace(held, severity="error"))
        for target, part in job.held:  # not the holder's, nor a host that names a culprit of its own
            out[index[target]] = _told_holder(out[index[target]], part, job, c, h_target, severity)
        if hjob is None and job.waiting:  # a rank gone from a host with none of the job left
            out[h] = added(out[h], _gone_here(job, c))
        elif hjob is not None and held is None and c.state == "running" and job.waiting:  # the straggler's host
            # its own word was about its rank blocked on another host ("not on another rank"): replaced
            own = _own_finding(out[h], hjob)
            told = _straggler_here(hjob, c, job.waiting)
            out[h] = swap(out[h], own, told) if own is not None else added(out[h], told)
        elif hjob is not None and held is not None and job.waiting:
            out[h] = swap(out[h], held, _holder_joined(held, hjob, c, job.waiting))
        for target, o in job.also:  # a second holder's host: told who waits too, not to run a sweep it is in
            k = index[target]
            ojob = next((j for t, j in job.parts if t == target), None)
            own = _culprit_finding(out[k], o, ojob)
            if ojob is not None and own is not None and job.waiting:
                out[k] = swap(out[k], own, _holder_joined(own, ojob, o, job.waiting))
    return out


def _with_part(r: HostReport, part: DistributedJob) -> HostReport:
    """The report with its part of the job as the run judged it (the same ranks)."""
    pids = {x.pid for x in part.ranks}
    jobs = tuple(part if j.key == part.key and {x.pid for x in j.ranks} == pids else j for j in r.jobs)
    return r if jobs == r.jobs else replace(r, jobs=jobs)


def _proven_here(r: HostReport, c: JobRank) -> bool:
    """The holder's own host has an error about it (a lock no thread of its own releases)."""
    return any(f.severity in ("error", "critical") and c.pid in f.pids for f in r.findings if f.rule != RULE)


def _everyone_waits(job: JobAcrossHosts) -> bool:
    """The run saw every rank of the world, and each waits in a collective: none is elsewhere."""
    ranks = [x for _t, j in job.parts for x in j.ranks]
    return not job.missing and bool(job.world_size) and all(x.state == "collective" for x in ranks)


def _deadlock_words(job: JobAcrossHosts) -> tuple[str, str]:
    """(how the ranks wait on one another, what to do) for a job held still on every host of the run."""
    ranks = [x for _t, j in job.parts for x in j.ranks]
    where = {x: t for t, j in job.parts for x in j.ranks}
    named = outside_collective(ranks)
    if named:
        hint = outside_hint(named[0], f"py-spy dump --pid {named[0].pid} on {where.get(named[0], 'its host')}")
    else:
        hint = f"{DEADLOCK_HINT} (py-spy dump of each rank), then restart the job"
    return how_they_wait(ranks, where), hint


def _told_everyone_waits(
    r: HostReport, part: DistributedJob, job: JobAcrossHosts, still: tuple[str, str] | None
) -> HostReport:
    """Each host said the rank holding its ranks is on another host; the run saw those ranks, waiting
    too (found by a helper). Its finding now says what the run saw: no rank holds the others. `still`:
    the job held still on every host, how its ranks wait on one another and what to do (_deadlock_words)."""
    own = _own_finding(r, part)
    if own is None:
        return r
    hosts = len(job.parts)
    summary = (
        f"every rank of job {part.words}, on {hosts} hosts of this run, waits in a collective: no rank is seen "
        "holding the others (a collective one rank never entered, a message lost, or a rank's own thread still at "
        "work)"
    )
    ev = Evidence("this run", f"all {job.world_size} ranks of job {job.key} were read on {hosts} hosts: each waits")
    hint = (
        "the ranks wait on one another, or on what a rank's other thread does (a download, a checkpoint): compare "
        "where each is (a flight recorder dump, TORCH_NCCL_TRACE_BUFFER_SIZE, or py-spy dump of each rank) for the "
        "collective one of them skipped or the thread still at work; diagnose again before restarting the job"
    )
    # each host's own word was its own view (a rank "not on another rank" was an error); what the run saw
    # is one story: ranks that moved between the samples are a job at work (a training ring caught in its
    # receives read STALLED; found by a helper), and still ones wait on one another, no proof of which
    moving = [p for _t, j in job.parts if (p := j.progress) is not None]
    worked = each_worked([x for _t, j in job.parts for x in j.ranks])
    if moving or worked:
        sign = moving[0] if moving else worked
        summary = (
            f"every rank of job {part.words}, on {hosts} hosts of this run, was caught waiting on another rank, "
            f"and the ranks move on: {sign}"
        )
        hint = "a job exchanging data between its ranks is caught so; diagnose again if its log stops"
        ev2 = (*own.evidence, ev, Evidence("progress", sign or ""))
        return swap(r, own, replace(own, summary=summary, evidence=ev2, hint=hint, severity="info"))
    sev: Severity = own.severity if own.severity == "info" else "warning"
    if still is not None:
        # nothing of the job moved on any host: no rank is outside the wait to end it, as on one host
        # (a rank deadlocked on its own lock, a ring whose ranks all receive first read DEGRADED)
        how, hint = still
        summary = (
            f"every rank of job {part.words}, on {hosts} hosts of this run, waits on another, and nothing of the "
            f"job moved over the window on any host: {how}"
        )
        stills = tuple(Evidence("progress", f"{t}: {j.still}"[:400]) for t, j in job.parts[:8])
        ev2 = (*own.evidence, ev, *stills)
        return swap(r, own, replace(own, summary=summary, evidence=ev2, hint=hint, severity="error"))
    return swap(r, own, replace(own, summary=summary, evidence=(*own.evidence, ev), hint=hint, severity=sev))


def _held_still(job: JobAcrossHosts) -> bool:
    """Nothing of the job moved on any host, and each connection leaving a host that its still ranks
    wait on ends at a rank of the job on another host of the run: not a download from a server outside
    the job."""
    if not all(j.still is not None for _t, j in job.parts):
        return False
    owner = _owners(job.parts)
    return all(end in owner for _t, j in job.parts for end in j.still_waits_on)


def _told_waits_on_rank(r: HostReport, part: DistributedJob, job: JobAcrossHosts) -> HostReport:
    """A host whose rank waited on a connection it could not name, which the run names a rank of the
    job, and no rank of the run holds the others: it waits its turn in a job at work (ranks moving or
    computing), or among ranks that all wait (no proof of which holds them)."""
    own = _own_finding(r, part)
    if own is None:
        return r
    moving = [p for _t, j in job.parts if (p := j.progress) is not None]
    running = [f"{x.label} on {t}" for t, j in job.parts for x in j.ranks if x.state == "running"]
    waits = [x for x in part.ranks if x.state == "collective" and x.waits_on]
    first = waits[0] if waits else part.ranks[0]
    summary = f"{first.label} of job {part.words} {first.why}"
    if moving or running:
        sign = moving[0] if moving else f"{running[0]} runs"
        summary += f"; the job's ranks move on ({sign})"
        sev: Severity = "info"
    else:
        summary += "; no rank of the run is seen holding the others"
        sev = own.severity if own.severity == "info" else "warning"
    hint = "ranks exchanging data are caught waiting on one another; diagnose again if the job's log stops"
    ev = Evidence("this run", f"{len(job.parts)} hosts of job {job.key} read together"[:400])
    return swap(r, own, replace(own, summary=summary, severity=sev, hint=hint, evidence=(*own.evidence, ev)))


def _straggler_here(hjob: DistributedJob, c: JobRank, waiting: Sequence[tuple[str, DistributedJob]]) -> Finding:
    """The straggler's host, where no rank waits on it: told that the job's ranks elsewhere do."""
    ranks = sorted((x for _t, j in waiting for x in j.ranks), key=lambda x: (x.rank is None, x.rank or 0))
    hosts = ", ".join(t for t, _j in waiting[:8]) + (" …" if len(waiting) > 8 else "")
    summary = (
        f"{holder_words(hjob, c)}; {_ranks(ranks)} on {len(waiting)} other host(s) of this run wait on it ({hosts})"
    )
    hint = straggler_hint(c, f"py-spy dump --pid {c.pid}")
    ev = (Evidence("this run", f"{_ranks(ranks)} on other hosts of this run wait on it: {hosts}"[:400]),)
    return Finding(RULE, CODE, "warning", summary, (c.pid,) if c.pid else (), ev, hint)


def _gone_here(job: JobAcrossHosts, c: JobRank) -> Finding:
    """The finding of a host that has no rank of the job left, where the other hosts' ranks show one
    was: the job is held here, by a rank that is no more."""
    ranks = sorted((x for _t, j in job.waiting for x in j.ranks), key=lambda x: (x.rank is None, x.rank or 0))
    hosts = ", ".join(t for t, _j in job.waiting[:8]) + (" …" if len(job.waiting) > 8 else "")
    of_world = f" of {job.world_size}" if c.rank is not None and job.world_size else ""
    words = job.parts[0][1].words
    verb = "waits" if len(ranks) == 1 else "wait"
    summary = f"{c.name}{of_world} of job {words} is gone from this host: {_ranks(ranks)} on {hosts} {verb} on it"
    ev = (Evidence("this run", f"{c.why}"[:400]),
          Evidence("this run", f"{_ranks(ranks)} on other hosts of this run wait on it: {hosts}"[:400]))  # fmt: skip
    hint = (
        f"{c.name} exited or was killed here (see the kernel log for an OOM kill, and its launcher's log); "
        "the other ranks wait until the collective times out (TORCH_NCCL_TIMEOUT: 10 to 30 minutes by default): "
        "restart the job"
    )
    return Finding(RULE, CODE, "error", summary, (), ev, hint, remote=job.waiting[0][0] if job.waiting else None)


def _culprit_finding(r: HostReport, c: JobRank, part: DistributedJob | None) -> Finding | None:
    """The holder host's own finding about this job: the one naming the culprit, or with a gone
    culprit one naming the job's ranks there. A host with ranks of two jobs has one finding each."""
    if c.pid is not None:
        return next((f for f in r.findings if f.rule == RULE and c.pid in f.pids), None)
    return _own_finding(r, part) if part is not None else None


def _own_finding(r: HostReport, part: DistributedJob) -> Finding | None:
    """The host's culprit-rank finding about this job: one naming a rank of it. Matched by the rule
    alone, a host with ranks of two jobs had one job's finding replaced by the other's, and read
    DEGRADED while a stopped rank held it (found by a helper)."""
    pids = {x.pid for x in part.ranks if x.pid}
    return next((f for f in r.findings if f.rule == RULE and pids & set(f.pids)), None)


def _ranks(ranks: Sequence[JobRank]) -> str:
    nums = [str(r.rank) if r.rank is not None else f"local {r.local_rank}" for r in ranks[:8]]
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(nums) + (" …" if len(ranks) > 8 else "")


def _told_holder(
    r: HostReport, part: DistributedJob, job: JobAcrossHosts, c: JobRank, where: str, severity: Severity
) -> HostReport:
    """A host whose ranks are held by a rank on another host: its finding says so at the holder's
    severity (its own off-host note replaced), or, where its ranks show progress, a note."""
    who = c.name + (f" (pid {c.pid}, {where})" if c.pid else f" ({where})")
    here = _ranks(part.ranks)
    why = (c.why if c.state not in NO_PROCESS else f"it is {c.why}") + goes_on_words(c)
    ev = [Evidence("this run", f"{who} holds job {job.key}: {c.why}"[:400])]
    ev += [Evidence("this run", f"{o.label} on {t} holds it too: {o.why}"[:400]) for t, o in job.also]
    ev += [Evidence("rank", f"{x.name} (pid {x.pid if x.pid else '-'}): {x.why}") for x in part.ranks[:16]]
    if part.progress is not None:
        ev.append(Evidence("progress", part.progress))
        summary = f"{who} holds job {part.words} ({why}), yet {here} here show progress: {part.progress}"
        hint = (
            f"the ranks here move on, so they may not have reached the collective {c.name} is missing yet; "
            f"diagnose again, and see {c.name} on {where}"
        )
        sev: Severity = "info"
    else:
        ev.append(Evidence("progress", "no rank here wrote a byte between the samples or drew half its GPU's "
                                       "power limit: a busy CPU or GPU alone is a collective's spin"))  # fmt: skip
        summary = f"{who} holds job {part.words}: {why}; {here} here cannot finish a collective without it"
        hint = (
            f"fix {c.name} on {where} (its report shows what it waits on"
            + (f": `vastprobe diagnose {where} --pid {c.pid}`" if c.pid else "")
            + "); the ranks here go on once it rejoins, or fail when the collective times out (the process "
            "group's timeout, TORCH_NCCL_TIMEOUT: 10 to 30 minutes by default)"
        )
        sev = severity
    joined = Finding(RULE, CODE, sev, summary, tuple(x.pid for x in part.ranks if x.pid), tuple(ev), hint,
                     remote=where)  # fmt: skip
    r = replace(r, jobs=tuple(replace(j, held_by=(where, c)) if j is part else j for j in r.jobs))
    own = _own_finding(r, part)
    if own is not None:  # every rank here waits and it said the holder is elsewhere: now it is known
        return swap(r, own, replace(joined, evidence=(*joined.evidence, *own.evidence)))
    return added(r, joined)


def _holder_joined(
    f: Finding, hjob: DistributedJob, c: JobRank, waiting: Sequence[tuple[str, DistributedJob]]
) -> Finding:
    """The holder's finding, saying which ranks on which hosts of the run wait on it."""
    waiting = sorted(waiting, key=lambda tj: min((x.rank for x in tj[1].ranks if x.rank is not None), default=0))
    ranks = sorted((x for _t, j in waiting for x in j.ranks), key=lambda x: (x.rank is None, x.rank or 0))
    hosts = ", ".join(t for t, _j in waiting[:8]) + (" …" if len(waiting) > 8 else "")
    here = f"{_ranks(hjob.waiting)} here and " if hjob.waiting else ""  # by number: "1 rank(s) here" said less
    others = f"{here}{_ranks(ranks)} on {len(waiting)} other host(s) of this run wait on it ({hosts})"
    one_sample = ONE_SAMPLE if f.summary.endswith(ONE_SAMPLE) else ""
    line = f"{_ranks(ranks)} on other hosts of this run wait on it: {hosts}"
    return replace(
        f,
        summary=f"{holder_words(hjob, c)}; {others}{one_sample}",
        evidence=(*f.evidence, Evidence("this run", line[:400])),
    )
