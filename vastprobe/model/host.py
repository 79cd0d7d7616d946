"""The host around the processes, and the snapshot that holds it all: host facts, the kernel log,
the kernel objects a process can wait on (file locks, sockets, FUSE mounts), cgroups, GPUs, the
job's files and disks, and what the probe itself says about its run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vastprobe.model.process import Process
from vastprobe.model.programs import FlightDump, PythonStack
from vastprobe.model.unavailable import Unavailable


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


def split_endpoint(endpoint: str) -> tuple[str, str]:
    """`127.0.0.1:8080` -> (`127.0.0.1`, `8080`); `[::1]:22` -> (`[::1]`, `22`): an INET socket's
    address as the net parser writes it (IPv6 in brackets), split once here, not by each reader."""
    host, _, port = endpoint.rpartition(":")
    return host, port


def is_loopback(ip: str) -> bool:
    """Whether an address as `split_endpoint` gives it is a loopback one (127/8, ::1, IPv4-mapped
    127/8): a connection between two such never leaves its network namespace."""
    return ip.startswith(("127.", "[::ffff:127.")) or ip in ("[::1]", "::1")


@dataclass(frozen=True)
class Socket:
    """One socket a listed process holds, from /proc/PID/net/* of its network namespace."""

    inode: int
    proto: SocketProto
    netns: int | None  # 0: the probe's own network namespace; else the PID whose /proc/PID/net showed it
    local: str  # "127.0.0.1:8080", a Unix path, or ""
    remote: str  # "" for Unix sockets and unconnected ones
    state: str  # ESTABLISHED, LISTEN, ... (Unix: CONNECTED, LISTEN, UNCONNECTED)
    send_queue: int | None  # bytes not yet acknowledged by the peer (TCP); Unix, from ss: memory its sent data holds
    recv_queue: int | None  # bytes received and not yet read by the holder (TCP; Unix, from ss)
    peer_inode: int | None = None  # Unix: the other end, from ss

    @property
    def local_address(self) -> tuple[str, str]:
        """(address, port) of an INET socket's own end."""
        return split_endpoint(self.local)


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
    tail: str | None = None  # its last lines, for the 4 written last (whole lines, passwords masked)


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


def lies_under(path: str, mount_point: str) -> bool:
    """Whether `path` is `mount_point` or below it, by whole components (`/data2` is not under
    `/data`): where a file or a wait lies among the mounts the probe listed."""
    return path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


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
