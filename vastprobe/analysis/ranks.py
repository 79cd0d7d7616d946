"""Who is who in a distributed job, and which rank holds the others.

A hung collective shows on every rank but one as the same wait: the main thread waits for the
collective's work (a futex with no timeout, or spins on a busy GPU) while its communication thread
polls connections to the other ranks. The rank that holds the job is the one that is elsewhere:
stopped, gone (killed, OOM-killed), in uninterruptible sleep, or blocked on something that is not
another rank (a data loader's FIFO, a FUSE dataset mount, a lock, a checkpoint write). Ranks come
from their environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE; the job from
TORCHELASTIC_RUN_ID, SLURM_JOB_ID or the rendezvous MASTER_ADDR:MASTER_PORT), read by the probe from
an allow-list of names only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from vastprobe.analysis.gpu import gpu_computing, gpu_users
from vastprobe.analysis.rank_waits import in_gloo_collective, job_still
from vastprobe.analysis.waitgraph.edges import untimed_futex
from vastprobe.analysis.wchan_families import BLOCK_IO_WAITS, family, timed_wait
from vastprobe.clock import utc_text
from vastprobe.model import HOLDING, NO_PROCESS, DistributedJob, JobRank, Process, ProcIO, RankState, Syscall
from vastprobe.units import byte_size
from vastprobe.untrusted.numbers import read_int

if TYPE_CHECKING:
    from vastprobe.analysis.stalls import StalledChain
    from vastprobe.analysis.view import SnapshotView


def job_key(p: Process) -> str | None:
    run = p.env_value("TORCHELASTIC_RUN_ID")
    if run and run != "none":
        return f"torchelastic:{run}"
    slurm = p.env_value("SLURM_JOB_ID")
    if slurm:
        return f"slurm:{slurm}"
    addr, port = p.env_value("MASTER_ADDR"), p.env_value("MASTER_PORT")
    if addr and port:
        return f"rendezvous:{addr}:{port}"
    return None


def find_jobs(ctx: SnapshotView, chains: Sequence[StalledChain]) -> list[DistributedJob]:
    """The distributed jobs with a rank on this host, each rank classified. The ranks of a job are
    the processes whose environment names a RANK and the same job; a worker a rank forked (a
    DataLoader worker inherits the environment) is not a rank of its own. `chains`: the snapshot's
    stalled chains (analysis.stalls), which say what a blocked rank waits on."""
    by_key: dict[str, list[Process]] = {}
    for p in ctx.snapshot.processes:
        if p.kernel_thread or read_int(p.env_value("RANK") or "") is None:
            continue
        key = job_key(p)
        parent = ctx.tree.by_pid.get(p.ppid)
        if key is None or (
            parent is not None and job_key(parent) == key and parent.env_value("RANK") == p.env_value("RANK")
        ):
            continue  # a worker of a rank: same rank in its environment as its parent
        by_key.setdefault(key, []).append(p)
    jobs = []
    for key, procs in sorted(by_key.items()):
        pids = {p.pid for p in procs}
        util = _gpu_util(ctx, procs)
        spinning = any(v >= BUSY_UTIL for v in util.values())
        ranks = [
            _classify(ctx, chains, p, pids, util.get(p.pid), spinning)
            for p in sorted(procs, key=lambda p: read_int(p.env_value("RANK") or "") or 0)
        ]
        ranks = [replace(r, goes_on=_goes_on(ctx, chains, r)) for r in ranks]
        ranks += _gone(ctx, procs)
        world = max((read_int(p.env_value("WORLD_SIZE") or "") or 0 for p in procs), default=0) or None
        culprits, waiting = judge(ranks, world)
        closed = tuple(dict.fromkeys(e for p in procs for e in ctx.graph.closed_by_peer(p.pid)))
        peers = tuple(dict.fromkeys(e for p in procs for e in ctx.graph.unseen_ends(p.pid)))[:64]
        moving = _progress(ctx, procs)
        still, off_host = job_still(ctx, procs, whole=(world or 0) <= len(procs)) if moving is None else (None, ())
        part = DistributedJob(key, world, tuple(ranks), culprits, waiting, moving, closed=closed, peers=peers)
        jobs.append(replace(part, still=still, still_waits_on=off_host))
    return jobs


def judge(ranks: Sequence[JobRank], world: int | None) -> tuple[tuple[JobRank, ...], tuple[JobRank, ...]]:
    """(the ranks holding the job, the ranks waiting in a collective), from the ranks' states."""
    waiting = tuple(r for r in ranks if r.state == "collective")
    holding = tuple(r for r in ranks if r.state in HOLDING)
    # a rank that computes while the others wait is a straggler: it holds them only while nothing
    # here is stuck outright, and while the waiting ranks do not compute themselves (a training ring's
    # ranks caught computing and receiving by turns named one a straggler)
    running = [r for r in ranks if r.state == "running"]
    stalled = waiting and not any(r.busy for r in waiting) and not works_by_turns(waiting, running)
    culprits = holding or (tuple(r for r in ranks if r.state == "running") if stalled else ())
    # ranks holding the job count where someone waits on them: here, or the job's ranks elsewhere
    if not waiting and (world or 0) <= len(ranks):
        culprits = ()
    return culprits, waiting


