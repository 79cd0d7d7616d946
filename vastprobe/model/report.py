"""What vastprobe says about a host: findings and their evidence, incidents grouped by cause, the
key instants, the odd host out of a group, the distributed jobs and the ranks holding them, and the
report that carries them all with the snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vastprobe.model.host import HostSnapshot

Severity = Literal["info", "warning", "error", "critical"]
#: Severities in rising order (worst last): one order for every layer that sorts findings.
SEVERITY_ORDER: dict[str, int] = {"info": 0, "warning": 1, "error": 2, "critical": 3}
Status = Literal["ok", "unreachable", "auth-failed", "host-key-rejected", "timeout", "probe-error", "skipped"]
Verdict = Literal["healthy", "degraded", "stalled", "unknown"]
#: Ends the summary of a finding that one sample (--sample 0) made a note or a warning: what it saw
#: once, a second sample would confirm or clear.
ONE_SAMPLE = " (seen in one sample)"


@dataclass(frozen=True)
class Evidence:
    source: str
    detail: str


@dataclass(frozen=True)
class RemotePeer:
    """A TCP connection a process here waits on whose other end no process visible here holds: a
    sweep looks for that end among its other hosts (report/connection_joins.py)."""

    pid: int  # the waiter, on this host
    comm: str
    local: str  # "10.0.0.4:51234"
    remote: str  # "10.0.0.5:6379"
    listener: bool = False  # the connection sits in a listener's accept queue there (no socket holds it yet)
    #: a server's session here that holds what others wait for (a lock) until its client, at the other
    #: end, ends its transaction: that client is what holds them (db-lock-wait's holder from another host)
    client_holds: bool = False


@dataclass(frozen=True)
class ServedSocket:
    """A TCP socket a process here serves on: a listener, or a connection accepted on one of this
    host's listening ports; or any connection whose holder is stopped or in D state, or that holds
    bytes nobody read; then the connections processes here opened (clients' ends). A sweep finds here
    the other end of another host's wait."""

    local: str  # "10.0.0.5:6379"
    remote: str  # "" for a listener
    pid: int
    comm: str
    state: str  # its holder's process state (T: stopped)
    below: tuple[int, ...] = ()  # the holder's descendants here (sshd's session: the command it runs), at most 32
    queued: int = 0  # a listener: connections in its accept queue; an accepted connection: bytes unread in it
    idle: bool | None = None  # its holder did nothing over the window (None: one sample)
    # its holder worked over the window, or a process under it worked or sleeps on a timer (an ssh
    # session's command), in words: whoever waits on the connection is not held by this side ("": none
    # did, or one sample). A holder asleep on a timer itself holds its client: it is idle
    moving: str = ""
    #: the holder relays (socat, `ssh -L`, a TCP proxy): the connections it opened, (local, remote), at
    #: most 8: where a sweep follows the wait on to another host
    relays_to: tuple[tuple[str, str], ...] = ()
    #: a connection a process here opened (its local port is none this host listens on): a client's end,
    #: where a server's session on another host that holds others until its client acts leads
    opened: bool = False
    #: its holder sleeps on a timer (or waits on children that do): it moves again by itself, so its
    #: stillness over the window proves nothing (docs/evidence.md). Asked only where `queued` and
    #: `idle` (the one place it is read): False elsewhere
    timer: bool = False
    #: the connection (local, remote) to another host its holder is blocked reading, asked where `queued`
    #: and `idle`: a server that waits on one client while another's bytes sit unread holds nobody by
    #: itself; the wait goes on to that host (a parameter server behind a slow worker made three hosts
    #: STALLED; found by a helper)
    waits_on: tuple[str, str] | None = None


@dataclass(frozen=True)
class Finding:
    rule: str
    code: str
    severity: Severity
    summary: str
    pids: tuple[int, ...]
    evidence: tuple[Evidence, ...]
    hint: str | None
    caused_by: str | None = None  # rule slug of the finding this one follows from
    remote: str | None = None  # another host the finding points at, as a target (`user@host:port`)
    peer: RemotePeer | None = None  # the connection it waits on, whose other end is not on this host


@dataclass(frozen=True)
class WaitLink:
    """One drawn edge of a wait chain: `waiter` waits on `holder` (None: no visible process can end
    it). `label` reads before the holder: "waits for child", "reads pipe:[91234] held by"."""

    waiter: int
    holder: int | None
    label: str


@dataclass(frozen=True)
class WaitPicture:
    """The processes behind one finding, to draw as a tree by PPid with its wait edges labelled."""

    pids: tuple[int, ...]  # waiter first
    links: tuple[WaitLink, ...]
    blockers: tuple[int, ...]  # who ends the wait (marked in the drawing)
    why: str | None = None  # why the blocker does not end it: "idle", "stopped", "orphan", ...


@dataclass(frozen=True)
class Incident:
    """Findings grouped by cause: the root cause and what follows from it (`caused_by`, the wait
    chains). `pictures` and the order are for the terminal; JSON carries headline, root, consequences."""

    headline: str
    root: Finding
    consequences: tuple[Finding, ...] = ()
    pictures: tuple[tuple[Finding, WaitPicture], ...] = ()

    @property
    def findings(self) -> tuple[Finding, ...]:
        return (self.root, *self.consequences)


@dataclass(frozen=True)
class Instant:
    """A moment of the story on the target's clock (epoch seconds): job start, OOM kill, last log write."""

    wall: float
    what: str


@dataclass(frozen=True)
class Outlier:
    """This host differs from the majority of its group (`sweep --group-by`): the odd host out."""

    group: str
    group_size: int  # hosts compared in the group
    majority_size: int  # hosts that share the majority's signature
    differences: tuple[str, ...]  # what sets this host apart, in words


# ---------------------------------------------------------------- distributed jobs

RankState = Literal["collective", "elsewhere", "stopped", "uninterruptible", "exited", "gone", "missing", "running"]
#: States in which a rank cannot take part in a collective until something else happens.
HOLDING = frozenset({"elsewhere", "stopped", "uninterruptible", "exited", "gone", "missing"})
#: States of a rank that no process is: it left (gone), or nothing says it ever came (missing)
NO_PROCESS = frozenset({"gone", "missing"})


@dataclass(frozen=True)
class JobRank:
    """A rank of a distributed job on this host, and where it is (analysis/ranks.py)."""

    rank: int | None  # global rank; None for a local rank that is gone (only LOCAL_RANK is known)
    local_rank: int | None
    pid: int | None  # None: gone
    state: RankState
    why: str  # the state, in words
    gpu: str | None = None  # CUDA_VISIBLE_DEVICES as the rank sees it
    comm: str | None = None  # its process's name
    #: the remote end of the TCP connection it is blocked on (a ring's recv, a store's read), and the
    #: local ends of its connections: a run matches one rank's wait to the rank holding that end on
    #: another host (report/job_joins.py); not in the JSON
    waits_on: str | None = None
    ends: tuple[str, ...] = ()
    busy: bool = False  # it worked over the window (a fifth of a CPU or more: ranks.BUSY_RANK_SHARE)
    share: float | None = None  # the share of a CPU it used over the window; None: one sample
    #: where it holds the others, why it may go on by itself (what it waits on moved, sleeps on a timer,
    #: or is its disk): nothing proves it stuck, and its finding is a warning (analysis/ranks.py)
    goes_on: str | None = None
    #: whether one of its gloo run loops works a collective (waits on a peer with the group's timeout, or
    #: runs); False: every one waits for work with no deadline (it entered none); None: no run loop read
    in_gloo_collective: bool | None = None

    @property
    def name(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.local_rank is None:  # gone, and which of several missing ranks it was is not known
            return "a rank"
        return f"local rank {self.local_rank}"

    @property
    def label(self) -> str:
        """`rank 2 (pid 4, python)`; a gone rank by its name alone."""
        if not self.pid:
            return self.name
        return f"{self.name} (pid {self.pid}" + (f", {self.comm})" if self.comm else ")")


@dataclass(frozen=True)
class DistributedJob:
    """A distributed job with ranks on this host, and the ranks that hold it."""

    key: str  # the job's id: TORCHELASTIC_RUN_ID, SLURM_JOB_ID, or the rendezvous address
    world_size: int | None
    ranks: tuple[JobRank, ...]  # the ranks on this host, by rank (gone ones last)
    culprits: tuple[JobRank, ...]  # the ranks holding the others; () when none here
    waiting: tuple[JobRank, ...]  # the ranks here waiting in a collective
    progress: str | None = None  # what says the ranks here make progress (bytes written, a GPU near its power limit)
    held_by: tuple[str, JobRank] | None = None  # a sweep's join: the rank on another host (target, rank) holding it
    #: remote ends of the ranks' TCP connections the other end closed, held by no process here
    #: (CLOSE_WAIT): where a rank on another host was, before it exited
    closed: tuple[str, ...] = ()
    #: remote ends of the ranks' established TCP connections held by no process here (at most 64):
    #: which hosts of a run its ranks talk to, so two jobs under one id are told apart (not in the JSON)
    peers: tuple[str, ...] = ()
    #: nothing of the job here moved over the window (no byte, state change, main-thread wake or more
    #: than a watchdog's CPU in its ranks or under them): why, in words; None otherwise
    #: (analysis/rank_waits.py). Not in the JSON
    still: str | None = None
    #: the remote ends of connections leaving this host that the ranks here wait on while `still`: a
    #: run holds the job still only where each is a rank of the job on another of its hosts
    still_waits_on: tuple[str, ...] = ()

    @property
    def words(self) -> str:
        """`lab-9 (torchelastic)`, `at 10.0.0.1:29500` (a rendezvous): the job, as a sentence names it."""
        kind, _, name = self.key.partition(":")
        return f"{name} ({kind})" if kind != "rendezvous" else f"at {name}"

    @property
    def elsewhere(self) -> bool:
        """Every rank here waits in a collective, and the job has ranks on other hosts: the one
        holding them is there."""
        return bool(self.waiting) and not self.culprits and (self.world_size or 0) > len(self.ranks)

    @property
    def deadlocked(self) -> bool:
        """Every rank of the world is here, each waits on another, and nothing of the job moved over the
        window: no rank is outside the wait to end it, and none is working toward it."""
        return (
            self.still is not None
            and not self.culprits
            and bool(self.world_size)
            and len(self.waiting) == len(self.ranks) >= (self.world_size or 0)
        )


@dataclass(frozen=True)
class LastWords:
    """The last lines of the log that matters (the job's silent log, else the one it wrote last):
    often the line that says it all ("waiting for …/EVAL_READY from node 1"). Remote text: escaped
    wherever it is shown, like every other."""

    log: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class HostReport:
    target: str
    status: Status
    error: str | None
    verdict: Verdict
    findings: tuple[Finding, ...]
    snapshot: HostSnapshot | None
    timings: dict[str, float]
    scope: tuple[int, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)  # from the inventory: vast.ai instance id, label
    headline: str | None = None  # one line: why the verdict is what it is
    incidents: tuple[Incident, ...] = ()  # every finding once, grouped by cause, worst first
    timeline: tuple[Instant, ...] = ()  # key instants, when they tell the story (terminal only)
    outlier_of: Outlier | None = None  # set by `sweep --group-by` on hosts unlike their group
    jobs: tuple[DistributedJob, ...] = ()  # distributed jobs with ranks here, their culprits (analysis/ranks)
    last_words: LastWords | None = None  # the last lines of the log that matters (analysis/logs.last_words)
    remote_waits: tuple[RemotePeer, ...] = ()  # waits on connections whose other end is off this host
    served: tuple[ServedSocket, ...] = ()  # what this host serves on: where other hosts' waits may end


def verdict(findings: tuple[Finding, ...]) -> Verdict:
    """The host's verdict from its worst finding: an error stalls it, a warning degrades it."""
    worst = max((SEVERITY_ORDER[f.severity] for f in findings), default=0)
    if worst >= SEVERITY_ORDER["error"]:
        return "stalled"
    if worst == SEVERITY_ORDER["warning"]:
        return "degraded"
    return "healthy"
