"""The probe as it is against the probe as it was (bench/peers/probe-2026-12-05.sh, the script before
issue 36's cuts), on a tree of real processes in the states the rules judge: both run back to back
on this machine, both parsed by today's parsers, and the snapshots of the test's own processes must
be equal, and the rules must say the same of them.

What may differ between two reads is set aside, and nothing else: CPU times, context switches and
I/O counters (they move), a zombie's age, a lock's line number in /proc/locks, the probes' own processes, their timings and their
version, and whether the second sample read a voluntary context switch count (this probe reads it there,
the previous one did not); and what belongs to the rest of this shared machine (other tests' processes, sockets,
locks, mounts, /tmp). The probe's own account of its sections (complete, cut, failed, forged) must
be equal too: a section whose status line changed shows there."""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import children_of, crossed_flocks, proc_wchan, stopped_child, wait_for
from tests.paths import REPO
from vastprobe.analysis.context import Context
from vastprobe.commands.common import exit_code
from vastprobe.model import HostReport, HostSnapshot, KernelLog, SocketTable
from vastprobe.parsers.snapshot import build_snapshot
from vastprobe.probe.script import MAX_THREADS, ProbeParams, render_script
from vastprobe.probe.sections import split_sections
from vastprobe.report.host import host_report
from vastprobe.rule_options import RuleOptions
from vastprobe.rules.zombie_child import YOUNG_SECONDS

PREVIOUS = REPO / "bench" / "peers" / "probe-2026-12-05.sh"

#: A rank stand-in: two threads, asleep, with a distributed job's variables (the probe reads the
#: environ of multi-threaded processes) and a flight recorder prefix it names.
RANK = "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\ntime.sleep(600)"
#: A parent that never reaps its child: a zombie.
ZOMBIE = "import os, time\nif os.fork() == 0:\n    os._exit(3)\ntime.sleep(600)"
#: A server that accepts and never answers, a client asleep in recv on it (a socket waiter), and a
#: netlink socket held beside them (a kind of socket no table the probe prints lists).
SOCKETS = """
import os, socket, sys, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(4)
nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
nl.bind((0, 0))  # bound, as a daemon's is: then /proc/net/netlink lists it
if os.fork() == 0:
    c = socket.create_connection(srv.getsockname())
    c.recv(1)
    os._exit(0)
conn, _ = srv.accept()
print(flush=True)
time.sleep(600)
"""
#: A sleeper on a terminal of its own (a pty: tty_nr set), with a tmux pane's variable.
ON_TERMINAL = """
import os, pty, time
pid, fd = pty.fork()
if pid == 0:
    os.execvp("sleep", ["sleep", "600"])
time.sleep(600)
"""


def render_previous(params: ProbeParams) -> str:
    """The previous script with today's parameter block (bench/probe_cost.py's render_old), and its
    dmesg as this one runs it: the kernel's own lines alone (-k, util-linux's), where this machine's
    log holds lines a process wrote to /dev/kmsg (a test writes a forged OOM kill there)."""
    new = render_script(params)
    start = new.index("# ---- parameters")
    block = new[new.index("\n", start) + 1 : new.index("# ---- end of parameters ----")]
    old = PREVIOUS.read_text(encoding="utf-8").replace("#@PARAMS@", block, 1)
    dmesg = shutil.which("dmesg")
    if dmesg is not None and not os.path.islink(dmesg):
        assert "tmo 10 dmesg 2>&1" in old
        old = old.replace("tmo 10 dmesg 2>&1", "tmo 10 dmesg -k 2>&1", 1)
    return old