def _progress(ctx: SnapshotView, procs: list[Process]) -> str | None:
    """What says the ranks here move on, beyond a busy CPU (a rank spinning in a collective burns one
    too): bytes written between the samples (a log line, a progress bar, a checkpoint: write(2)'s
    count, since a log appended into a page already dirty adds nothing to write_bytes), or a rank's
    GPU drawing at least half its power limit in every sample. None: no such sign."""
    for p in procs:
        a, b = (p.samples[0].io, p.samples[-1].io) if len(p.samples) >= 2 else (None, None)
        if isinstance(a, ProcIO) and isinstance(b, ProcIO) and b.wchar > a.wchar:
            wrote = byte_size(b.wchar - a.wchar)
            return f"{_rank_name(p)} (pid {p.pid}) wrote {wrote} between the samples"
    return gpu_computing(ctx.snapshot, frozenset(p.pid for p in procs))


def _rank_name(p: Process) -> str:
    return f"rank {p.env_value('RANK')}"


#: The share of a CPU over the window that says a rank works (exchanges data, computes) rather than waits
BUSY_RANK_SHARE = 0.2
#: The share of a CPU over the window that says a rank seen waiting worked between the reads: one
#: blocked in its receive for the whole window uses next to nothing (a watchdog thread's wakes cost
#: well under a tick), one that exchanges data uses as much as the ranks caught running beside it
TURN_SHARE = 0.05


def _worked_shares(ranks: Sequence[JobRank]) -> list[float]:
    """The live ranks' shares of a CPU where each used TURN_SHARE or more; [] otherwise."""
    shares = [r.share for r in ranks if r.pid]
    return [s for s in shares if s is not None] if all(s is not None and s >= TURN_SHARE for s in shares) else []


def works_by_turns(waiting: Sequence[JobRank], running: Sequence[JobRank]) -> bool:
    """The ranks seen waiting worked over the window as the ranks seen running did: ranks exchanging
    data by turns on CPUs they share, each caught at another point of its step. A ring at work on an
    overloaded machine named one or two of its ranks stragglers holding the others, DEGRADED on every
    host, in 22 sweeps of 40. A rank that waits for a true straggler does nothing meanwhile."""
    top = min((r.share for r in running if r.share is not None), default=None)
    shares = _worked_shares(waiting)
    return top is not None and top > 0 and bool(shares) and max(shares) >= top / 2


