"""Assembles a HostSnapshot from the probe's sections (declared in probe/sources.py). The only
place that knows which section feeds which part of the model.

Every parser is called through `Sections.read` (parsers/reading.py), which calls the parser the
section's source names and, when it raises, names that section as unreadable; a new source's
facts are read here with `sections.read(src.NEW, text, ...)`."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.model import (
    HostFacts,
    HostSnapshot,
    LogFile,
    NotRead,
    ProbeInfo,
    Process,
    ProcIO,
    ProcSample,
    Syscall,
    Unavailable,
    available,
)
from vastprobe.parsers import (
    cgroup,
    files,
    host,
    locks,
    mounts,
    net,
    nvidia_smi,
    proc_io,
    proc_stat,
    proc_status,
    pystack,
    sched,
    syscall,
    threads,
    wchan,
)
from vastprobe.parsers.reading import NOT_READ, Sections
from vastprobe.probe import sources as src
from vastprobe.probe.render import FILE_TIMEOUT, ProbeParams, longest_command_bound
from vastprobe.probe.sections import ProbeOutput, RawSection
from vastprobe.untrusted.numbers import read_digits, read_int

#: Commands the probe runs under BusyBox `timeout`, whose watcher process lives in a session of its own.
_PROBE_TIMEOUT_ARGV = (("-s", "KILL"), ("1", "true"), ("-t", "1", "true"))
#: How long past its bound an earlier probe's BusyBox `timeout` watcher may live: it counts the bound
#: down a second at a time (ending sooner once it sees its command gone), with room for the scheduler
_WATCHER_LINGERS = 2


def _probe_watcher(
    r: proc_stat.StatRecord, argv: tuple[str, ...], shell: proc_stat.StatRecord, clk_tck: int, longest: int
) -> bool:
    """A BusyBox `timeout` watcher with the probe's own arguments, started by this probe, or by an
    earlier one recently enough that it may still be counting down its bound. One whose
    arguments were gone when the probe read them (it ended in between, or is a zombie) is judged by
    the longest bound the probe gives a command."""
    mine = r.starttime >= shell.starttime
    if argv:
        shape = next((a for a in _PROBE_TIMEOUT_ARGV if tuple(argv[1 : 1 + len(a)]) == a), None)
        if shape is None:
            return False
        if mine:
            return True
        # `timeout -s KILL N cmd` (BusyBox 1.30+), `timeout -s KILL -t N cmd` (older); the probe's
        # test of which it is, `timeout [-t] 1 true`, is bounded at 1
        given = (argv[4:5] if argv[3:4] == ("-t",) else argv[3:4]) if shape == ("-s", "KILL") else ("1",)
        secs = read_digits(given[0], 4) if given else None
    else:
        secs = longest
    if r.session != r.pid:
        return False  # a watcher is a session of its own
    return mine or (secs is not None and shell.starttime - r.starttime <= (secs + _WATCHER_LINGERS) * clk_tck)


def _excluded(
    procs: dict[int, proc_stat.StatRecord],
    cmdlines: dict[int, tuple[str, ...]],
    shell_pid: int | None,
    shell_ppid: int | None,
    transport: str,
    clk_tck: int,
    longest: int,
) -> set[int]:
    """The probe's own session and descendants, and the transport that runs it (what its kind's
    own_processes says, transport/registry.py: for `local`, vastprobe and its ancestors; for ssh,
    the sshd session; for a container's exec, nothing above the shell, whose parent is outside the
    container): found by session and ancestry (one pass over a children index), never by a
    command name alone. A transport this version does not know is taken as ssh's."""
    from vastprobe.transport.registry import SSH, kind_named

    if shell_pid is None:
        return set()
    excluded = {shell_pid}
    shell = procs.get(shell_pid)
    if shell is not None and shell.session > 0:
        excluded |= {pid for pid, r in procs.items() if r.session == shell.session}
    children: dict[int, list[int]] = {}
    for pid, r in procs.items():
        children.setdefault(r.ppid, []).append(pid)
    stack = list(excluded)
    while stack:
        for kid in children.get(stack.pop(), ()):
            if kid not in excluded:
                excluded.add(kid)
                stack.append(kid)
    # BusyBox `timeout` leaves a watcher (a session of its own) per bounded command: ours started
    # after the probe shell and carries exactly the arguments the probe gave it. An earlier probe's
    # (a `watch` round a second ago) outlives its command (to its bound's end at most): one that
    # started before this shell, no longer ago than its own bound and a second or two, is that probe's.
    if shell is not None:
        for pid, r in procs.items():
            if r.comm == "timeout" and _probe_watcher(r, cmdlines.get(pid, ()), shell, clk_tck, longest):
                excluded.add(pid)
    own = (kind_named(transport) or SSH).own_processes
    if own == "none":
        return excluded
    if own == "caller":
        parent = cmdlines.get(shell_ppid or -1, ())
        if "vastprobe" in {a.rsplit("/", 1)[-1] for a in parent[:3]}:
            # vastprobe and what ran it: the operator's shell, a wrapper script, cron's sh (whose
            # command line holds --match's own pattern), up to but not including PID 1
            excluded.update(_ancestry(procs, shell_ppid))
        return excluded
    for cur in _ancestry(procs, shell_ppid):
        r = procs[cur]
        joined = " ".join(cmdlines.get(cur, ()))
        session_like = r.comm.startswith("sshd") and ("@" in joined or "[priv]" in joined or r.comm != "sshd")
        if not session_like:
            break
        excluded.add(cur)
    return excluded