def run(script: str, shell: list[str]) -> bytes:
    """The script on the shell's stdin, held open until the output ends, as the transports hold it."""
    p = subprocess.Popen([*shell, "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         start_new_session=True)  # fmt: skip
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(script.encode())
    p.stdin.flush()
    out = p.stdout.read()
    p.stdin.close()
    p.wait(timeout=60)
    return out


def snapshot(raw: bytes, params: ProbeParams) -> HostSnapshot:
    out = split_sections(raw, params.boundary)
    assert out.complete, raw[-400:]
    return build_snapshot(out, params, "local", "local", len(raw))


def report(snap: HostSnapshot, scope: tuple[int, ...]) -> HostReport:
    options = dataclasses.replace(RuleOptions(), explicit_scope=True)
    return host_report("local", "ok", None, Context(snap, scope, options), {}, scope)


@pytest.fixture(scope="module")
def tree(
    reap_module: list[subprocess.Popen], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, tuple[int, ...]]]:
    """The test's processes, in their states; returns their folder and every PID of the tree."""
    if shutil.which("flock") is None:
        pytest.skip("needs flock (util-linux)")
    tmp = tmp_path_factory.mktemp("equivalence")
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29999", "TORCH_FR_DUMP_TEMP_FILE": f"{tmp}/fr_", "AWS_SECRET_ACCESS_KEY": "planted"}  # fmt: skip
    procs = [subprocess.Popen([sys.executable, "-c", RANK], env=env, start_new_session=True)]
    procs.append(subprocess.Popen([sys.executable, "-c", RANK], env={**env, "RANK": "1"}, start_new_session=True))
    (tmp / "fr_0").write_bytes(pickle.dumps({"version": "2.2", "entries": []}, protocol=2))
    procs.append(subprocess.Popen([sys.executable, "-c", ZOMBIE], start_new_session=True))
    # a writer blocked on a full pipe nobody reads
    procs.append(subprocess.Popen(["sh", "-c", "yes equivalence | sleep 600"], start_new_session=True))
    # a job's log, held open write-only by the process writing it
    with open(tmp / "job.log", "w") as log:
        procs.append(subprocess.Popen(["sh", "-c", "echo step 1; echo step 2 of 9; exec sleep 600"], stdout=log,
                                      start_new_session=True))  # fmt: skip
    sockets = subprocess.Popen([sys.executable, "-c", SOCKETS], stdout=subprocess.PIPE, start_new_session=True)
    procs.append(sockets)
    procs.append(subprocess.Popen([sys.executable, "-c", ON_TERMINAL], env={**os.environ, "TMUX_PANE": "%7"},
                                  start_new_session=True))  # fmt: skip
    reap_module.extend(procs)
    stopped_shell, _ = stopped_child(reap_module)
    flock_one, flock_two = crossed_flocks(reap_module, tmp)
    procs += [stopped_shell, flock_one, flock_two]
    assert sockets.stdout is not None and sockets.stdout.readline() == b"\n"

    def settled() -> bool:
        kids = {p.pid: children_of(p.pid) for p in procs}
        yes = [k for k in kids[procs[3].pid] if Path(f"/proc/{k}/comm").read_text().strip() == "yes"]
        return (
            any(Path(f"/proc/{k}/stat").read_text().split(") ")[1].startswith("Z") for k in kids[procs[2].pid])
            and bool(yes) and "pipe_w" in proc_wchan(yes[0])
            and any(proc_wchan(k) != "0" and proc_wchan(k) for k in kids[sockets.pid])
            and any(Path(f"/proc/{k}/comm").read_text().strip() == "sleep" for k in kids[procs[6].pid])
            and all(len(os.listdir(f"/proc/{p.pid}/task")) == 2 for p in procs[:2])
        )  # fmt: skip

    wait_for(settled, timeout=20, what="the tree in its states")
    # the zombie past zombie-child's YOUNG_SECONDS by more than /proc/PID/sched's clock skew: near that
    # bound one read took it for young and the other for old, and the two probes' findings differed
    # (a clean-clone CI at be35deb, two shells of three). The sched clock also leaves out steal time, which
    # a loaded VM has much of: 16 s of wall time still read under 10 s there (4 runs of 9 flipped, 4.6 s
    # between this VM's two CPU clocks after 6 hours up), so three times the bound. And by that clock
    # itself, as the rule reads it: it leaves out steal time, and a clean-clone CI (56e6bc4, busybox)
    # read the zombie young with the previous probe and old with this one, run after it, three times
    zombie = next(k for k in children_of(procs[2].pid) if Path(f"/proc/{k}/stat").read_text().split(") ")[1][0] == "Z")
    wait_for(lambda: _age(zombie) > YOUNG_SECONDS * 3 and _sched_age(zombie) > YOUNG_SECONDS * 2, timeout=120,
             what="the zombie older than the rule's bound")  # fmt: skip
    pids: set[int] = set()
    frontier = [p.pid for p in procs]
    while frontier:
        pids.update(frontier)
        frontier = [k for p in frontier for k in children_of(p)]
    yield tmp, tuple(sorted(pids))  # reap_module kills them all, stopped ones too


def _sched_age(pid: int) -> float:
    """Seconds since `pid` last ran (a zombie: since it exited) by the scheduler's task clock, as
    zombie-child's `exited_ago` reads it: this process's own `se.exec_start` is now. Infinite where the
    kernel has no /proc/PID/sched (no CONFIG_SCHED_DEBUG: the rule has only the start time then)."""

    def exec_start(path: str) -> float | None:
        try:
            text = Path(path).read_text()
        except OSError:
            return None
        line = next((x for x in text.splitlines() if x.startswith("se.exec_start")), None)
        return float(line.split(":")[1]) / 1000 if line else None

    now, then = exec_start("/proc/self/sched"), exec_start(f"/proc/{pid}/sched")
    return now - then if now is not None and then is not None else float("inf")


def _age(pid: int) -> float:
    """Seconds since `pid` started (a zombie forked to exit at once: since it exited)."""
    start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19])
    return float(Path("/proc/uptime").read_text().split()[0]) - start / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- what is compared