def each_worked(ranks: Sequence[JobRank]) -> str | None:
    """`each rank used 12-19% of a CPU over the window` where every live rank used TURN_SHARE or more
    (every rank seen waiting, yet each worked between the reads: the job moves), or None."""
    shares = _worked_shares(ranks)
    if len(shares) < 2:
        return None
    low, high = min(shares), max(shares)
    span = f"{high:.0%}" if round(low * 100) == round(high * 100) else f"{low * 100:.0f}-{high:.0%}"
    return f"each of its {len(shares)} ranks used {span} of a CPU between the reads"


#: GPU utilisation (%) of a rank spinning in a collective (NCCL's kernels busy-wait), and of an idle one
BUSY_UTIL = 90.0
IDLE_UTIL = 10.0


def _gpu_util(ctx: SnapshotView, procs: list[Process]) -> dict[int, float]:
    """pid -> the lowest utilisation its GPU showed over the samples, for ranks nvidia-smi maps to a GPU."""
    users = gpu_users(ctx.snapshot, frozenset(p.pid for p in procs))
    rows = [g for sample in ctx.snapshot.gpus.samples for g in sample]
    out: dict[int, float] = {}
    for u in users:
        utils = [g.utilization_gpu for g in rows if u.gpu_uuid and g.uuid == u.gpu_uuid]
        if utils and all(v is not None for v in utils):
            out[u.pid] = min(v for v in utils if v is not None)
    return out


def _peers(ctx: SnapshotView, p: Process, ranks: set[int]) -> int:
    """How many other ranks this one holds connections to (gloo's pairs, NCCL's bootstrap and proxy):
    the ranks here, and connections to no process visible here (the job's ranks on other hosts),
    those the other end closed among them (a rank there that exited: still the one it waits on)."""
    here, unseen = ctx.graph.connected(p.pid)
    return len(here & ranks) + unseen + len(ctx.graph.closed_by_peer(p.pid))