def _ancestry(procs: dict[int, proc_stat.StatRecord], pid: int | None) -> Iterator[int]:
    """`pid` and its ancestors, up to but not including PID 1 (a PPid loop ends it too)."""
    seen: set[int] = set()
    while pid and pid in procs and pid > 1 and pid not in seen:
        seen.add(pid)
        yield pid
        pid = procs[pid].ppid


def _kmsg_text(sections: Sections, source: src.Source, fmt: int) -> str | None:
    """Since format 2 every kernel-log line comes prefixed with `|`, so no line (nor a process name
    inside one) can pass for one of the section's own `@@` markers; older captures have none."""
    sec = sections.get(source)
    if sec is None:
        return None
    if fmt < 2:
        return sec.text
    lines = []
    for line in sec.text.split("\n"):
        if line.startswith("|"):
            body = line[1:]
            lines.append(" " + body if body.startswith("@@") else body)
        elif line.startswith("@@"):
            lines.append(line)
    return "\n".join(lines)


def log_tail(sec: RawSection | None, fmt: int = 3) -> str | Unavailable:
    """Since format 3 every line of the tail comes prefixed with `|` (a line without it is tail's
    complaint), so no log line can pass for a marker of the probe's own."""
    if sec is None:
        return Unavailable("not read")
    if sec.text.startswith("@@notregular"):
        return Unavailable("not a regular file: not read")
    refused = files.not_read(sec.text.split("\n", 1)[0])
    if refused is not None:
        return refused
    if fmt >= 3:
        content, complaints = [], []
        for line in sec.text.split("\n"):
            if line.startswith("|"):
                content.append(line[1:])
            elif line:
                complaints.append(line)
        if complaints and not content:
            return Unavailable(complaints[-1].split(": ")[-1][:200])
        return "".join(c + "\n" for c in content)
    if sec.rc not in (0, None):
        return Unavailable(sec.text.strip().split(": ")[-1][:200] or f"tail exited {sec.rc}")
    return sec.text


def _syscalls(sections: Sections, fmt: int, arch: str, uid: int | None) -> tuple[dict[int, Syscall], dict[int, str]]:
    if fmt < 2:
        return {}, {}
    calls: dict[int, Syscall]
    errors: dict[int, str]
    calls, errors = sections.read(src.SYSCALL, sections.text(src.SYSCALL), arch)
    if uid not in (0, None):
        errors = {pid: f"{why} (the probe ran as uid {uid}; reading it needs root)" for pid, why in errors.items()}
    return calls, errors


