"""The typed snapshot of one host: all the rules see, all `collect` saves.

Facts that could not be gathered are `Unavailable(reason)` values rather than a bare None,
so a rule can tell "no OOM kill" from "the kernel log was not readable".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar

from vastprobe.untrusted.numbers import read_int

T = TypeVar("T")


@dataclass(frozen=True)
class Unavailable:
    """A fact the probe could not get, and why."""

    reason: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class NotRead(Unavailable):
    """A path the probe would not touch, or gave up on: `why` is `refused` (a link to another
    user's file, a kernel or device file) or `unanswered` (a FUSE mount with requests waiting for
    its server, or no answer within the probe's file timeout: a dead mount)."""

    why: Literal["refused", "unanswered"] = "refused"


def available(value: T | Unavailable) -> T | None:
    return None if isinstance(value, Unavailable) else value


# ---------------------------------------------------------------- processes

FdMode = Literal["r", "w", "rw", "?"]


@dataclass(frozen=True)
class FdEntry:
    fd: int
    target: str
    mode: FdMode

    @property
    def deleted(self) -> bool:
        return self.target.endswith(" (deleted)")

    @property
    def path(self) -> str:
        return self.target[: -len(" (deleted)")] if self.deleted else self.target

    @property
    def pipe_inode(self) -> int | None:
        return self._inode("pipe:[")

    @property
    def socket_inode(self) -> int | None:
        return self._inode("socket:[")

    def _inode(self, prefix: str) -> int | None:
        """`pipe:[N]`, `socket:[N]`: N, read as numbers.py reads every number (None when garbled)."""
        if self.target.startswith(prefix) and self.target.endswith("]"):
            return read_int(self.target[len(prefix) : -1])
        return None

    @property
    def is_gpu_device(self) -> bool:
        return self.target.startswith("/dev/nvidia")


@dataclass(frozen=True)
class EpollWatch:
    """One fd in an epoll instance's interest list (/proc/PID/fdinfo/EPFD `tfd:` lines)."""

    epfd: int
    fd: int
    events: int  # EPOLLIN 0x1, EPOLLOUT 0x4, ...


@dataclass(frozen=True)
class ProcIO:
    rchar: int
    wchar: int
    read_bytes: int | None
    write_bytes: int | None


@dataclass(frozen=True)
class Syscall:
    """/proc/PID/syscall: what a blocked process is doing in the kernel. `number` None: running."""

    number: int | None  # -1: blocked outside a system call (a page fault, a stop)
    args: tuple[int, ...]  # the six arguments (an fd is often the first)
    name: str | None  # from the architecture's table, when known

    @property
    def running(self) -> bool:
        return self.number is None


@dataclass(frozen=True)
class ThreadState:
    """A thread other than the main one (/proc/PID/task/TID)."""

    tid: int
    comm: str
    state: str
    wchan: str | None
    syscall: Syscall | None = None  # read for waits that leave the fd open, polls and futexes (root)


@dataclass(frozen=True)
class ProcSample:
    """The volatile part of a process, read once per sample."""

    state: str
    utime: int  # clock ticks
    stime: int
    io: ProcIO | Unavailable
    voluntary_ctxt: int | None
    nonvoluntary_ctxt: int | None

    @property
    def cpu_ticks(self) -> int:
        return self.utime + self.stime


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    comm: str
    state: str  # first sample's state letter
    pgrp: int
    session: int
    tty_nr: int
    starttime: int  # ticks since boot
    threads: int
    rss_kb: int | None
    hwm_kb: int | None
    uid: int | None
    tracer_pid: int | None
    nspid: tuple[int, ...]
    sig_ign: int | None
    sig_cgt: int | None
    cmdline: tuple[str, ...]
    wchan: str | Unavailable  # "0" = running or not blocked
    fds: tuple[FdEntry, ...] | Unavailable
    fds_truncated: bool
    memory_cgroup: str | None
    cgroup_v2: str | None
    samples: tuple[ProcSample, ...]  # one per probe sample, in order; may be 1
    kernel_thread: bool
    syscall: Syscall | Unavailable = Unavailable("not read by this probe version")
    threads_detail: tuple[ThreadState, ...] = ()  # other threads' states, bounded; () when not read
    exited_ago: float | None = None  # a zombie: seconds since it exited (scheduler clock); None: not known
    tpgid: int | None = None  # the foreground process group of its controlling terminal (-1: none)
    epoll: tuple[EpollWatch, ...] | None = None  # an epoll waiter's interest lists; None: not read
    env: tuple[tuple[str, str], ...] = ()  # distributed-training variables only (parsers/environ.ALLOWED)

    def env_value(self, name: str) -> str | None:
        return next((v for k, v in self.env if k == name), None)

    @property
    def command(self) -> str:
        return " ".join(self.cmdline) if self.cmdline else f"[{self.comm}]"

    @property
    def first(self) -> ProcSample:
        return self.samples[0]

    @property
    def last(self) -> ProcSample:
        return self.samples[-1]


# ---------------------------------------------------------------- host


@dataclass(frozen=True)
class Pressure:
    resource: str
    some_avg10: float
    full_avg10: float | None


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    kernel: str
    uid: int | None
    clk_tck: int
    uptime: float
    btime: int | Unavailable
    loadavg: tuple[float, float, float] | Unavailable
    mem_total_kb: int | None
    mem_available_kb: int | None
    pressure: tuple[Pressure, ...]
    pid_max: int | None
    own_pid_namespace: bool | Unavailable  # /proc/1 is in the probe's PID namespace
    dmesg_restrict: int | None
    arch: str = ""  # /proc/sys/kernel/arch (x86_64, aarch64); "" when unknown


# ---------------------------------------------------------------- kernel log

KernelEventKind = Literal[
    "oom-kill", "oom-summary", "oom-invoked", "oom-reaped", "memcg-usage", "xid", "sxid", "hung-task", "gpu-lost"
]


@dataclass(frozen=True)
class KernelEvent:
    kind: KernelEventKind
    line: str
    uptime: float | None  # seconds since boot, from the [secs] stamp
    wall_time: float | None  # epoch seconds: btime + uptime, or a stamp that names its time zone
    pid: int | None = None  # as written in the log: a host PID
    comm: str | None = None
    total_vm_kb: int | None = None
    anon_rss_kb: int | None = None
    file_rss_kb: int | None = None
    uid: int | None = None
    memcg: str | None = None  # oom_memcg / task_memcg
    task_memcg: str | None = None
    constraint: str | None = None
    xid: int | None = None  # the Xid, or the SXid of an NVSwitch line
    pci: str | None = None  # "0000:3b:00": domain:bus:device, lower case, no function
    usage_kb: int | None = None
    limit_kb: int | None = None
    detail: str | None = None
    severity: str | None = None  # as the line words it: "Fatal", "Non-fatal" (SXid, NVLink Xids)
    device: str | None = None  # the reporting device when it is not a GPU: "nvidia-nvswitch3"
    local_time: float | None = None  # a wall-clock stamp without a time zone (dmesg -T, syslog), read as UTC


@dataclass(frozen=True)
class KernelLog:
    readable: bool
    source: str
    reason: str | None  # why not readable, or a caveat
    total_lines: int
    events: tuple[KernelEvent, ...]


# ---------------------------------------------------------------- kernel objects a process can wait on

LockKind = Literal["FLOCK", "POSIX", "OFDLCK", "LEASE", "DELEG", "ACCESS", "?"]


@dataclass(frozen=True)
class FileLock:
    """A line of /proc/locks: a held lock, or (`waiting`) a request blocked behind lock `number`."""

    number: int
    waiting: bool
    kind: str
    mode: str  # ADVISORY / MANDATORY
    access: str  # READ / WRITE
    pid: int | None  # the locker, in the probe's PID namespace; None when not visible there
    device: str  # major:minor (hex), as /proc/locks prints it
    inode: int
    start: str
    end: str


SocketProto = Literal["tcp", "tcp6", "udp", "udp6", "unix"]


@dataclass(frozen=True)
class Socket:
    """One socket a listed process holds, from /proc/PID/net/* of its network namespace."""

    inode: int
    proto: SocketProto
    netns: int | None  # 0: the probe's own network namespace; else the PID whose /proc/PID/net showed it
    local: str  # "127.0.0.1:8080", a Unix path, or ""
    remote: str  # "" for Unix sockets and unconnected ones
    state: str  # ESTABLISHED, LISTEN, ... (Unix: CONNECTED, LISTEN, UNCONNECTED)
    send_queue: int | None  # bytes not yet acknowledged by the peer (TCP)
    recv_queue: int | None  # bytes received and not yet read by the holder (TCP)
    peer_inode: int | None = None  # Unix: the other end, from ss


@dataclass(frozen=True)
class SocketTable:
    sockets: tuple[Socket, ...]
    unix_peers_known: bool  # ss was there to name Unix sockets' peers
    truncated: bool

    def by_inode(self) -> dict[int, Socket]:
        return {s.inode: s for s in self.sockets}


@dataclass(frozen=True)
class FuseMount:
    device: str  # major:minor of the mount; its minor is the FUSE connection number
    mount_point: str
    fstype: str  # fuse.sshfs, fuse, fuseblk
    source: str
    waiting: int | None = None  # requests waiting for its server (fusectl); None: not read


# ---------------------------------------------------------------- cgroups


@dataclass(frozen=True)
class CgroupMemory:
    version: Literal["v1", "v2"]
    path: str  # as in /proc/PID/cgroup
    directory: str
    oom_kill: int | None
    oom: int | None  # v2 "oom" events, v1 under_oom
    limit_bytes: int | None  # None: unlimited or unknown
    usage_bytes: int | None
    peak_bytes: int | None
    failcnt: int | None  # v1 failcnt, v2 "max" events


# ---------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class GpuSample:
    """One GPU in one nvidia-smi sample. A field nvidia-smi could not give (`[N/A]`, `[Not Supported]`,
    an error) is None here and named in `unavailable` with nvidia-smi's own words: never a zero."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    utilization_gpu: float | None
    utilization_memory: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    temperature_c: float | None
    power_w: float | None
    clock_event_reasons: int | None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    ecc_uncorrected_volatile: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    retired_pages_pending: bool | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    mig_mode: str | None = None  # "Enabled" / "Disabled"
    unavailable: tuple[tuple[str, str], ...] = ()  # (nvidia-smi field, what it printed instead)

    def why_missing(self, field_name: str) -> str | None:
        return next((text for name, text in self.unavailable if name == field_name), None)


@dataclass(frozen=True)
class GpuApp:
    pid: int  # as nvidia-smi reports it: a host PID (NVML does not know PID namespaces)
    process_name: str
    used_memory_mib: float | None
    gpu_uuid: str


@dataclass(frozen=True)
class GpuState:
    """nvidia-smi's view. `present` False means no nvidia-smi at all (not a GPU host)."""

    present: bool
    error: str | None  # nvidia-smi failed, timed out, or could not reach the driver
    exit_code: int | None
    samples: tuple[tuple[GpuSample, ...], ...]
    apps: tuple[GpuApp, ...] | Unavailable
    unreachable: tuple[str, ...] = ()  # GPUs nvidia-smi named but could not open ("0000:3b:00", or "GPU1")
    device_nodes: tuple[str, ...] | None = None  # /dev/nvidia<N> on the target; None: not looked at


# ---------------------------------------------------------------- files


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime: int
    inode: int
    kind: str | None = None  # stat's %F ("regular file", "fifo", ...); None in older captures

    @property
    def regular(self) -> bool:
        return self.kind in (None, "regular file", "regular empty file")


@dataclass(frozen=True)
class LogFile:
    path: str
    stats: tuple[FileStat | Unavailable, ...]  # one per sample
    tail: str | Unavailable
    holders: tuple[tuple[int, int, bool], ...]  # (pid, fd, deleted) of processes holding it open
    found: bool = False  # not given with --log: a file the job's processes hold open write-only (its log)

    @property
    def exists(self) -> bool:
        return bool(self.stats) and isinstance(self.stats[-1], FileStat)


@dataclass(frozen=True)
class HeldFile:
    """A file a process holds open write-only (its stdout or stderr, or named like a log), stat'ed
    through /proc/PID/fd/N."""

    pid: int
    fd: int
    stat: FileStat


@dataclass(frozen=True)
class Artifact:
    path: str
    size: int
    mtime: int
    kind: str
    uid: int | None = None  # the owner; None in captures before probe format 3 took it


@dataclass(frozen=True)
class ArtifactListing:
    pattern: str
    matched: int
    entries: tuple[Artifact, ...]
    error: str | None


@dataclass(frozen=True)
class DiskUsage:
    filesystem: str
    mount: str
    size_kb: int | None
    used_kb: int | None
    available_kb: int | None
    inodes: int | None
    inodes_used: int | None
    inodes_free: int | None


# ---------------------------------------------------------------- the snapshot


@dataclass(frozen=True)
class ProbeInfo:
    version: str
    shell_pid: int | None
    shell_ppid: int | None
    transport: str
    sample_uptimes: tuple[float, ...]
    complete: bool
    deadline_hit: bool
    truncated_sections: tuple[str, ...]
    failed_sections: tuple[tuple[str, int], ...]  # (name, rc) that exited non-zero
    cpu_seconds: float | None  # the probe's own user+sys on the target (shell and children)
    output_bytes: int
    timeout_mode: str
    tampering: tuple[str, ...] = ()  # repeated or unexpected sections, forged lines: someone forged output
    unfinished_sections: tuple[str, ...] = ()  # sections the probe should have written that never arrived whole
    unreadable_sections: tuple[tuple[str, str], ...] = ()  # (section, why): its parser failed; read as absent


@dataclass(frozen=True)
class HostSnapshot:
    target: str
    host: HostFacts
    probe: ProbeInfo
    processes: tuple[Process, ...]
    excluded_pids: tuple[int, ...]  # the probe's own processes and its transport
    kernel_log: KernelLog
    cgroups: tuple[CgroupMemory, ...]
    gpus: GpuState
    logs: tuple[LogFile, ...]
    artifacts: tuple[ArtifactListing, ...]
    disks: tuple[DiskUsage, ...]
    notes: tuple[str, ...] = field(default=())
    locks: tuple[FileLock, ...] | Unavailable = Unavailable("not read by this probe version")
    sockets: SocketTable | Unavailable = Unavailable("not read by this probe version")
    fuse_mounts: tuple[FuseMount, ...] | Unavailable = Unavailable("not read by this probe version")
    flight_dumps: tuple[FlightDump, ...] = ()  # PyTorch flight recorder dumps found on the target
    held_files: tuple[HeldFile, ...] = ()  # files held open write-only named like logs: the job's logs, found
    python_stacks: tuple[PythonStack, ...] = ()  # --py-spy: where the newest Python programs are
    python_stacks_note: str | None = None  # --py-spy asked and not (all) answered: why

    def python_stack(self, pid: int) -> PythonStack | None:
        return next((s for s in self.python_stacks if s.pid == pid and s.threads), None)

    @property
    def sample_window(self) -> float:
        t = self.probe.sample_uptimes
        return t[-1] - t[0] if len(t) >= 2 else 0.0

    def process(self, pid: int) -> Process | None:
        for p in self.processes:
            if p.pid == pid:
                return p
        return None


# ---------------------------------------------------------------- reports

Severity = Literal["info", "warning", "error", "critical"]
#: Severities in rising order (worst last): one order for every layer that sorts findings.
SEVERITY_ORDER: dict[str, int] = {"info": 0, "warning": 1, "error": 2, "critical": 3}
Status = Literal["ok", "unreachable", "auth-failed", "host-key-rejected", "timeout", "probe-error", "skipped"]
Verdict = Literal["healthy", "degraded", "stalled", "unknown"]


@dataclass(frozen=True)
class Evidence:
    source: str
    detail: str


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


@dataclass(frozen=True)
class Collective:
    """One collective a rank entered, from its flight recorder dump."""

    pg: str  # the process group's id
    seq: int  # collective_seq_id
    op: str  # profiling_name: "nccl:all_reduce", "gloo:all_reduce"
    sizes: str  # input sizes, in words
    state: str  # scheduled, started, completed
    retired: bool


@dataclass(frozen=True)
class PyThread:
    """One thread of a Python program as py-spy read it (parsers/pystack.py)."""

    tid: str  # as py-spy names it: the native thread id, or its address
    name: str  # the Python thread's name: MainThread, QueueFeederThread, pt_autograd_0
    status: str  # py-spy's words: idle, active, active+gil, ...
    frames: tuple[str, ...]  # innermost first: "function (file:line)"


@dataclass(frozen=True)
class PythonStack:
    """Where a Python program is (--py-spy): its threads' stacks, or why py-spy could not say."""

    pid: int
    threads: tuple[PyThread, ...]
    error: str | None = None  # py-spy's own error (not Python, permission denied, timed out)
    cut: bool = False  # past the probe's 64 KiB per program

    def thread_lines(self, threads: int = 4, frames: int = 3) -> list[str]:
        """Each thread's innermost frames and its outermost one (where the program entered), for evidence."""
        out = []
        for t in self.threads[:threads]:
            where = " <- ".join(t.frames[:frames]) or "no Python frame"
            hidden = len(t.frames) - frames - 1  # the outermost frame (the program's entry) is shown
            if hidden > 0:
                where += f" <- … {hidden} more <- {t.frames[-1]}"
            elif hidden == 0:
                where += f" <- {t.frames[-1]}"
            out.append(f'thread {t.tid} "{t.name}" ({t.status}): {where}')
        return out


@dataclass(frozen=True)
class FlightDump:
    """One rank's flight recorder dump (parsers/flight_recorder.py: read without running pickle)."""

    path: str
    rank: int | None  # from the file name's digits after the prefix
    version: str
    collectives: tuple[Collective, ...]
    last_completed: dict[str, int]  # process group -> its last completed collective (pg_status)
    refused: str | None = None  # why the dump was not read: a pickle that is not plain data, bounds
    mtime: int | None = None  # when it was written (epoch seconds, the target's clock); None: not known

    @property
    def prefix(self) -> str:
        """The dump prefix its rank wrote it under (TORCH_FR_DUMP_TEMP_FILE): the path without the rank."""
        return self.path.rstrip("0123456789")

    def last_entered(self, pg: str) -> int | None:
        seqs = [c.seq for c in self.collectives if c.pg == pg]
        return max(seqs) if seqs else None


RankState = Literal["collective", "elsewhere", "stopped", "uninterruptible", "exited", "gone", "running"]
#: States in which a rank cannot take part in a collective until something else happens.
HOLDING = frozenset({"elsewhere", "stopped", "uninterruptible", "exited", "gone"})


@dataclass(frozen=True)
class JobRank:
    """A rank of a distributed job on this host, and where it is (analysis/ranks.py)."""

    rank: int | None  # global rank; None for a local rank that is gone (only LOCAL_RANK is known)
    local_rank: int | None
    pid: int | None  # None: gone
    state: RankState
    why: str  # the state, in words
    gpu: str | None = None  # CUDA_VISIBLE_DEVICES as the rank sees it

    @property
    def name(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        return f"local rank {self.local_rank}"


@dataclass(frozen=True)
class DistributedJob:
    """A distributed job with ranks on this host, and the ranks that hold it."""

    key: str  # the job's id: TORCHELASTIC_RUN_ID, SLURM_JOB_ID, or the rendezvous address
    world_size: int | None
    ranks: tuple[JobRank, ...]  # the ranks on this host, by rank (gone ones last)
    culprits: tuple[JobRank, ...]  # the ranks holding the others; () when none here
    waiting: tuple[JobRank, ...]  # the ranks here waiting in a collective

    @property
    def elsewhere(self) -> bool:
        """Every rank here waits in a collective, and the job has ranks on other hosts: the one
        holding them is there."""
        return bool(self.waiting) and not self.culprits and (self.world_size or 0) > len(self.ranks)


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