def _classify(
    ctx: SnapshotView,
    chains: Sequence[StalledChain],
    p: Process,
    ranks: set[int],
    util: float | None = None,
    spinning: bool = False,
) -> JobRank:
    rank = read_int(p.env_value("RANK") or "")
    local = read_int(p.env_value("LOCAL_RANK") or "")
    gpu = p.env_value("CUDA_VISIBLE_DEVICES")

    def r(state: RankState, why: str) -> JobRank:
        wait = next(ctx.graph.tcp_waits(p.pid), None) if state in ("elsewhere", "collective") else None
        waits_on = wait.socket.remote if wait is not None and wait.socket is not None else None
        # a fifth of a CPU over the window, not a tick: a waiting rank's watchdog thread ticks too (and a
        # ring's ranks on a loaded machine share their CPUs: half of one, `computes`, missed them)
        cpu, window = ctx.cpu_seconds(p.pid), ctx.snapshot.sample_window
        share = cpu / window if cpu is not None and window > 0 else None
        busy = share is not None and share >= BUSY_RANK_SHARE
        ends = ctx.graph.own_ends(p.pid)
        loops = in_gloo_collective(ctx, p) if state == "collective" else None
        return JobRank(
            rank, local, p.pid, state, why, gpu, p.comm, waits_on, ends, busy, share, in_gloo_collective=loops
        )

    if p.state in ("T", "t"):
        return r("stopped", f"{'traced and held by its tracer' if p.state == 't' else 'stopped'} ({p.state})")
    if p.state == "D":
        return r("uninterruptible", f"in uninterruptible sleep in {p.wchan}")
    if p.state in ("Z", "X"):
        return r("exited", "exited (a zombie its launcher has not reaped)")
    g = ctx.graph
    kind = g.kind(p)
    peers = _peers(ctx, p, ranks)
    moved = ctx.progress[p.pid].moved if ctx.two_samples and p.pid in ctx.progress else None
    if kind == "futex" and util is None and not untimed_futex(p.syscall) and ctx.computes(p.pid):
        # a rank on the CPU whose main thread was caught waiting for a lock its own threads share (a
        # Python rank's GIL, while its polling thread holds it): it computes, it does not wait
        return r("running", "runs (busy on its CPU; its main thread caught waiting on a lock of its own threads)")
    if kind == "futex" and timed_wait(p.syscall):
        # a wait with a deadline (`Event.wait(600)`): it wakes by itself, as a rank asleep on a timer does;
        # it was said to wait in a collective (found by a helper)
        return r("running", "waits with a deadline (a futex wait with a timeout): it wakes by itself")
    if kind == "futex" and (untimed_futex(p.syscall) or not isinstance(p.syscall, Syscall)) and peers:
        return r(
            "collective", f"waits in a collective (its main thread in a futex; {peers} connection(s) to other ranks)"
        )
    if p.state == "R" or kind is None:
        # NCCL's waiting ranks spin: the host thread polls, the GPU runs the collective's kernel at full
        # utilisation; the rank they wait for is the one whose GPU idles meanwhile
        if util is not None and util >= BUSY_UTIL:
            return r("collective", f"spins in a collective (its GPU at {util:.0f}% without end, its CPU busy)")
        if util is not None and util <= IDLE_UTIL and spinning:
            return r("elsewhere", f"runs on the CPU while its GPU idles ({util:.0f}%) and the other ranks' GPUs spin")
        # runnable in every sample, yet no CPU tick over the window: it waits for a CPU (a loaded
        # machine, a niced rank), not in a collective; two spinning ranks of which the scheduler ran
        # only one read as a straggler holding a waiting rank
        runnable = p.state == "R" and all(s.state == "R" for s in p.samples)
        if moved is False and peers and not runnable:
            return r("collective", "spins without progress, connected to the other ranks")
        if moved is False and runnable:
            return r("running", "runs (runnable in every sample: it waited for a CPU over the window)")
        return r("running", "runs (busy on its CPU)" if moved else "runs")
    # blocked on something: another rank (a collective by hand) or something else
    # a chain it waits in, not one it ends: the rank after it in a ring waits on it, and that wait
    # named it "elsewhere" on its neighbour's connection, the ring's holder (a CI run under load)
    chain = next((s for s in chains if p.pid in s.chain.pids[:-1] or s.chain.pids == (p.pid,)), None)
    if chain is not None and not set(chain.chain.pids[chain.chain.pids.index(p.pid) + 1 :]) & ranks:
        end = ctx.tree.by_pid.get(chain.chain.end)
        edge = chain.edge
        what = edge.what if edge is not None else f"{end.comm} ({end.pid})" if end else "a child"
        return r("elsewhere", f"waits on {what}, not on another rank")
    for edge in g.edges(p.pid):
        if edge.holders and set(edge.holders) <= ranks:
            return r("collective", f"waits on another rank ({edge.what})")
    edges = g.edges(p.pid)
    if edges:
        return r("elsewhere", f"waits on {edges[0].what}, not on another rank")
    if kind in ("fifo-open", "pipe-read", "pipe-write", "file-lock", "fuse", "nfs", "tty", "child", "stopped"):
        return r("elsewhere", f"waits in {p.wchan} ({kind}), not on another rank")
    if kind == "sleep":
        # asleep on a timer: it wakes by itself (a step's pause, a polling loop); a ring whose ranks nap
        # between steps read "every rank waits in a collective" on four hosts (found by a helper)
        return r("running", f"sleeps on a timer ({p.wchan}): it wakes by itself")
    if kind == "signal":
        # pause(), sigsuspend, sigwait: no collective waits so; a rank stuck in signal.pause() was said to
        # wait in a collective, and its job read HEALTHY (found by a helper)
        return r("elsewhere", f"waits for a signal in {p.wchan}, not on another rank")
    if peers:
        return r("collective", f"waits ({kind}) with {peers} connection(s) to other ranks")
    return r("elsewhere", f"waits in {p.wchan}, connected to no other rank")