def build_snapshot(
    out: ProbeOutput, params: ProbeParams, target: str, transport: str, output_bytes: int
) -> HostSnapshot:
    sections = Sections(out)
    meta: dict[str, str] = sections.read(
        src.META, sections.text(src.META) + "\n" + sections.text(src.LEGACY_CLK), also=[src.LEGACY_CLK]
    )
    fmt = read_int(meta.get("format", "1"), 3) or 1
    proc_texts = [sections.text(src.PROC, n) for n in src.SAMPLES]
    # the process section feeds several parsers (stat, status, io, wchan, sched, cgroup, threads):
    # each is read through the same wrapper, so a failure in any of them is that section's
    stats: list[dict[int, proc_stat.StatRecord]] = [
        sections.read(src.PROC, t, n=n)[0] for n, t in zip(src.SAMPLES, proc_texts, strict=True)
    ]
    statuses = [
        sections.read(src.PROC, t, n=n, parser=proc_status.parse_status_section)[0]
        for n, t in zip(src.SAMPLES, proc_texts, strict=True)
    ]
    shell_pid = read_int(meta.get("shell_pid"), 10)
    shell_stat = stats[0].get(shell_pid) if shell_pid is not None else None
    clk_tck = host.infer_clk_tck(
        shell_stat.starttime if shell_stat else None, sections.read(src.NOW, sections.text(src.NOW, 0))
    )
    shell_status = statuses[0].get(shell_pid) if shell_pid is not None else None
    facts: HostFacts = sections.read(
        src.HOST, sections.text(src.HOST), meta, clk_tck, shell_status.uid if shell_status else None
    )
    btime = available(facts.btime)
    syscalls, syscall_errors = _syscalls(sections, fmt, facts.arch, facts.uid)
    task_calls = (
        sections.read(src.SYSCALL, sections.text(src.SYSCALL), facts.arch, parser=syscall.parse_task_syscalls)
        if fmt >= 2
        else {}
    )
    thread_table = (
        sections.read(
            src.PROC,
            proc_texts[0],
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
        for n, t in zip(src.SAMPLES, proc_texts, strict=True)
    ]
    wchans, _ = sections.read(src.PROC, proc_texts[0], parser=wchan.parse_wchan_section)
    zombies = [pid for pid, rec in stats[0].items() if rec.state == "Z"]
    exited = (
        sched.exited_ago(sections.read(src.PROC, proc_texts[0], parser=sched.parse_last_ran), zombies, shell_pid)
        if zombies
        else {}
    )
    cmdlines: dict[int, tuple[str, ...]] = sections.read(src.CMDLINE, sections.text(src.CMDLINE))
    envs = sections.read(src.ENV, sections.text(src.ENV))
    cgroups_by_pid = sections.read(src.PROC, proc_texts[0], parser=cgroup.parse_proc_cgroup_section)
    fd_table = sections.read(src.FD, sections.text(src.FD), escaped=meta.get("ls") == "b")
    wchan_ok = sections.get(src.PROC, 0) is not None
    fd_ok = sections.get(src.FD) is not None

    shell_ppid = read_int(meta.get("shell_ppid"), 10)
    longest = longest_command_bound(params)
    excluded = _excluded(stats[0], cmdlines, shell_pid, shell_ppid, transport, clk_tck, longest)

    processes = []
    for pid, rec in sorted(stats[0].items()):
        samples = []
        for i in range(2):
            r = stats[i].get(pid)
            if r is None or r.starttime != rec.starttime:
                break
            st = statuses[i].get(pid)
            io_map, io_err = ios[i]
            io: ProcIO | Unavailable = io_map.get(pid) or Unavailable(io_err.get(pid, "io not read"))
            samples.append(
                ProcSample(
                    state=r.state,
                    utime=r.utime,
                    stime=r.stime,
                    io=io,
                    voluntary_ctxt=st.voluntary_ctxt if st else None,
                    nonvoluntary_ctxt=st.nonvoluntary_ctxt if st else None,
                )
            )
        status = statuses[0].get(pid)
        fds = fd_table.fds.get(pid)
        kernel_thread = bool(rec.flags & proc_stat.PF_KTHREAD)
        fd_value: tuple | Unavailable
        if kernel_thread and fds is None:  # the probe reads only stat (and io) of kernel threads
            fd_value = ()
        elif pid in fd_table.denied and not fds:
            fd_value = Unavailable(fd_table.denied[pid])
        elif fds is None:
            fd_value = Unavailable(sections.missing(src.FD) if not fd_ok else "process gone before its fds were read")
        else:
            fd_value = tuple(fds)
        w = wchans.get(pid)
        v1, v2 = cgroups_by_pid.get(pid, (None, None))
        processes.append(
            Process(
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
                cmdline=cmdlines.get(pid, ()),
                wchan=w
                if w is not None
                else Unavailable(
                    "not read for kernel threads"
                    if kernel_thread
                    else "wchan not readable"
                    if wchan_ok
                    else sections.missing(src.PROC, 0)
                ),
                fds=fd_value,
                fds_truncated=pid in fd_table.truncated,
                memory_cgroup=v1,
                cgroup_v2=v2,
                samples=tuple(samples),
                # the flag, not "pid 2 or its children": inside a PID namespace pid 2 is a user process
                kernel_thread=kernel_thread,
                syscall=_process_syscall(pid, kernel_thread, fmt, syscalls, syscall_errors),
                threads_detail=thread_table.get(pid, ()),
                exited_ago=exited.get(pid),
                tpgid=rec.tpgid,
                epoll=tuple(fd_table.epoll[pid]) if pid in fd_table.epoll else None,
                env=envs.get(pid, ()),
            )
        )

    logs = []
    stat_samples = [
        (n, sections.read(src.LOGSTAT, sections.text(src.LOGSTAT, n), n=n))
        for n in src.SAMPLES
        if sections.get(src.LOGSTAT, n)
    ]
    for i, path in enumerate(params.logs):
        tail: str | Unavailable = sections.read(src.LOGTAIL, sections.get(src.LOGTAIL, i), fmt, n=i)
        gave_up = [n for n in (src.LOGTAIL.section(i), *(src.LOGSTAT.section(k) for k in src.SAMPLES))
                   if n in out.abandoned]  # fmt: skip
        if gave_up:  # the probe stopped waiting for the child that touched it: a dead mount
            no_answer = NotRead(f"no answer within {FILE_TIMEOUT} s: its file system may be dead (a hung mount)",
                                "unanswered")  # fmt: skip
            if not isinstance(tail, str) and src.LOGTAIL.section(i) in gave_up:
                tail = no_answer
            for n, sample in stat_samples:
                if i not in sample and src.LOGSTAT.section(n) in out.abandoned:
                    sample[i] = no_answer
        holders = tuple(
            (p.pid, e.fd, e.deleted)
            for p in processes
            if not isinstance(p.fds, Unavailable)
            for e in p.fds
            if e.path == path
        )
        logs.append(
            LogFile(
                path=path,
                stats=tuple(s.get(i, Unavailable("not stat'ed")) for _n, s in stat_samples),
                tail=tail,
                holders=holders,
            )
        )

    listings = files.build_artifacts(sections, params)

    uptimes = tuple(
        u for u in (sections.read(src.NOW, sections.text(src.NOW, n), n=n) for n in src.SAMPLES) if u is not None
    )
    probe = ProbeInfo(
        version=meta.get("version", ""),
        shell_pid=shell_pid,
        shell_ppid=shell_ppid,
        transport=transport,
        sample_uptimes=uptimes,
        complete=out.complete,
        deadline_hit=out.deadline_hit,
        truncated_sections=tuple(n for n, s in out.sections.items() if s.truncated),
        failed_sections=tuple((n, s.rc) for n, s in out.sections.items() if s.rc not in (0, None)),
        cpu_seconds=sections.read(src.TIMES, sections.text(src.TIMES)),
        output_bytes=output_bytes,
        timeout_mode=meta.get("timeout", ""),
        tampering=out.anomalies,
        unfinished_sections=_unfinished(out, params, fmt),
    )
    kernel_log = sections.read(
        src.KMSG,
        _kmsg_text(sections, src.KMSG, fmt),
        _kmsg_text(sections, src.KMSG_FALLBACK, fmt) or None,
        btime,
        now=btime + facts.uptime if btime is not None else None,  # syslog stamps have no year
        also=[src.KMSG_FALLBACK],
    )
    stacks, stacks_note = pystack.build_python_stacks(sections, params, fmt)
    return HostSnapshot(
        target=target,
        host=facts,
        probe=probe,
        processes=tuple(processes),
        excluded_pids=tuple(sorted(excluded)),
        kernel_log=kernel_log,
        cgroups=cgroup.build_cgroups(sections),
        gpus=nvidia_smi.build_gpus(sections),
        logs=tuple(logs),
        artifacts=listings,
        disks=tuple(sections.read(src.DF, sections.text(src.DF))),
        locks=locks.build_locks(sections, fmt),
        sockets=net.build_sockets(sections, fmt),
        fuse_mounts=mounts.build_fuse_mounts(sections, fmt),
        flight_dumps=sections.read(src.FR, sections.text(src.FR)),
        held_files=sections.read(src.HELD, sections.text(src.HELD)),
        python_stacks=stacks,
        python_stacks_note=stacks_note,
    )


def _unfinished(out: ProbeOutput, params: ProbeParams, fmt: int) -> tuple[str, ...]:
    """The sections this probe version writes for these parameters that are missing or cut, in
    the probe's order (format 1 captures: only the ones cut, their section list was another)."""
    if fmt < 2:
        return tuple(n for n, s in out.sections.items() if s.truncated)
    wanted = src.expected_sections(len(params.logs), len(params.artifacts), params.sample != 0)
    extra = tuple(n for n in src.OPTIONAL if (s := out.get(n)) is not None and s.truncated)
    return tuple(n for n in wanted if (s := out.get(n)) is None or s.truncated) + extra


def _process_syscall(
    pid: int, kernel_thread: bool, fmt: int, calls: dict[int, Syscall], errors: dict[int, str]
) -> Syscall | Unavailable:
    if fmt < 2:
        return Unavailable(NOT_READ)
    if kernel_thread:
        return Unavailable("not read for kernel threads")
    found = calls.get(pid)
    if found is not None:
        return found
    return Unavailable(errors.get(pid, "not read: running, or its wait channel says what it waits on"))
