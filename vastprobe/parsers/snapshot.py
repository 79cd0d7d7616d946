"""Assembles a HostSnapshot from the probe's sections (declared in probe/sources.py): the only
place that says which builder fills which part of the model.

It reads the inputs every part shares once (meta and its format, the process section's stat and
status records, the clock they give, the host's facts), then calls one builder per part of the
snapshot (a part that needs no building, df, fr and held, is its parser's result, read in place). Each builder sits beside its source's parser (`build_locks` in parsers/locks.py,
`build_gpus` in parsers/nvidia_smi.py), or in a module of its own named after what it builds
where it joins several sources (parsers/processes.py, logs.py, probe_info.py, kernel_log.py,
own_processes.py). Every parser is called through `Sections.read` (parsers/reading.py), which
calls the parser the section's source names and, when it raises, names that section as
unreadable. A new source is its shell function in probe/script.sh, its entry in
probe/sources.py, its parser, its builder (reading it with `sections.read(src.NEW, ...)`), and
one line here. The builders are called in this order, the order in which the sections are read,
so that the section found unreadable first, when several are, stays the same."""

from __future__ import annotations

from vastprobe.model import HostFacts, HostSnapshot
from vastprobe.parsers import (
    cgroup,
    files,
    host,
    kernel_log,
    locks,
    logs,
    mounts,
    net,
    nvidia_smi,
    own_processes,
    probe_info,
    processes,
    pystack,
)
from vastprobe.parsers.reading import Sections
from vastprobe.probe import sources as src
from vastprobe.probe.script import ProbeParams
from vastprobe.probe.sections import ProbeOutput
from vastprobe.untrusted.numbers import read_int


def build_snapshot(
    out: ProbeOutput, params: ProbeParams, target: str, transport: str, output_bytes: int
) -> HostSnapshot:
    sections = Sections(out)
    meta: dict[str, str] = sections.read(
        src.META, sections.text(src.META) + "\n" + sections.text(src.LEGACY_CLK), also=[src.LEGACY_CLK]
    )
    fmt = read_int(meta.get("format", "1"), 3) or 1
    shell_pid, shell_ppid = read_int(meta.get("shell_pid"), 10), read_int(meta.get("shell_ppid"), 10)
    samples = processes.read_samples(sections, shell_pid)  # the probe shell's start time and uid are in it
    clk_tck = host.infer_clk_tck(samples.shell_starttime, sections.read(src.NOW, sections.text(src.NOW, 0)))
    facts: HostFacts = sections.read(src.HOST, sections.text(src.HOST), meta, clk_tck, samples.shell_uid)

    per_pid = processes.read_per_process(sections, samples, meta, fmt, facts)
    uids = {pid: st.uid for pid, st in samples.statuses[0].items()}
    excluded = own_processes.build_excluded(
        samples.stats[0], per_pid.cmdlines, shell_pid, shell_ppid, transport, clk_tck, params, uids
    )
    procs = processes.build_processes(sections, samples, per_pid, fmt)
    log_files = logs.build_logs(sections, params, fmt, procs)
    artifacts = files.build_artifacts(sections, params)
    probe = probe_info.build_probe_info(sections, params, meta, fmt, shell_pid, shell_ppid, transport, output_bytes)
    kernel = kernel_log.build_kernel_log(sections, fmt, facts)
    stacks, stacks_note = pystack.build_python_stacks(sections, params, fmt)
    return HostSnapshot(
        target=target,
        host=facts,
        probe=probe,
        processes=procs,
        excluded_pids=excluded,
        kernel_log=kernel,
        cgroups=cgroup.build_cgroups(sections),
        gpus=nvidia_smi.build_gpus(sections),
        logs=log_files,
        artifacts=artifacts,
        disks=tuple(sections.read(src.DF, sections.text(src.DF))),
        locks=locks.build_locks(sections, fmt),
        sockets=net.build_sockets(sections, fmt),
        fuse_mounts=mounts.build_fuse_mounts(sections, fmt),
        flight_dumps=sections.read(src.FR, sections.text(src.FR), sections.cut(src.FR)),
        held_files=sections.read(src.HELD, sections.text(src.HELD)),
        python_stacks=stacks,
        python_stacks_note=stacks_note,
    )