#: The most local ranks a host is taken to run (LOCAL_WORLD_SIZE), and the most it names gone
MAX_LOCAL_WORLD = 1024
MAX_GONE = 16


def _gone(ctx: SnapshotView, procs: list[Process]) -> list[JobRank]:
    """Local ranks the job should have here (LOCAL_WORLD_SIZE) that no process is: killed, or
    OOM-killed (the kernel log names a victim of the ranks' program under their launcher). A gone
    local rank gets its global number where the survivors agree on this host's first rank (torchrun
    numbers a node's ranks RANK = first + LOCAL_RANK)."""
    worlds = {read_int(p.env_value("LOCAL_WORLD_SIZE") or "") or 0 for p in procs}
    local_world = max(worlds, default=0)
    if len(worlds) != 1 or local_world > MAX_LOCAL_WORLD:
        # ranks that disagree, or a size no host runs: a target's word, not a count to enumerate (a forged
        # LOCAL_WORLD_SIZE of 10^20 took the analysis' memory, one of 10^4 made 9,999 findings; found by a helper)
        return []
    seen = {read_int(p.env_value("LOCAL_RANK") or "") for p in procs}
    missing = [n for n in range(local_world) if n not in seen]
    launchers = {p.ppid for p in procs}
    comms = {p.comm for p in procs}
    # the ranks' program under their launcher whose environment the probe did not read (its bounds: 3,000
    # ranks a host read 2,127 "gone"): ranks too, as threaded as ranks are; not a helper of the launcher's
    # of the same name whose environment was read and names no rank (found by a helper)
    unread = [
        q
        for pid in launchers
        for q in ctx.tree.kids(pid)
        if q.comm in comms and q.state not in ("Z", "X") and not q.env and q.threads > 1
    ]
    if not missing or len(procs) + len(unread) >= local_world:
        return []
    missing = missing[:MAX_GONE]
    firsts = {
        g - n
        for p in procs
        if (g := read_int(p.env_value("RANK") or "")) is not None
        and (n := read_int(p.env_value("LOCAL_RANK") or "")) is not None
    }
    first = next(iter(firsts)) if len(firsts) == 1 else None
    paired = _paired(ctx, procs)
    oom = [
        m for m in ctx.oom_matches if m.relevant and m.event.comm in comms and (m.loser in launchers or m.loser is None)
    ]
    # a rank that exited while its launcher waits on another child (torchrun's agent polls; a launcher
    # that waits in rank order) is a zombie under it: its environment is gone with it
    zombies = [q for q in ctx.snapshot.processes if q.state == "Z" and q.ppid in launchers and q.comm in comms]
    out = []
    for i, n in enumerate(missing):
        if i >= len(oom) and len(missing) - len(oom) == 1 and len(zombies) == 1:
            z = zombies[0]
            launcher = ctx.tree.by_pid.get(z.ppid)
            why = f"gone: exited (pid {z.pid}, {z.comm}, a zombie its launcher" + (
                f" {launcher.comm} ({launcher.pid}) has not reaped)" if launcher is not None else " has not reaped)"
            )
        elif i < len(oom):
            e, loser = oom[i].event, oom[i].loser
            under = ctx.tree.by_pid.get(loser) if loser is not None else None
            when = utc_text(e.wall_time, "%H:%M:%S UTC", "") if e.wall_time else ""
            why = (
                f"gone: OOM-killed{' at ' + when if when else ''} (host pid {e.pid}, {e.comm}"
                + (f", a child of launcher {under.comm} ({under.pid})" if under is not None else "")
                + ")"
            )
        elif paired:
            why = "gone: no process is this local rank any more (killed, or exited)"
        else:
            # nothing says it ever ran: no zombie, no OOM kill, and the ranks here wait in their rendezvous
            # (ranks launched by hand, one not started yet, read "gone: killed, or exited", STALLED at once;
            # found by a helper on real PyTorch)
            why = (
                "missing: no process is this local rank, and the ranks here have not paired up past their "
                "rendezvous: it has not started, or it exited before joining"
            )
            out.append(JobRank(first + n if first is not None and first >= 0 else None, n, None, "missing", why))
            continue
        out.append(JobRank(first + n if first is not None and first >= 0 else None, n, None, "gone", why))
    return out


