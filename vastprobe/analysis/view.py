"""One snapshot as every analysis reads it: the snapshot, the job's scope, the options, and the
views derived from them once (the process tree, the wait-for graph, progress between samples, GPU
holders, OOM matches, log health, the target's clock).

The analyses that build on these (stalls, ranks) take a view and return their results; the rules'
`Context` (analysis.context) adds those results on top. This keeps the layering one way: the
analyses never reach up to the rules for the object they are given.
"""

from __future__ import annotations

from functools import cached_property

from vastprobe.analysis.gpu import gpu_expected, gpu_holders, gpu_users
from vastprobe.analysis.logs import LogHealth, found_logs, log_health
from vastprobe.analysis.oom import OomMatch, job_is_bounded, match_oom_kills
from vastprobe.analysis.progress import Progress, progress
from vastprobe.analysis.tree import ProcessTree
from vastprobe.analysis.waitgraph.edges import (
    FUTEX_PRIVATE_FLAG,
    joined_tid,
    mutex_wait,
    opens_for_reading,
    untimed_futex,
)
from vastprobe.analysis.waitgraph.graph import WaitGraph
from vastprobe.analysis.wchan_families import timed_wait
from vastprobe.model import HostSnapshot, KernelEvent, LogFile, Process, Syscall, Unavailable, available
from vastprobe.probe.sources import PROC
from vastprobe.rule_options import RuleOptions

#: The share of one CPU over the sample window at which a process counts as computing.
BUSY_CPU_SHARE = 0.5
#: The program that throttles a process by stopping and continuing it (cpulimit)
THROTTLER = "cpulimit"


def throttles(limiter: Process, p: Process, parent: Process | None) -> bool:
    """Whether a running cpulimit throttles `p`: its target by PID (`-p N`, `-pN`, `--pid=N`), by
    program (`-e NAME`, `-P PATH`), or the program it launched (`cpulimit -l 10 [-f] -- CMD`: its parent
    with -f, beside it without); with `-m` (it watches the target's forks) the target's children too.
    Only its target: a process a `cpulimit -f` job's bash stopped is not continued by it (found by a
    helper, a real stop read HEALTHY)."""
    args = list(limiter.cmdline)
    launched = args[args.index("--") + 1 :] if "--" in args else []
    opts = args[: args.index("--")] if "--" in args else args
    watches_forks = any(a in ("-m", "--monitor-forks") for a in opts)

    def targets(q: Process) -> bool:
        pid = str(q.pid)
        prog = q.cmdline[0] if q.cmdline else ""
        for i, a in enumerate(opts):
            nxt = opts[i + 1] if i + 1 < len(opts) else ""
            if (a in ("-p", "--pid") and nxt == pid) or a in (f"-p{pid}", f"--pid={pid}"):
                return True
            if (a in ("-e", "--exe") and nxt == q.comm) or a in (f"-e{q.comm}", f"--exe={q.comm}"):
                return True
            if prog and ((a in ("-P", "--path") and nxt == prog) or a in (f"-P{prog}", f"--path={prog}")):
                return True
        return bool(launched) and list(q.cmdline[: len(launched)]) == launched

    # a copy of the launched program forked and not yet exec'd (bash's `sleep &` stopped at once) runs
    # its parent's command line: the parent is the target, not it
    copy = parent is not None and parent.cmdline == p.cmdline
    return (targets(p) and not copy) or (watches_forks and parent is not None and targets(parent))


#: What a thread may wait on beside a main thread asleep on a timer, for the process to wake by itself:
#: the timer, or I/O it idles on (not a lock, a D state or a stop: those may be what holds the job)
_IDLE_BESIDE_A_TIMER = frozenset({"sleep", "pipe-read", "socket-read", "accept", "event-loop", "tty", "signal"})


