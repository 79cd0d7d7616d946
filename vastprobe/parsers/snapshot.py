"""Assembles a HostSnapshot from the probe's sections. The only place that knows which
section feeds which part of the model."""

from __future__ import annotations

from vastprobe.model import (
    ArtifactListing,
    GpuApp,
    GpuSample,
    GpuState,
    HostSnapshot,
    LogFile,
    ProbeInfo,
    Process,
    ProcIO,
    ProcSample,
    Unavailable,
    available,
)
from vastprobe.parsers import (
    cgroup,
    cmdline,
    df,
    fd,
    files,
    host,
    kmsg,
    nvidia_smi,
    proc_io,
    proc_stat,
    proc_status,
    wchan,
)
from vastprobe.probe.render import ProbeParams
from vastprobe.probe.sections import ProbeOutput, RawSection

_SAMPLE_PREFIXES = ("s0", "s1")


def _text(out: ProbeOutput, name: str) -> str:
    s = out.get(name)
    return s.text if s else ""


def _missing(out: ProbeOutput, name: str) -> str:
    s = out.get(name)
    if s is None:
        return f"the probe produced no {name} section"
    if s.truncated:
        return f"the {name} section was cut short"
    return f"{name} failed"


def _device_nodes(text: str) -> tuple[tuple[str, ...] | None, str]:
    """`@@dev /dev/nvidia0` lines (and `@@devs N`) ahead of the compute-apps output; older
    probes wrote none (None: not looked at)."""
    nodes: list[str] = []
    seen = False
    rest = text
    while rest.startswith("@@dev"):
        line, _, rest = rest.partition("\n")
        seen = True
        if line.startswith("@@dev "):
            nodes.append(line[6:200])
    return (tuple(nodes) if seen else None), rest


def _gpu(out: ProbeOutput) -> GpuState:
    samples: list[tuple[GpuSample, ...]] = []
    errors: list[str] = []
    unreachable: list[str] = []
    exit_code: int | None = None
    present = True
    for prefix in _SAMPLE_PREFIXES:
        sec = out.get(f"{prefix}.gpu")
        if sec is None:
            continue
        if sec.text.startswith("@@absent"):
            present = False
            break
        if sec.text.startswith("@@skipped"):
            errors.append("nvidia-smi skipped: " + sec.text[10:].strip())
            continue
        rows, other = nvidia_smi.parse_gpu_query(sec.text)
        lost = nvidia_smi.unreachable_gpus(other)
        unreachable.extend(x for x in lost if x not in unreachable)
        if sec.rc not in (0, None) and not (rows and lost):  # some GPUs answered: gpu-missing names the rest
            exit_code = sec.rc
            timed_out = sec.rc in (124, 137)
            text = " ".join(other) or "no output"
            errors.append(f"nvidia-smi {'timed out' if timed_out else f'exited {sec.rc}'}: {text}")
        elif sec.rc is None:
            errors.append("nvidia-smi output was cut short")
        if rows:
            samples.append(tuple(rows))
    apps: tuple[GpuApp, ...] | Unavailable = Unavailable("nvidia-smi not run")
    sec = out.get("gpuapps")
    nodes, apps_text = _device_nodes(sec.text) if sec is not None else (None, "")
    if present and sec is not None:
        if apps_text.startswith("@@"):
            apps = Unavailable(apps_text[2:].strip())
        elif sec.rc == 0:
            apps = tuple(nvidia_smi.parse_compute_apps(apps_text)[0])
        else:
            apps = Unavailable(f"nvidia-smi --query-compute-apps exited {sec.rc}")
    if not present:
        return GpuState(
            present=False,
            error=None,
            exit_code=None,
            samples=(),
            apps=Unavailable("no nvidia-smi on the target"),
            device_nodes=nodes,
        )
    error = errors[0] if errors else None
    return GpuState(
        present=True,
        error=error,
        exit_code=exit_code,
        samples=tuple(samples),
        apps=apps,
        unreachable=tuple(unreachable),
        device_nodes=nodes,
    )


def _excluded(
    procs: dict[int, proc_stat.StatRecord],
    cmdlines: dict[int, tuple[str, ...]],
    shell_pid: int | None,
    shell_ppid: int | None,
    transport: str,
) -> set[int]:
    """The probe's own session and descendants, and the transport that runs it."""
    if shell_pid is None:
        return set()
    excluded = {shell_pid}
    shell = procs.get(shell_pid)
    if shell is not None:
        excluded |= {pid for pid, r in procs.items() if r.session == shell.session and shell.session > 0}
    changed = True
    while changed:
        changed = False
        for pid, r in procs.items():
            if r.ppid in excluded and pid not in excluded:
                excluded.add(pid)
                changed = True
    # BusyBox `timeout` leaves a watcher process (its own session) for each bounded command.
    for pid, r in procs.items():
        argv = cmdlines.get(pid, ())
        if r.comm == "timeout" and ("KILL" in argv or list(argv[1:]) in (["1", "true"], ["-t", "1", "true"])):
            excluded.add(pid)
    if transport == "local":
        parent = cmdlines.get(shell_ppid or -1, ())
        if "vastprobe" in {a.rsplit("/", 1)[-1] for a in parent[:3]}:
            excluded.add(shell_ppid or -1)
        return excluded
    cur: int | None = shell_ppid
    while cur and cur in procs and cur > 1:
        r = procs[cur]
        joined = " ".join(cmdlines.get(cur, ()))
        session_like = r.comm.startswith("sshd") and ("@" in joined or "[priv]" in joined or r.comm != "sshd")
        if not session_like:
            break
        excluded.add(cur)
        cur = r.ppid
    return excluded