def _process(p: Any) -> Any:
    """A process with what moves between two reads set aside: CPU times, the values of its context
    switches and I/O counters (whether they were read stays), and a zombie's age."""
    # the second sample's voluntary count is this probe's addition (the previous one read no status there)
    samples = tuple(
        dataclasses.replace(s, utime=0, stime=0, io=type(s.io).__name__,
                            voluntary_ctxt=s.voluntary_ctxt is None if i == 0 else "set aside",
                            nonvoluntary_ctxt=s.nonvoluntary_ctxt is None)
        for i, s in enumerate(p.samples)
    )  # fmt: skip
    return dataclasses.replace(p, samples=samples, exited_ago=None if p.exited_ago is None else "set aside")


def comparable(snap: HostSnapshot, pids: tuple[int, ...], tmp: Path) -> dict[str, Any]:
    """What of the snapshot is the test's tree's (or its folder's), and of the host what does not move."""
    mine = set(pids)
    procs = {p.pid: _process(p) for p in snap.processes if p.pid in mine}
    held_inodes = {
        fd.socket_inode for p in snap.processes if p.pid in mine and isinstance(p.fds, tuple) for fd in p.fds
    }
    sockets = snap.sockets
    socket_rows: Any = repr(sockets)
    if isinstance(sockets, SocketTable):
        socket_rows = sorted((s for s in sockets.sockets if s.inode in held_inodes), key=lambda s: s.inode)
    locks = snap.locks
    h = snap.host
    probe = snap.probe
    return {
        "processes": procs,
        "sockets": socket_rows,
        # (not whether ss named Unix peers: the probe runs it where any process of the machine waits on
        # a socket, and other tests' come and go between two reads: it failed a -n 4 run twice)
        # a lock's number is its line in the machine's /proc/locks: other tests' locks move it
        "locks": sorted(repr(dataclasses.replace(lk, number=0)) for lk in locks if lk.pid in mine)
        if isinstance(locks, tuple)
        else repr(locks),
        "held_files": sorted((f for f in snap.held_files if f.pid in mine), key=repr),
        "logs": snap.logs,
        "artifacts": snap.artifacts,
        "flight_dumps": sorted((d for d in snap.flight_dumps if str(tmp) in repr(d)), key=repr),
        "cgroups of the tree": sorted({(p.memory_cgroup, p.cgroup_v2) for p in snap.processes if p.pid in mine}, key=repr),
        "disks": sorted((d.filesystem, d.mount) for d in snap.disks),
        "gpus": snap.gpus,
        # other tenants' OOM kills may add lines between the two reads (tests/... of a shared host kill
        # every few seconds): the events are compared where the two reads overlap (logs_agree)
        "kernel log": (snap.kernel_log.readable, snap.kernel_log.source, snap.kernel_log.reason),
        "host": (h.hostname, h.kernel, h.uid, h.clk_tck, h.btime, h.pid_max, h.own_pid_namespace, h.dmesg_restrict,
                 h.arch, tuple(p.resource for p in h.pressure)),
        "probe": (probe.complete, probe.deadline_hit, probe.truncated_sections, probe.failed_sections,
                  probe.timeout_mode, probe.tampering, probe.transport),
        "notes": snap.notes,
    }  # fmt: skip


def difference(was: Any, now: Any) -> str:
    """Where two compared values differ, field by field: CI prints a long message cut, and a whole
    process table hid the one field that moved (a clean-clone CI at 0c29d20)."""
    if isinstance(was, dict) and isinstance(now, dict):
        lines = [f"only previous: {k}: {was[k]}" for k in was.keys() - now.keys()]
        lines += [f"only now: {k}: {now[k]}" for k in now.keys() - was.keys()]
        lines += [f"{k}: {difference(was[k], now[k])}" for k in was.keys() & now.keys() if was[k] != now[k]]
        return "\n".join(lines)
    if dataclasses.is_dataclass(was) and dataclasses.is_dataclass(now) and type(was) is type(now):
        fields = [f.name for f in dataclasses.fields(was)]
        return "; ".join(
            f"{n}: previous {getattr(was, n)!r}, now {getattr(now, n)!r}"
            for n in fields
            if getattr(was, n) != getattr(now, n)
        )
    return f"previous: {was!r}\nnow:      {now!r}"


def logs_agree(old: KernelLog, new: KernelLog) -> bool:
    """The later read is the earlier one with lines lost at the front (the ring buffer turned) and
    lines added at the end: some suffix of the earlier events opens the later ones."""
    a, b = [e.line for e in old.events], [e.line for e in new.events]
    if a == b:  # nothing came between: the whole log, its line count too
        return old == new
    return any(a[k:] == b[: len(a) - k] for k in range(len(a) + 1))


