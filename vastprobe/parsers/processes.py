"""The snapshot's process table: one `Process` per process in the first sample's stat records,
joined from the process section's several readers (stat, status, io, wchan, sched, cgroup and
threads, per sample) and the sections keyed by pid beside it (syscall, cmdline, env, fd). It is a
module of its own so that the join lives beside the parsers it joins, apart from the snapshot's
assembly (parsers/snapshot.py): a new per-process source is its read in `read_per_process` and
its field in `_process`. The stat and status records are read first (`read_samples`), since the
clock and the probe's uid, which the other readers need, come from the probe shell's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vastprobe.model import FdEntry, Process, ProcIO, ProcSample, Syscall, ThreadState, Unavailable
from vastprobe.parsers import cgroup, proc_io, proc_stat, proc_status, sched, syscall, threads, wchan
from vastprobe.parsers.reading import NOT_READ
from vastprobe.probe import sources as src

if TYPE_CHECKING:
    from vastprobe.model import HostFacts
    from vastprobe.parsers.fd import FdTable
    from vastprobe.parsers.reading import Sections


@dataclass(frozen=True)
class ProcSamples:
    """The process section of each sample (its text, and its stat and status records by pid)."""

    texts: list[str]
    stats: list[dict[int, proc_stat.StatRecord]]
    statuses: list[dict[int, proc_status.StatusRecord]]
    shell_pid: int | None  # the probe's own shell, from meta

    @property
    def shell_starttime(self) -> int | None:
        shell = self.stats[0].get(self.shell_pid) if self.shell_pid is not None else None
        return shell.starttime if shell else None

    @property
    def shell_uid(self) -> int | None:
        shell = self.statuses[0].get(self.shell_pid) if self.shell_pid is not None else None
        return shell.uid if shell else None


def read_samples(sections: Sections, shell_pid: int | None) -> ProcSamples:
    """Every sample's stat records, then every sample's status records."""
    texts = [sections.text(src.PROC, n) for n in src.SAMPLES]
    # the process section feeds several parsers (stat, status, io, wchan, sched, cgroup, threads):
    # each is read through the same wrapper, so a failure in any of them is that section's
    stats: list[dict[int, proc_stat.StatRecord]] = [
        sections.read(src.PROC, t, n=n)[0] for n, t in zip(src.SAMPLES, texts, strict=True)
    ]
    statuses = [
        sections.read(src.PROC, t, n=n, parser=proc_status.parse_status_section)[0]
        for n, t in zip(src.SAMPLES, texts, strict=True)
    ]
    return ProcSamples(texts, stats, statuses, shell_pid)


@dataclass(frozen=True)
class PerProcess:
    """What the other readers of the process section, and the sections keyed by pid, say of each
    process."""

    syscalls: dict[int, Syscall]
    syscall_errors: dict[int, str]
    threads: dict[int, tuple[ThreadState, ...]]
    ios: list[tuple[dict[int, ProcIO], dict[int, str]]]  # per sample: records, and why one is missing
    wchans: dict[int, str]
    exited: dict[int, float]  # zombies: how long ago each last ran
    cmdlines: dict[int, tuple[str, ...]]
    envs: dict[int, tuple[tuple[str, str], ...]]
    cgroups: dict[int, tuple[str | None, str | None]]  # memory cgroup (v1), cgroup v2
    fds: FdTable


def read_per_process(
    sections: Sections, samples: ProcSamples, meta: dict[str, str], fmt: int, facts: HostFacts
) -> PerProcess:
    syscalls, syscall_errors = _syscalls(sections, fmt, facts.arch, facts.uid)
    task_calls = (
        sections.read(src.SYSCALL, sections.text(src.SYSCALL), facts.arch, parser=syscall.parse_task_syscalls)
        if fmt >= 2
        else {}
    )
    thread_table = (
        sections.read(
            src.PROC,
            samples.texts[0],
            task_calls,
            sections.text(src.SYSCALL),
            also=[src.SYSCALL],
            parser=threads.parse_threads_section,
        )
        if fmt >= 2
        else {}
    )
    ios = [
        sections.read(src.PROC, t, n=n, parser=proc_io.parse_io_section)
        for n, t in zip(src.SAMPLES, samples.texts, strict=True)
    ]
    wchans, _ = sections.read(src.PROC, samples.texts[0], parser=wchan.parse_wchan_section)
    zombies = [pid for pid, rec in samples.stats[0].items() if rec.state == "Z"]
    exited = (
        sched.exited_ago(
            sections.read(src.PROC, samples.texts[0], parser=sched.parse_last_ran), zombies, samples.shell_pid
        )
        if zombies
        else {}
    )
    cmdlines: dict[int, tuple[str, ...]] = sections.read(src.CMDLINE, sections.text(src.CMDLINE))
    envs = sections.read(src.ENV, sections.text(src.ENV))
    cgroups_by_pid = sections.read(src.PROC, samples.texts[0], parser=cgroup.parse_proc_cgroup_section)
    fd_table = sections.read(src.FD, sections.text(src.FD), escaped=meta.get("ls") == "b")
    return PerProcess(
        syscalls, syscall_errors, thread_table, ios, wchans, exited, cmdlines, envs, cgroups_by_pid, fd_table
    )


def _syscalls(sections: Sections, fmt: int, arch: str, uid: int | None) -> tuple[dict[int, Syscall], dict[int, str]]:
    if fmt < 2:
        return {}, {}
    calls: dict[int, Syscall]
    errors: dict[int, str]
    calls, errors = sections.read(src.SYSCALL, sections.text(src.SYSCALL), arch)
    if uid not in (0, None):
        errors = {pid: f"{why} (the probe ran as uid {uid}; reading it needs root)" for pid, why in errors.items()}
    return calls, errors


def build_processes(sections: Sections, samples: ProcSamples, per_pid: PerProcess, fmt: int) -> tuple[Process, ...]:
    """One Process per process in the first sample, in pid order."""
    return tuple(_process(sections, samples, per_pid, fmt, pid, rec) for pid, rec in sorted(samples.stats[0].items()))


def _process(
    sections: Sections, samples: ProcSamples, per_pid: PerProcess, fmt: int, pid: int, rec: proc_stat.StatRecord
) -> Process:
    status = samples.statuses[0].get(pid)
    kernel_thread = bool(rec.flags & proc_stat.PF_KTHREAD)
    v1, v2 = per_pid.cgroups.get(pid, (None, None))
    fd_table = per_pid.fds
    return Process(
        pid=pid,
        ppid=rec.ppid,
        comm=rec.comm,
        state=rec.state,
        pgrp=rec.pgrp,
        session=rec.session,
        tty_nr=rec.tty_nr,
        starttime=rec.starttime,
        threads=rec.num_threads,
        rss_kb=status.vm_rss_kb if status else None,
        hwm_kb=status.vm_hwm_kb if status else None,
        uid=status.uid if status else None,
        tracer_pid=status.tracer_pid if status else None,
        nspid=status.nspid if status else (),
        sig_ign=status.sig_ign if status else None,
        sig_cgt=status.sig_cgt if status else None,
        cmdline=per_pid.cmdlines.get(pid, ()),
        wchan=_wchan(sections, per_pid, pid, kernel_thread),
        fds=_fds(sections, fd_table, pid, kernel_thread),
        fds_truncated=pid in fd_table.truncated,
        memory_cgroup=v1,
        cgroup_v2=v2,
        samples=_samples(samples, per_pid, pid, rec),
        # the flag, not "pid 2 or its children": inside a PID namespace pid 2 is a user process
        kernel_thread=kernel_thread,
        syscall=_process_syscall(pid, kernel_thread, fmt, per_pid.syscalls, per_pid.syscall_errors, per_pid.wchans),
        threads_detail=per_pid.threads.get(pid, ()),
        exited_ago=per_pid.exited.get(pid),
        tpgid=rec.tpgid,
        epoll=tuple(fd_table.epoll[pid]) if pid in fd_table.epoll else None,
        env=per_pid.envs.get(pid, ()),
    )


def _samples(samples: ProcSamples, per_pid: PerProcess, pid: int, rec: proc_stat.StatRecord) -> tuple[ProcSample, ...]:
    """The process in each sample, while it is the same process (the same start time)."""
    out = []
    for i in range(2):
        r = samples.stats[i].get(pid)
        if r is None or r.starttime != rec.starttime:
            break
        st = samples.statuses[i].get(pid)
        io_map, io_err = per_pid.ios[i]
        io: ProcIO | Unavailable = io_map.get(pid) or Unavailable(io_err.get(pid, "io not read"))
        out.append(
            ProcSample(
                state=r.state,
                utime=r.utime,
                stime=r.stime,
                io=io,
                voluntary_ctxt=st.voluntary_ctxt if st else None,
                nonvoluntary_ctxt=st.nonvoluntary_ctxt if st else None,
            )
        )
    return tuple(out)


def _wchan(sections: Sections, per_pid: PerProcess, pid: int, kernel_thread: bool) -> str | Unavailable:
    w = per_pid.wchans.get(pid)
    if w is not None:
        return w
    if kernel_thread:
        return Unavailable("not read for kernel threads")
    if sections.get(src.PROC, 0) is not None:
        return Unavailable("wchan not readable")
    return Unavailable(sections.missing(src.PROC, 0))


def _fds(sections: Sections, fd_table: FdTable, pid: int, kernel_thread: bool) -> tuple[FdEntry, ...] | Unavailable:
    fds = fd_table.fds.get(pid)
    if kernel_thread and fds is None:  # the probe reads only stat (and io) of kernel threads
        return ()
    if pid in fd_table.denied and not fds:
        return Unavailable(fd_table.denied[pid])
    if fds is None:
        fd_ok = sections.get(src.FD) is not None
        return Unavailable(sections.missing(src.FD) if not fd_ok else "process gone before its fds were read")
    return tuple(fds)


def _process_syscall(
    pid: int, kernel_thread: bool, fmt: int, calls: dict[int, Syscall], errors: dict[int, str], wchans: dict[int, str]
) -> Syscall | Unavailable:
    if fmt < 2:
        return Unavailable(NOT_READ)
    if kernel_thread:
        return Unavailable("not read for kernel threads")
    found = calls.get(pid)
    if found is not None:
        return syscall.resumed(found, wchans.get(pid)) or found
    return Unavailable(errors.get(pid, "not read: running, or its wait channel says what it waits on"))