def build_snapshot(
    out: ProbeOutput, params: ProbeParams, target: str, transport: str, output_bytes: int
) -> HostSnapshot:
    meta = host.parse_meta(_text(out, "meta") + "\n" + _text(out, "clk"))
    proc_texts = [_text(out, f"{p}.proc") for p in _SAMPLE_PREFIXES]
    stats = [proc_stat.parse_stat_section(t)[0] for t in proc_texts]
    statuses = [proc_status.parse_status_section(t)[0] for t in proc_texts]
    shell_pid = int(meta["shell_pid"]) if meta.get("shell_pid", "").isdigit() else None
    shell_stat = stats[0].get(shell_pid) if shell_pid is not None else None
    clk_tck = host.infer_clk_tck(shell_stat.starttime if shell_stat else None, host.parse_now(_text(out, "s0.now")))
    shell_status = statuses[0].get(shell_pid) if shell_pid is not None else None
    facts = host.parse_host(_text(out, "host"), meta, clk_tck, shell_status.uid if shell_status else None)
    btime = available(facts.btime)

    ios = [proc_io.parse_io_section(t) for t in proc_texts]
    wchans, _ = wchan.parse_wchan_section(proc_texts[0])
    cmdlines = cmdline.parse_cmdline_section(_text(out, "cmdline"))
    cgroups_by_pid = cgroup.parse_proc_cgroup_section(proc_texts[0])
    fd_table = fd.parse_fd_section(_text(out, "fd"))
    wchan_ok = out.get("s0.proc") is not None
    fd_ok = out.get("fd") is not None

    shell_ppid = int(meta["shell_ppid"]) if meta.get("shell_ppid", "").isdigit() else None
    excluded = _excluded(stats[0], cmdlines, shell_pid, shell_ppid, transport)

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
            fd_value = Unavailable(_missing(out, "fd") if not fd_ok else "process gone before its fds were read")
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
                    else _missing(out, "s0.proc")
                ),
                fds=fd_value,
                fds_truncated=pid in fd_table.truncated,
                memory_cgroup=v1,
                cgroup_v2=v2,
                samples=tuple(samples),
                # the flag, not "pid 2 or its children": inside a PID namespace pid 2 is a user process
                kernel_thread=kernel_thread,
            )
        )

    logs = []
    stat_samples = [files.parse_logstats(_text(out, f"{p}.logs")) for p in _SAMPLE_PREFIXES if out.get(f"{p}.logs")]
    for i, path in enumerate(params.logs):
        tail_sec = out.get(f"log.{i}")
        tail: str | Unavailable
        if tail_sec is None:
            tail = Unavailable("not read")
        elif tail_sec.rc not in (0, None):
            tail = Unavailable(tail_sec.text.strip().split(": ")[-1] or f"tail exited {tail_sec.rc}")
        else:
            tail = tail_sec.text
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
                stats=tuple(s.get(i, Unavailable("not stat'ed")) for s in stat_samples),
                tail=tail,
                holders=holders,
            )
        )

    listings = []
    for i, pattern in enumerate(params.artifacts):
        sec: RawSection | None = out.get(f"art.{i}")
        if sec is None:
            listings.append(ArtifactListing(pattern=pattern, matched=0, entries=(), error=_missing(out, f"art.{i}")))
            continue
        count, entries, err = files.parse_artifacts(sec.text)
        listings.append(ArtifactListing(pattern=pattern, matched=count, entries=tuple(entries), error=err))

    uptimes = tuple(u for u in (host.parse_now(_text(out, f"{p}.now")) for p in _SAMPLE_PREFIXES) if u is not None)
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
        cpu_seconds=host.parse_times(_text(out, "times")),
        output_bytes=output_bytes,
        timeout_mode=meta.get("timeout", ""),
    )
    kernel_log = kmsg.parse_kmsg_sections(
        _text(out, "kmsg") if out.get("kmsg") else None,
        _text(out, "kmsg.fallback") or None,
        btime,
        now=btime + facts.uptime if btime is not None else None,  # syslog stamps have no year
    )
    return HostSnapshot(
        target=target,
        host=facts,
        probe=probe,
        processes=tuple(processes),
        excluded_pids=tuple(sorted(excluded)),
        kernel_log=kernel_log,
        cgroups=tuple(cgroup.parse_cgmem(_text(out, "cgmap"), _text(out, "cgmem"))),
        gpus=_gpu(out),
        logs=tuple(logs),
        artifacts=tuple(listings),
        disks=tuple(df.parse_df(_text(out, "df"))),
    )