class SnapshotView:
    """One snapshot with the derived views every analysis needs, computed once."""

    def __init__(
        self, snapshot: HostSnapshot, scope: tuple[int, ...], options: RuleOptions, tree: ProcessTree | None = None
    ) -> None:
        self.snapshot = snapshot
        self.scope = frozenset(scope)
        self.options = options
        self.tree = tree or ProcessTree(snapshot)

    @cached_property
    def graph(self) -> WaitGraph:
        return WaitGraph(self.snapshot, self.tree)

    @cached_property
    def samples_taken(self) -> int:
        """Samples the probe took of every process: 1 when the second sample's section was cut (a
        process missing from it may simply not have been read)."""
        probe = self.snapshot.probe
        return 1 if PROC.section(1) in probe.truncated_sections else len(probe.sample_uptimes)

    def gone_by_second_sample(self, p: Process) -> bool:
        """Seen by the first sample, not by a complete second one: exited (or its PID reused)."""
        return self.samples_taken >= 2 and len(p.samples) < 2

    def in_d_throughout(self, p: Process) -> bool:
        """In uninterruptible sleep (D) at every read, with no CPU tick or byte of I/O between them: not a
        process doing heavy I/O that passes through D (d-state's finding, a rank's D state)."""
        if not p.samples or any(s.state != "D" for s in p.samples):
            return False
        pr = self.progress.get(p.pid)
        return not (pr is not None and pr.sampled and (pr.cpu_ticks or pr.io_bytes))

    def hung_tasks(self, pid: int) -> list[KernelEvent]:
        """The kernel log's hung-task reports for `pid`: D for 120 s or more."""
        return [e for e in self.snapshot.kernel_log.events if e.kind == "hung-task" and e.pid == pid]

    @cached_property
    def progress(self) -> dict[int, Progress]:
        return {p.pid: progress(p, self.samples_taken) for p in self.snapshot.processes}

    @cached_property
    def bounded(self) -> bool:
        """Whether the scope is the job rather than a whole host (analysis.oom.job_is_bounded)."""
        return job_is_bounded(self.snapshot, self.options.explicit_scope)

    @cached_property
    def gpu_holders(self) -> list[int]:
        return gpu_holders(self.snapshot, self.scope)

    @cached_property
    def gpus_serve_requests(self) -> bool:
        """Every GPU user in scope waits for requests (waits_for_requests): GPUs idle by design, asked
        once per chain by stall_evidence."""
        users = [u.pid for u in gpu_users(self.snapshot, self.scope)]
        return bool(users) and all(self.waits_for_requests(u) for u in users)

    @cached_property
    def gpu_expected(self) -> tuple[bool, str]:
        """Whether the job should be using a GPU, and why (asked once per chain by stall_evidence)."""
        return gpu_expected(self.snapshot, self.scope, self.options.expect_gpu)

    @cached_property
    def oom_matches(self) -> list[OomMatch]:
        return match_oom_kills(self.snapshot, self.scope, self.graph, self.options.explicit_scope)

    @cached_property
    def log_healths(self) -> list[LogHealth]:
        logs = (*self.snapshot.logs, *self.found_logs)
        return [log_health(log, self.now, self.options.stale_after, self.snapshot.processes) for log in logs]

    @cached_property
    def found_logs(self) -> tuple[LogFile, ...]:
        """Where --pid/--match named the job, the files its processes hold open write-only (their
        stdout and stderr, or named like logs) are its logs: judged as given ones, said to be found.
        Without a named job they are not: a quiet daemon is no stall."""
        return found_logs(self.snapshot, self.scope) if self.options.explicit_scope else ()

    @property
    def two_samples(self) -> bool:
        return len(self.snapshot.probe.sample_uptimes) >= 2

    def cpu_seconds(self, pid: int) -> float | None:
        """CPU seconds `pid` used between the samples; None without two samples of it."""
        pr = self.progress.get(pid) if self.two_samples else None
        return pr.cpu_ticks / self.snapshot.host.clk_tck if pr is not None and pr.sampled else None

    def computes(self, pid: int) -> bool:
        """It used BUSY_CPU_SHARE of a CPU or more over the window, or was runnable in every sample and
        got the CPU between them (a loaded machine shares its CPUs: a busy loop got 42% of one beside
        a test suite): it computes (a rank on its CPU, a job whose log is quiet while it works), it
        does not wait."""
        cpu, window = self.cpu_seconds(pid), self.snapshot.sample_window
        if cpu is None or window <= 0:
            return False
        if cpu >= BUSY_CPU_SHARE * window:
            return True
        return cpu > 0 and self.runnable_throughout(pid)

    def runnable_throughout(self, pid: int) -> bool:
        """Runnable (R) at every read: on its CPU, or waiting for one, never blocked."""
        p = self.tree.by_pid.get(pid)
        return p is not None and bool(p.samples) and all(s.state == "R" for s in p.samples)

    def woke_at_work(self, pid: int) -> bool:
        """Its main thread was scheduled between the samples (a context switch), and that is the process
        at work: it has one thread, or its others only sleep on timers or idle on I/O (on_timer). A server
        whose main thread ticks in a `time.sleep` loop beside a handler thread locked for ever woke
        without working, and its client behind a quiet log read DEGRADED (found by the regression hunt)."""
        pr = self.progress.get(pid) if self.two_samples else None
        p = self.tree.by_pid.get(pid)
        if pr is None or not pr.sampled or not pr.ctxt_switches or p is None:
            return False
        return p.threads == 1 or self.on_timer(pid)

    def on_timer(self, pid: int) -> bool:
        """Asleep on a timer (nanosleep) in every sample, with every thread read: it wakes by itself
        when its time is up. Its main thread so, and each other one asleep on a timer or idle on I/O
        (a pipe, a socket, a poll: a log pump, a subprocess's reader) counts too: a server whose handler
        sleeps 4 s beside such a thread read STALLED, its "proof" line naming the nanosleep (found by a
        helper). A thread waiting on a lock, in D state or stopped may be what the job waits on (two
        threads deadlocked beside a sleeping main one), so then it is not; nor two or more waiting on
        I/O only this process can end (pipes only it writes)."""
        p = self.tree.by_pid.get(pid)
        if p is None or p.state != "S" or any(s.state != "S" for s in p.samples):
            return False
        tasks = self.graph.all_tasks(p)
        if tasks is None:
            return False
        kinds = {t.tid: self.graph.task_kind(p, t) for t in tasks}
        # a wait with a deadline is a timer too (a futex or an event loop's wait with a timeout)
        timed = {t.tid for t in tasks if t.state == "S" and timed_wait(t.syscall)}
        others = [t for t in tasks if t.tid is not None]
        if (kinds.get(None) != "sleep" and None not in timed) or not all(
            (kinds[t.tid] in _IDLE_BESIDE_A_TIMER or t.tid in timed) and t.state == "S" for t in others
        ):
            return False
        # threads waiting on what only this process holds: one is a wake-up channel (`signal.set_wakeup_fd`,
        # an event loop's self-pipe) the main thread writes when it wakes; two or more, a cycle among them
        # (two workers each reading a pipe the other writes, under a main loop of `time.sleep(1)`, read
        # HEALTHY across hosts; found by a helper)
        return sum(1 for t in others if self.graph.waits_on_itself(p, t)) < 2

    def on_timer_beside_unread(self, pid: int) -> bool:
        """Its main thread asleep on a timer in every sample, some of its other threads past the probe's
        bound (at most 192 processes' threads, the job's first, and a total per host): on_timer cannot
        say, and it may well wake by itself. A server whose handler sleeps 2 s beside an idle pump thread
        read STALLED, "accepted none", while a full test suite's processes took the bound (a flake)."""
        p = self.tree.by_pid.get(pid)
        if p is None or p.threads < 2 or p.state != "S" or any(s.state != "S" for s in p.samples):
            return False
        if self.graph.all_tasks(p) is not None:
            return False  # every thread read: on_timer's answer stands
        main = self.graph.tasks(p)[0]
        return self.graph.task_kind(p, main) == "sleep" or (main.state == "S" and timed_wait(main.syscall))

    def flow_on_deadline(self, pid: int) -> bool:
        """Its flow waits with a deadline: the main thread, or the thread it joins (Java's launcher runs
        main() in a thread of its own and joins it), sleeps on a timer or waits with a timeout, every
        thread read asleep (those past the probe's bound unknown). What it does next comes when that
        deadline passes, whatever its other threads wait on (a runtime's idle pools: Node's platform
        workers, a JVM's service threads): a quiet log beside it is no stall. Weaker than on_timer,
        which a holder's proof needs (threads deadlocked beside a sleeping main one). A Node
        `setInterval` job and a Java `Thread.sleep` job, each logging once an hour, read STALLED on
        their quiet logs (found by a helper)."""
        p = self.tree.by_pid.get(pid)
        if p is None or p.state != "S" or any(s.state != "S" for s in p.samples):
            return False
        # past the probe's bound (64 threads a process, 2048 a host) the threads read are judged: a trainer
        # of 80 threads asleep between its steps read STALLED on its quiet log, no-progress an error, as
        # nothing said it wakes by itself. An unread thread cannot prove it will not
        tasks = self.graph.all_tasks(p) or self.graph.tasks(p)
        if any(t.state != "S" or mutex_wait(t.syscall) for t in tasks):
            # a thread on a contended mutex may be half of a deadlock the flow polls for (two workers
            # deadlocked while main joins a thread re-checking every second read DEGRADED; found by a helper)
            return False
        flow = tasks[0]
        joined = joined_tid(flow.syscall)
        if joined is not None:
            flow = next((t for t in tasks[1:] if t.tid == joined), flow)
        return timed_wait(flow.syscall) or self.graph.task_kind(p, flow) == "sleep"

    def keeps_alive(self, pid: int) -> bool:
        """`sleep infinity` asleep in every sample: a keep-alive, idle by design (what a container's
        entrypoint ends with to stay up, a placeholder a script waits on). Beside a quiet log it proves
        no stall of the job: an entrypoint whose worker logged elsewhere every 5 s, and `sleep infinity
        & wait`, read STALLED, exit 1 (found by a helper). Not a timer: a lock held by one is held for
        ever, and its waiter is stalled."""
        p = self.tree.by_pid.get(pid)
        return (
            p is not None
            and p.comm == "sleep"
            and len(p.cmdline) > 1
            and all(a.lower() in ("inf", "infinity") for a in p.cmdline[1:])
            and bool(p.samples)
            and all(s.state == "S" for s in p.samples)
        )

    def timer_sleepers(self, pids: tuple[int, ...], flow: bool = False) -> tuple[int, ...]:
        """The processes of a job asleep on timers, where that is all the job waits on: each of `pids`
        sleeps on a timer or waits for its children. Such a job wakes by itself (a polling loop's
        pause, a back-off, `time.sleep(3600)`): neither a quiet log beside it nor its stillness over the
        window proves a stall. () otherwise. `flow`: a process whose flow waits with a deadline counts
        (flow_on_deadline), and a keep-alive (keeps_alive), for a quiet log's judgement; not for a
        holder's proof."""
        sleepers = []
        for pid in pids:
            p = self.tree.by_pid.get(pid)
            if p is None or p.state == "Z":
                continue  # an exited child waits on nothing: its parent reaps it when its own wait ends
            if self.on_timer(pid) or (flow and (self.flow_on_deadline(pid) or self.keeps_alive(pid))):
                sleepers.append(pid)
            elif not (p.state == "S" and self.graph.waits_for_children(p)):
                return ()
        return tuple(sleepers)

    def waits_end_on_timers(self, pids: tuple[int, ...]) -> tuple[int, ...]:
        """The sleepers of a job each of whose processes sleeps on a timer (or its flow waits with a
        deadline), waits for its children, or waits on others of the job that end so (a reader of a pipe
        whose writer does): `(while :; do check; sleep 400; done) | consumer >> log` wakes by itself, and
        its quiet log read STALLED, the consumer reading a pipe (found by a helper). A wait on anything
        outside the job, or a cycle among the job's waiters, gives (). Each process's waits are firm or
        inferred edges; any holder that ends its wait ends it."""
        job = set(pids)
        # a keep-alive idles by design, and so does a parent that waits for it; it never ends a wait on
        # what it holds, though (a pipe the orphan `sleep infinity` keeps open: `$(sleep infinity & echo)`)
        kept = {pid for pid in pids if self.keeps_alive(pid)}
        sleepers = [pid for pid in pids if pid in kept or self.on_timer(pid) or self.flow_on_deadline(pid)]
        # an exited child (killed, not reaped yet: its parent waits on another first) ends nothing it held
        exited = {pid for pid in pids if (p := self.tree.by_pid.get(pid)) is not None and p.state == "Z"}
        good = (set(sleepers) - kept) | exited
        rest = [pid for pid in pids if pid not in good and pid not in kept]
        changed = True
        while rest and changed:
            changed = False
            for pid in list(rest):
                p = self.tree.by_pid.get(pid)
                if p is None or p.state != "S":
                    return ()
                ending = good
                if self.graph.waits_for_children(p):
                    ends = [{k.pid for k in self.tree.kids(pid)} & job]
                    ending = good | kept
                elif (family := self._shares_a_futex_with(p)) and not self.graph.edges(pid):
                    ends = [family & job]
                else:
                    ends = [set(e.holders) for e in self.graph.edges(pid)]
                if not ends or any(not e or not e <= job for e in ends):
                    return ()  # it waits on nothing followed, or on what is not the job's
                if all(e & ending for e in ends):
                    good.add(pid)
                    rest.remove(pid)
                    changed = True
        return tuple(sleepers) if not rest else ()

    def _shares_a_futex_with(self, p: Process) -> set[int]:
        """Its parent and siblings where `p` waits on a shared futex with no timeout (a multiprocessing
        Lock or Semaphore in memory they share: a Pool's idle worker waits on the task queue's lock
        while a sibling holds it, reading the task pipe); else nothing."""
        sc = p.syscall
        if not untimed_futex(sc) or not isinstance(sc, Syscall) or sc.args[1] & FUTEX_PRIVATE_FLAG:
            return set()
        return self._family(p)

    def _family(self, p: Process) -> set[int]:
        """Its parent and its siblings (none without a parent here)."""
        parent = self.tree.by_pid.get(p.ppid)
        if parent is None:
            return set()
        return {parent.pid, *(k.pid for k in self.tree.kids(parent.pid))} - {p.pid}

    def wake_by_themselves(self, pids: tuple[int, ...]) -> bool:
        """Some processes, every one waking by itself (wakes_by_itself): what waits on them goes on."""
        return bool(pids) and all(self.wakes_by_itself(pid) for pid in pids)

    def wakes_by_itself(self, pid: int) -> bool:
        """Asleep on a timer, or waiting on children that are (`sleep 3` between a script's steps): it
        moves again when the time is up, however still it was over the window."""
        below = tuple(d.pid for d in self.tree.descendants(pid))
        if self.timer_sleepers((pid, *below)):
            return True  # each asleep on a timer, or waiting for a child that is
        # asleep on a timer itself, with children that wait on it alone (the reader of a pipe it feeds):
        # a child stopped, or stuck on what only it holds, keeps the holder's work from ever ending (a cron
        # run polling its stopped child under its flock read DEGRADED; found by a helper)
        return self.on_timer(pid) and all(self._waits_on_the_family(q, {pid, *below}) for q in below)

    def stopped_throughout(self, p: Process) -> bool:
        """Stopped (T) or traced (t) in every sample, and it did not run between them: a tracer that
        steps it (strace) leaves it in t at most reads while its CPU and I/O move on, and a job under
        `strace -f` read STALLED, "stopped (t)" (found by a helper)."""
        if not p.samples or any(s.state not in ("T", "t") for s in p.samples):
            return False
        pr = self.progress.get(p.pid) if self.two_samples else None
        if pr is None and self.throttled(p):
            return False
        return pr is None or not pr.sampled or not (pr.cpu_ticks or pr.io_bytes)

    def throttled(self, p: Process) -> bool:
        """A throttler that stops and continues it (cpulimit: SIGSTOP and SIGCONT ten times a second) is
        running: one read of T proves nothing. A job under `cpulimit -l 10` read STALLED, "stopped (T)",
        7 of 7 runs at --sample 0, its log growing (found by a helper)."""
        return any(
            q.comm == THROTTLER and q.state not in ("T", "t") and throttles(q, p, self.tree.by_pid.get(p.ppid))
            for q in self.snapshot.processes
        )

    def stopped_below(self, pid: int) -> Process | None:
        """A process stopped in every sample under `pid`, where `pid` polls on a timer and so is held
        (wakes_by_itself is False): a cron run that polls its stopped step under its flock. Its wakes to
        poll are movement, and dropped the finding whenever one fell in the window (a test's flake); on a
        loaded machine it is caught runnable as it wakes, so a poller (asleep on a timer or caught awake
        at the first read, asleep or runnable at each, not computing) counts (a CI flake too)."""
        p = self.tree.by_pid.get(pid)
        if p is None or self.computes(pid) or self.wakes_by_itself(pid):
            return None
        polls = self.on_timer(pid) or (
            self.graph.kind(p) in ("sleep", None) and bool(p.samples) and all(s.state in ("S", "R") for s in p.samples)
        )
        if not polls:
            return None
        return next(
            (d for d in self.tree.descendants(pid) if self.stopped_throughout(d)),
            None,
        )

    def _waits_on_the_family(self, pid: int, family: set[int]) -> bool:
        """Working (it moved over the window), asleep on a timer, waiting for a child, or waiting on what
        another of `family` holds."""
        q = self.tree.by_pid.get(pid)
        if q is None:
            return False
        pr = self.progress.get(pid)
        if pr is not None and pr.sampled and pr.moved and q.state not in ("T", "t"):
            return True  # a child at work: the holder's work goes on
        if q.state != "S":
            return False
        if self.on_timer(pid) or self.graph.waits_for_children(q):
            return True
        edges = self.graph.edges(pid)
        return bool(edges) and all(e.holders and set(e.holders) <= family - {pid} for e in edges)

    def serving(self, pid: int) -> bool:
        """A server waiting for requests: in accept(), or in an event loop over a listening socket; or
        its main thread joins the thread that is (the `java` launcher joins the JVM's main thread, which
        accepts in a task of its own: an idle Java server read STALLED, exit 1, once its log was 5
        minutes old; found by a helper). Only the joined thread counts: a job whose other thread serves
        (a rank's store, a notebook's kernel) does its work on the main one. A FIFO's reader blocked
        opening it waits for its next submitter the same way (a spool worker's `read cmd < queue.fifo`
        made the whole host DEGRADED, and STALLED with its log named; found by a helper)."""
        p = self.tree.by_pid.get(pid)
        if p is None:
            return False
        kind = self.graph.kind(p)
        if kind == "fifo-open":
            return opens_for_reading(p.syscall) is True
        joined = joined_tid(p.syscall) if kind == "futex" else None
        task = next((t for t in self.graph.tasks(p) if joined is not None and t.tid == joined), None)
        if task is not None:
            kind = self.graph.task_kind(p, task)
        return kind == "accept" or (kind == "event-loop" and self.graph.listens(p))

    def waits_for_requests(self, pid: int) -> bool:
        """The GPU's user waits for requests (in accept(), or an event loop over a listener), or it is a
        worker of such a server (its parent, the same program) waiting on I/O for its next piece of work
        (an inference server's engine polling the API process). Not a process a server forked that waits
        on anything else: a hung trainer under a notebook-kernel-like server, in a lock wait, read HEALTHY
        in a first version (found by a helper). A client waiting on the server is no request in flight as
        far as /proc shows: an idle keep-alive connection looks the same (docs/evidence.md), and an idle
        server with one read STALLED (found by a helper)."""
        p = self.tree.by_pid.get(pid)
        if p is None or p.state != "S":
            return False
        if self.serving(pid):
            return True
        parent = self.tree.by_pid.get(p.ppid)
        if parent is None or parent.comm != p.comm or not self.serving(parent.pid):
            return False
        kind = self.graph.kind(p)
        if kind in ("event-loop", "socket-read", "accept"):
            return True
        # a pool's worker waiting for its next task: reading the pipe its server (or a sibling) writes,
        # or on the lock it shares with its siblings (a ProcessPoolExecutor behind an idle accept() read
        # STALLED on its quiet log, "python3 (worker) waits on python3, which makes no progress"; found
        # by a helper)
        family = self._family(p)
        edges = self.graph.edges(pid)
        if kind == "pipe-read":
            return bool(edges) and all(e.kind == "pipe" and e.holders and set(e.holders) <= family for e in edges)
        return kind == "futex" and not edges and bool(self._shares_a_futex_with(p))

    def quiet_server(self, pid: int) -> bool:
        """A server with no client waiting: it waits for requests (serving, or a worker of one), or it is
        a pre-fork master holding the listeners and waiting on such workers (nginx's), and no listener
        has a connection queued. Its log is quiet because nobody asks: an idle nginx read STALLED,
        exit 1, once its access log was 5 minutes old (found by a helper)."""
        p = self.tree.by_pid.get(pid)
        if p is None or self._unasked(p, self.serving(pid) or self.waits_for_requests(pid)):
            return p is not None
        kids = self.graph.jobs(p) if self.graph.kind(p) == "child" and self.graph.listens(p) else []
        return (
            self._unasked(p, True)
            and bool(kids)
            and all(self._unasked(k, self.serving(k.pid) or self.waits_for_requests(k.pid)) for k in kids)
        )

    def watches_files(self, pid: int) -> bool:
        """Asleep in a poll, or a read of an inotify instance it holds, and on nothing vastprobe follows:
        it waits for a file to change (`tail -F`, a log shipper, inotifywait), which no process owes it."""
        p = self.tree.by_pid.get(pid)
        if p is None or p.state != "S" or isinstance(p.fds, Unavailable) or self.graph.edges(pid):
            return False
        if not any(e.target == "anon_inode:inotify" for e in p.fds):
            return False
        entry = self.graph.waited_entry(p)
        return self.graph.kind(p) == "event-loop" or (entry is not None and entry.target == "anon_inode:inotify")

    def waits_on_watchers(self, pid: int, seen: frozenset[int] = frozenset()) -> bool:
        """`pid` watches files, or all it waits on does: a pipe from `tail -F`, a child that reads one.
        `tail -F app.log | grep ERROR >> alerts.log` read STALLED, exit 1, "tail makes no progress",
        while no ERROR came (found by a helper)."""
        if self.watches_files(pid):
            return True
        if pid in seen or len(seen) >= 16:
            return False
        edges = self.graph.edges(pid)
        return bool(edges) and all(
            e.holders and all(self.waits_on_watchers(h, seen | {pid}) for h in e.holders) for e in edges
        )

    def serves_in_a_thread(self, pid: int) -> bool:
        """A thread of it waits for requests (in accept(), or an event loop over a listening socket it
        holds) and none is queued, whatever its main thread does: a Python service whose main thread
        joins its listener thread (Thread.join is a lock wait, not pthread_join) read STALLED, exit 1, on
        its quiet log (found by a helper). Weaker than serving: a job whose side thread serves (a rank's
        store) may be stuck on its main one, so a quiet log beside it is a warning, never nothing. Not
        with a thread on a contended mutex (half of a deadlock, as flow_on_deadline has it), nor where
        the main thread joins (pthread_join) a thread that does not serve."""
        p = self.tree.by_pid.get(pid)
        if p is None or p.state != "S" or not self.graph.listens(p):
            return False
        tasks = self.graph.tasks(p)
        if any(mutex_wait(t.syscall) for t in tasks):
            return False
        kinds = {t.tid: self.graph.task_kind(p, t) for t in tasks}
        joined = joined_tid(p.syscall)
        if joined is not None and kinds.get(joined) not in ("accept", "event-loop"):
            return False
        return any(k in ("accept", "event-loop") for k in kinds.values()) and self._unasked(p, True)

    def waiting_clients(self, pid: int) -> tuple[int, ...]:
        """The processes here waiting on a connection `pid` holds (their wait edge names it)."""
        peers, _unseen = self.graph.connected(pid)
        return tuple(
            sorted(
                c
                for c in peers
                if any(e.kind in ("tcp", "unix-socket") and pid in e.holders for e in self.graph.edges(c))
            )
        )

    def _unasked(self, p: Process, waits: bool) -> bool:
        """Asleep, waiting for requests (`waits`), and no connection queued on a listener it holds."""
        return waits and p.state == "S" and not any(s.recv_queue for s in self.graph.listeners(p))

    def in_scope(self) -> list[Process]:
        return [p for p in self.snapshot.processes if p.pid in self.scope]

    @cached_property
    def now(self) -> float | None:
        """The target's wall clock at the last sample (its own clock: log mtimes use it)."""
        btime = available(self.snapshot.host.btime)
        ups = self.snapshot.probe.sample_uptimes
        if btime is None or not ups:
            return None
        return btime + ups[-1]

    def start_wall(self, p: Process) -> float | None:
        btime = available(self.snapshot.host.btime)
        if btime is None:
            return None
        return btime + p.starttime / self.snapshot.host.clk_tck

    def proc_label(self, pid: int) -> str:
        p = self.tree.by_pid.get(pid)
        return f"{pid} ({p.comm})" if p else str(pid)