def findings(rep: HostReport, pids: tuple[int, ...]) -> tuple[Any, ...]:
    """Each finding with its numbers that are no PID of the tree masked (an age, a duration); a note
    of OOM kills outside the tree is left out (another tenant's next kill may land between reads)."""
    keep = {str(p) for p in pids}

    def mask(text: str) -> str:
        return re.sub(r"\d+(\.\d+)?", lambda m: m.group(0) if m.group(0) in keep else "#", text)

    return tuple(
        sorted(
            (f.rule, f.code, f.severity, f.pids, mask(f.summary))
            for f in rep.findings
            if f.rule != "oom-killed-child" or set(f.pids) & set(pids)
        )
    )


def previous_bound_spent(old: HostSnapshot) -> bool:
    """The previous probe read the threads of the newest 192 multi-threaded processes, 2048 threads in
    all, the job's no sooner than any other's (this one reads the job's first): on a host running more,
    such as this machine under a full suite, the tree's ranks may be past its bound."""
    read = [p for p in old.processes if p.threads_detail]
    return len(read) >= 192 or sum(len(p.threads_detail) for p in read) >= MAX_THREADS - 64


def align(a: dict[str, Any], b: dict[str, Any], old: HostSnapshot) -> None:
    """What only this probe reads, set on the previous one's processes: the environ of a single-threaded
    process beside a multi-threaded one of the same parent and program (a rank whose threads ended);
    and a multi-threaded one's threads (and environ) where the previous probe's bound was spent (a full
    suite's run here read a rank's threads with this probe and not with the previous one)."""
    siblings = {(p.ppid, p.comm) for p in b["processes"].values() if p.threads > 1}
    spent = previous_bound_spent(old)
    for pid, p in b["processes"].items():
        was = a["processes"].get(pid)
        if was is None:
            continue
        if p.threads == 1 and (p.ppid, p.comm) in siblings and not was.env and p.env:
            a["processes"][pid] = dataclasses.replace(was, env=p.env)
        elif spent and p.threads > 1 and not was.threads_detail and p.threads_detail:
            a["processes"][pid] = dataclasses.replace(was, threads_detail=p.threads_detail, env=was.env or p.env)


SHELLS = {"dash": ["dash"], "bash": ["bash"], "busybox": ["busybox", "sh"]}


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_the_probe_sees_what_the_previous_one_saw(
    shell: str, tree: tuple[Path, tuple[int, ...]], tmp_path: Path
) -> None:
    if shutil.which(SHELLS[shell][0]) is None:
        pytest.skip(f"{shell} is not installed")
    tmp, pids = tree
    params = ProbeParams(sample=0.2, logs=(str(tmp / "job.log"),), artifacts=(f"{tmp}/*",), job_pids=pids[:1])
    new_script, old_script = render_script(params), render_previous(params)
    assert new_script != old_script  # the test compares two probes, not one with itself
    # another test on this machine may move a shared table, or an age may cross a rule's threshold,
    # between the two reads: then they are taken again (twice more: a clean-clone CI at 0c29d20 saw two
    # pairs differ under four workers' load; what differed is now printed field by field)
    for attempt in range(3):
        old = snapshot(run(old_script, SHELLS[shell]), params)
        new = snapshot(run(new_script, SHELLS[shell]), params)
        a, b = comparable(old, pids, tmp), comparable(new, pids, tmp)
        align(a, b, old)
        old_report, new_report = report(old, pids), report(new, pids)
        said = [(findings(r, pids), r.verdict, exit_code([r])) for r in (old_report, new_report)]
        agree = logs_agree(old.kernel_log, new.kernel_log)
        if (a == b and said[0] == said[1] and agree) or attempt == 2:
            break
        time.sleep(0.5)
    assert set(a["processes"]) == set(pids), "the tree is not all in the snapshot"
    for key in a:
        assert a[key] == b[key], f"{key} differ:\n{difference(a[key], b[key])}"
    assert agree, f"kernel logs differ:\nprevious: {old.kernel_log}\nnow:      {new.kernel_log}"
    # the states are there to judge: a stopped child, a pipe writer, two crossed flocks, a zombie,
    # ranks with their variables, a socket waiter
    states = {p.samples[0].state for p in a["processes"].values()}
    assert {"T", "Z", "S"} <= states, states
    assert any(dict(p.env).get("RANK") == "1" for p in a["processes"].values())
    assert a["sockets"] and a["locks"] and a["held_files"] and a["flight_dumps"]
    assert "planted" not in repr(new) and "planted" not in repr(old)  # an environ's other variables
    # the same findings, verdict and exit code
    assert said[0][0] == said[1][0], f"findings differ:\nprevious: {said[0][0]}\nnow:      {said[1][0]}"
    assert said[0][1:] == said[1][1:], said
    assert old_report.findings  # the rules had something to say of the tree