def _goes_on(ctx: SnapshotView, chains: Sequence[StalledChain], c: JobRank) -> str | None:
    """Why the holding rank may go on by itself, in words, or None where its state proves it will not
    (docs/evidence.md): what it waits on moved over the window, or sleeps on a timer; or its
    uninterruptible sleep is not shown to last (a block-I/O wait, or it moved). A rank "running" on a
    timer is no straggler that computes: its words say so."""
    p = ctx.tree.by_pid.get(c.pid) if c.pid is not None else None
    if p is None:
        return None
    if c.state == "running" and (ctx.graph.kind(p) == "sleep" or timed_wait(p.syscall)):
        return "it waits on a timer, and goes on when that is up"  # not computing: no straggler
    if not ctx.two_samples or c.state not in HOLDING:
        return None
    chain = next((s for s in chains if p.pid in s.chain.pids), None)
    if c.state == "elsewhere":
        if chain is not None and chain.proof is None and chain.dead_end is None and chain.idle is False:
            return "what it waits on moved over the window: slow, not shown stuck"
        if ctx.wakes_by_itself(p.pid):
            return "it waits on a timer (its own, or a child's), and goes on when that is up"
    if c.state == "uninterruptible":  # as d-state proves any process stuck in D
        w = family(p.wchan) if isinstance(p.wchan, str) else ""
        if not ctx.in_d_throughout(p):
            return "it was not in uninterruptible sleep throughout the window, or it moved: slow, not shown stuck"
        if w in BLOCK_IO_WAITS and not ctx.hung_tasks(p.pid):
            return f"it waits on its disk ({w}): a device slower than a request a window looks the same as a hung one"
    return None


def _paired(ctx: SnapshotView, procs: list[Process]) -> bool:
    """Two or more ranks here hold connections to two or more other ranks: past the rendezvous, where
    only the store's holder (rank 0) is connected to more than one (each other rank to the store)."""
    pids = {p.pid for p in procs}
    return sum(1 for p in procs if _peers(ctx, p, pids) >= 2) >= 2


def straggler_hint(c: JobRank, stack: str) -> str:
    """What to do about a rank that computes while the others wait; `stack`: how to see where it is."""
    if c.goes_on:  # asleep on a timer, or waiting with a deadline: it does not compute
        return f"{c.name} {c.goes_on}: diagnose again; if it keeps the others waiting, see where it is ({stack})"
    return (
        f"{c.name} still computes while the others wait: a straggler (uneven data, a slow GPU or node) or a rank "
        f"that took another code path; see where it is ({stack})"
    )


def holder_words(job: DistributedJob, c: JobRank) -> str:
    """The rank that holds the job, in words: `rank 2 (pid 4, python) of job J waits on …`, or `rank 1
    of 3 in job J is gone: OOM-killed at …` (a gone rank numbered against the world size)."""
    if c.state in NO_PROCESS:
        of_world = f" of {job.world_size}" if c.rank is not None and job.world_size else ""
        return f"{c.name}{of_world} in job {job.words} is {c.why}{goes_on_words(c)}"
    return f"{c.label} of job {job.words} {c.why}{goes_on_words(c)}"


def goes_on_words(c: JobRank) -> str:
    """`; why it may go on by itself`, where it holds the others (on every host of a sweep that names it);
    empty otherwise (a straggler's own why says it already)."""
    return f"; {c.goes_on}" if c.goes_on and c.state in HOLDING else ""
