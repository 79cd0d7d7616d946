"""GPU rules against a stand-in nvidia-smi on PATH (this machine has no GPU: tests/standins/nvidia-smi,
whose output follows published captures), real processes of this machine as the job, and kernel-log
lines in the real format (fixtures/kmsg)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import children_of, local_snapshot, proc_state, proc_wchan, run_probe_raw, wait_for
from vastprobe.analysis.scope import compute_scope
from vastprobe.model import FdEntry, HostSnapshot, verdict
from vastprobe.parsers import kmsg
from vastprobe.parsers.snapshot import build_snapshot
from vastprobe.probe.script import ProbeParams
from vastprobe.probe.sections import split_sections
from vastprobe.rules.base import RuleOptions
from vastprobe.rules.engine import run_rules

STANDINS = Path(__file__).resolve().parent.parent / "standins"


def gpu_env(scenario: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{STANDINS}:{os.environ['PATH']}", "VASTPROBE_STANDIN_GPU": scenario}


def snapshot_with(
    scenario: str, sample: float = 0.2, nvsmi_timeout: int = 8, logs: tuple[str, ...] = (), app_pid: int | None = None
) -> HostSnapshot:
    params = ProbeParams(sample=sample, nvidia_smi_timeout=nvsmi_timeout, logs=logs)
    env = gpu_env(scenario)
    if app_pid is not None:
        env["VASTPROBE_STANDIN_APP_PID"] = str(app_pid)
    raw = run_probe_raw(params, env=env)
    return build_snapshot(split_sections(raw, params.boundary), params, "local", "local", len(raw))


def findings(
    snap: HostSnapshot, expect_gpu: bool | None = None, pids: tuple[int, ...] = (), expect_gpus: int | None = None
):
    scope = compute_scope(snap, pids)
    return run_rules(
        snap, scope, RuleOptions(expect_gpu=expect_gpu, expect_gpus=expect_gpus, explicit_scope=bool(pids))
    )


def diagnose(scenario: str, *args: str) -> tuple[int, dict]:
    import json

    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", *args],
                       capture_output=True, text=True, env=gpu_env(scenario), timeout=120)  # fmt: skip
    return r.returncode, json.loads(r.stdout)["hosts"][0]


def test_memory_held_no_kernels_is_hung() -> None:
    rc, host = diagnose("hung", "--sample", "0.3", "--pid", "1", "--snapshot")
    f = next(f for f in host["findings"] if f["rule"] == "idle-gpu")
    assert f["severity"] == "error" and "runs no kernels" in f["summary"] and rc == 1
    assert host["snapshot"]["gpus"]["apps"][0]["pid"] == 4242


#: An inference server with no requests: its model loaded, it waits in accept()
_IDLE_SERVER = (
    "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8); print('ready', flush=True); s.accept()"
)
#: The same program hung outside any request: a wait nothing ends
_HUNG = "import signal; print('ready', flush=True); signal.pause()"
#: A trainer hung on the GPU, forked by a program whose main thread waits in accept() (a notebook kernel)
_UNDER_A_SERVER = (
    "import os, signal, socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\n"
    "if os.fork() == 0:\n    print('ready', flush=True); signal.pause()\ns.accept()"
)
#: An inference server: the API process listens, its engine (forked: the same program) holds the GPU
#: and waits on a connection to the API process for its next piece of work
_ENGINE = (
    "import os, socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8); a, b = socket.socketpair()\n"
    "if os.fork() == 0:\n    print('ready', flush=True); b.recv(1)\ns.accept()"
)
#: A server whose event loop read a client's request and never answers (its engine hung), the client
#: waiting on it
_IN_FLIGHT = (
    "import selectors, socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\n"
    "c = socket.create_connection(s.getsockname()); c.sendall(b'infer'); a, _ = s.accept(); a.recv(5)\n"
    "import os\nif os.fork() == 0:\n    c.recv(1); os._exit(0)\n"
    "sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ); sel.register(a, selectors.EVENT_READ)\n"
    "print('ready', flush=True); sel.select()"
)


@pytest.mark.parametrize("program", ["server", "engine", "in-flight", "hung", "under-a-server"])
def test_an_idle_inference_server_holding_gpu_memory_is_not_stalled(program: str) -> None:
    """Found by a helper: a server in accept() with its model in GPU memory and no request to run read
    STALLED, exit 1 (idle-gpu), while the same idle server's quiet log was no finding at all; and its
    engine, a worker it forked waiting on it for work (found by a helper). A hung trainer a
    notebook-kernel-like server forked, in a lock wait, is the stall it was (found by a helper)."""
    code = {"server": _IDLE_SERVER, "hung": _HUNG, "under-a-server": _UNDER_A_SERVER, "in-flight": _IN_FLIGHT,
            "engine": _ENGINE}[program]  # fmt: skip
    job = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "ready"
        gpu = next(iter(children_of(job.pid)), job.pid) if program in ("under-a-server", "engine") else job.pid
        wait_for(lambda: proc_state(gpu) == "S", what="the program waiting")
        env = {**gpu_env("hung"), "VASTPROBE_STANDIN_APP_PID": str(gpu)}
        r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json",
                            "--pid", str(gpu)], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
        rc, host = r.returncode, json.loads(r.stdout)["hosts"][0]
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    (f,) = [f for f in host["findings"] if f["rule"] == "idle-gpu"]
    if program in ("server", "engine", "in-flight"):
        # in-flight: its client waits on a request the server read; an idle keep-alive looks the same in
        # /proc (docs/evidence.md), and an idle server with one read STALLED in a second version
        assert f["severity"] == "info" and f["summary"].endswith("its holder is a server waiting for requests"), f
        # the engine's and the client's waits are a note or a warning (no proof), never the idle GPU's stall
        assert host["verdict"] in ("healthy", "degraded") and rc == 0, host["findings"]
    else:
        assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, host["findings"]


def test_busy_gpu_is_fine() -> None:
    _rc, host = diagnose("busy", "--sample", "0.3", "--pid", "1", "--expect-gpu")
    assert not [f for f in host["findings"] if f["rule"].startswith(("idle-gpu", "gpu-"))]


def test_nothing_on_the_gpu_when_expected() -> None:
    snap = snapshot_with("empty")
    got = [f for f in findings(snap, expect_gpu=True) if f.rule == "idle-gpu"]
    assert got and "nothing on it" in got[0].summary
    assert not [f for f in findings(snap, expect_gpu=None) if f.rule == "idle-gpu"]  # auto: nothing says it should


def test_auto_expectation_from_dev_nvidia_holders() -> None:
    snap = snapshot_with("empty")
    p = next(p for p in snap.processes if p.pid not in snap.excluded_pids and not p.kernel_thread)
    held = dataclasses.replace(p, fds=(FdEntry(fd=7, target="/dev/nvidia0", mode="rw"),))
    snap = dataclasses.replace(snap, processes=tuple(held if x.pid == p.pid else x for x in snap.processes))
    got = [f for f in findings(snap, pids=(p.pid,)) if f.rule == "idle-gpu"]
    assert got and got[0].pids == (p.pid,)


def test_not_available_is_not_zero() -> None:
    snap = snapshot_with("na")
    assert not [f for f in findings(snap, expect_gpu=True) if f.rule == "idle-gpu"]


def test_no_nvidia_smi_never_idle_gpu() -> None:
    params = ProbeParams(sample=0.2)
    raw = run_probe_raw(params)
    snap = build_snapshot(split_sections(raw, params.boundary), params, "local", "local", len(raw))
    assert not snap.gpus.present
    assert not [f for f in findings(snap, expect_gpu=True) if f.rule in ("idle-gpu", "gpu-driver-error")]


def test_driver_error() -> None:
    rc, host = diagnose("nodriver", "--sample", "0.2", "--pid", "1")
    f = next(f for f in host["findings"] if f["rule"] == "gpu-driver-error")
    assert f["severity"] == "critical" and rc == 1
    assert any("9 (driver not loaded)" in e["detail"] for e in f["evidence"])
    assert not [x for x in host["findings"] if x["rule"] == "idle-gpu"]


@pytest.mark.slow
def test_hanging_nvidia_smi_is_bounded_and_reported() -> None:
    import time

    t0 = time.monotonic()
    snap = snapshot_with("hang", sample=0.2, nvsmi_timeout=2)
    assert time.monotonic() - t0 < 10  # one timeout, the later calls skipped
    got = [f for f in findings(snap) if f.rule == "gpu-driver-error"]
    assert got and "timed out" in got[0].summary + str(got[0].evidence)


XID = [
    "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:18:00): 13, pid=1234, name=python, Graphics Exception: ESR 0x1",
]


def _with_kernel_lines(snap: HostSnapshot, lines: list[str], at: float) -> HostSnapshot:
    text = "@@source dmesg\n" + "\n".join(f"[{at:12.6f}] {line}" for line in lines) + f"\n@@lines {len(lines)}\n"
    log = kmsg.parse_kmsg_sections(text, None, snap.host.btime if isinstance(snap.host.btime, int) else None)
    return dataclasses.replace(snap, kernel_log=log)


def _absent_pid(snap: HostSnapshot) -> int:
    """A pid no process of this live snapshot has: the Xid's pid= must name nobody on this machine
    (pid 1234 was a real process here once, and the Xid became another user's, info)."""
    taken = {p.pid for p in snap.processes}
    return next(pid for pid in range(4_000_000, 4_100_000) if pid not in taken)


def test_xid_during_the_job_is_critical() -> None:
    snap = snapshot_with("busy")
    lines = [line.replace("pid=1234", f"pid={_absent_pid(snap)}") for line in XID]
    snap = _with_kernel_lines(snap, lines, at=snap.host.uptime)  # logged just now
    got = {
        f.summary.split(" on ")[0]: f for f in findings(snap, pids=(snap.probe.shell_pid or 0,)) if f.rule == "gpu-xid"
    }
    assert got["Xid 79"].severity == "critical" and "reboot" in (got["Xid 79"].hint or "")
    assert got["Xid 13"].severity == "error"


def test_xid_before_the_watched_processes_is_context() -> None:
    snap = snapshot_with("busy")
    snap = _with_kernel_lines(snap, XID, at=0.5)  # half a second after boot
    p = max(
        (p for p in snap.processes if not p.kernel_thread and p.pid not in snap.excluded_pids),
        key=lambda p: p.starttime,
    )
    fs = [f for f in findings(snap, pids=(p.pid,)) if f.rule == "gpu-xid"]
    assert fs and all(f.severity == "info" for f in fs)
    assert verdict(tuple(f for f in fs)) == "healthy"


# ---------------------------------------------------------------- everything GPU, on a host without one

GPU_RULES = ("idle-gpu", "gpu-xid", "gpu-driver-error", "gpu-busy-no-progress", "gpu-throttled",
             "gpu-link-degraded", "gpu-memory-errors", "gpu-missing", "gpu-nvswitch-error")  # fmt: skip


def test_no_gpu_finding_on_a_host_without_gpus() -> None:
    """This machine: no nvidia-smi, no /dev/nvidia<N>, a kernel log full of other hosts' noise.
    Even Xid and SXid lines in its log (a container on a GPU host can read them) give no finding."""
    params = ProbeParams(sample=0.2)
    raw = run_probe_raw(params)
    snap = build_snapshot(split_sections(raw, params.boundary), params, "local", "local", len(raw))
    assert not snap.gpus.present and snap.gpus.device_nodes == ()
    assert not [f for f in findings(snap, expect_gpu=True) if f.rule in GPU_RULES if f.rule != "idle-gpu"]
    assert not [f for f in findings(snap) if f.rule in GPU_RULES]
    noisy = _with_kernel_lines(snap, [*XID, "nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 20034, Fatal, Link 30"], 5.0)
    assert not [f for f in findings(noisy) if f.rule in GPU_RULES]


def test_expect_gpus_on_a_host_without_gpus() -> None:
    snap = local_snapshot(ProbeParams(sample=0))
    (f,) = [f for f in findings(snap, expect_gpus=1) if f.rule == "gpu-missing"]
    assert f.severity == "critical" and "0 of the 1 expected" in f.summary


# ---------------------------------------------------------------- gpu-busy-no-progress


@pytest.fixture
def job_log(tmp_path: Path) -> Path:
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.31\n")
    return log


def _busy_findings(job: subprocess.Popen, log: Path) -> list:
    snap = snapshot_with("busylowpower", sample=0.6, logs=(str(log),), app_pid=job.pid)
    return [f for f in findings(snap, pids=(job.pid,)) if f.rule == "gpu-busy-no-progress"]


def _spawn(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_busy_low_power_with_a_stalled_job_is_a_hung_collective(job_log: Path) -> None:
    job = _spawn(sys.executable, "-c", "import threading; threading.Event().wait()")
    try:
        # its wait, not its start: asleep while the interpreter loads, it was read in no futex (a CI run)
        wait_for(lambda: proc_wchan(job.pid) == "futex_do_wait", what="the job to block on its Event")
        (f,) = _busy_findings(job, job_log)
    finally:
        job.kill()
        job.wait()
    assert f.severity == "error" and f.pids == (job.pid,) and "collective" in f.summary
    text = " ".join(e.detail for e in f.evidence)
    assert "100% at 71 W of 700 W" in text and "did not grow" in text
    assert f"{job.pid} (python" in text and "waits in" in text and "futex" in text


def test_not_raised_when_the_job_log_grows(job_log: Path) -> None:
    job = _spawn("sh", "-c", f"while :; do echo step >> '{job_log}'; sleep 0.05; done")
    try:
        assert not _busy_findings(job, job_log)
    finally:
        job.kill()
        job.wait()


def test_not_raised_when_the_job_cpu_moves(job_log: Path) -> None:
    job = _spawn(sys.executable, "-c", "while True: pass")
    try:
        assert not _busy_findings(job, job_log)
    finally:
        job.kill()
        job.wait()


def test_not_raised_at_full_power_or_without_power_readings(job_log: Path) -> None:
    job = _spawn("sleep", "600")
    try:
        for scenario in ("busy", "na", "mig"):
            snap = snapshot_with(scenario, sample=0.3, logs=(str(job_log),), app_pid=job.pid)
            got = [f.rule for f in findings(snap, expect_gpu=True, pids=(job.pid,))]
            assert "gpu-busy-no-progress" not in got and "idle-gpu" not in got, (scenario, got)
    finally:
        job.kill()
        job.wait()


def test_busy_no_progress_through_the_cli_without_a_log() -> None:
    job = _spawn("sleep", "600")
    try:
        env = {**gpu_env("busylowpower"), "VASTPROBE_STANDIN_APP_PID": str(job.pid)}
        r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json",
                            "--sample", "0.4", "--pid", str(job.pid)], capture_output=True, text=True, env=env,
                           timeout=120)  # fmt: skip
        host = json.loads(r.stdout)["hosts"][0]
    finally:
        job.kill()
        job.wait()
    (f,) = [f for f in host["findings"] if f["rule"] == "gpu-busy-no-progress"]
    assert f["severity"] == "warning" and f["code"] == "VP120"  # no --log: the logs could not be checked
    assert any("no --log" in e["detail"] for e in f["evidence"])


#: A trainer's CPU side while its GPU computes: both threads asleep in a blocking sync (poll with no
#: timeout), its log written at each epoch's end
_SYNCING = (
    "import select, sys, threading; print('epoch 1 loss 2.31', flush=True); "
    "threading.Thread(target=lambda: select.select([], [], [])).start(); select.select([], [], [])"
)


@pytest.mark.parametrize("named", ["log", "found"])
def test_a_job_whose_gpu_computes_behind_a_quiet_log_is_not_stalled(tmp_path: Path, named: str) -> None:
    """Found by a helper: a trainer whose epoch logs at its end, its GPU at 91% of its power limit,
    read STALLED (missing-logs: the job did not move) with and without --log."""
    log = tmp_path / "train.log"
    with log.open("w") as out:
        job = subprocess.Popen([sys.executable, "-c", _SYNCING], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: log.stat().st_size > 0 and proc_wchan(job.pid) != "", what="the job to log and block")
        old = time.time() - 600
        os.utime(log, (old, old))
        got = {}
        for scenario in ("busy", "hung"):
            env = {**gpu_env(scenario), "VASTPROBE_STANDIN_APP_PID": str(job.pid)}
            args = ("--log", str(log)) if named == "log" else ()
            r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json",
                                "--pid", str(job.pid), *args], capture_output=True, text=True, env=env,
                               timeout=120)  # fmt: skip
            got[scenario] = (r.returncode, json.loads(r.stdout)["hosts"][0])
    finally:
        job.kill()
        job.wait()
    rc, host = got["busy"]
    (f,) = [f for f in host["findings"] if f["rule"] == "missing-logs"]
    assert f["severity"] == "warning" and f["summary"].endswith("the log is quiet while it computes"), f
    assert any("draws 512 W of its 700 W limit in every sample" in e["detail"] for e in f["evidence"]), f
    assert host["verdict"] == "degraded" and rc == 0, host["findings"]
    # the same job beside a GPU that runs nothing is still the stall it was
    rc, host = got["hung"]
    (f,) = [f for f in host["findings"] if f["rule"] == "missing-logs"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, host["findings"]


# ---------------------------------------------------------------- more of nvidia-smi


def test_throttled_link_and_memory_errors() -> None:
    got = {f.rule: f for f in findings(snapshot_with("throttled"), expect_gpu=True)}
    assert "hardware thermal slowdown" in got["gpu-throttled"].summary and got["gpu-throttled"].severity == "warning"
    got = {f.rule: f for f in findings(snapshot_with("link"))}
    assert "x8 of x16" in got["gpu-link-degraded"].summary and "gen 1 of gen 5" in got["gpu-link-degraded"].summary
    got = {f.rule: f for f in findings(snapshot_with("ecc"))}
    mem = got["gpu-memory-errors"]
    assert mem.severity == "critical" and "row remapping failed" in mem.summary and "3 volatile" in mem.summary
    assert not {"gpu-throttled", "gpu-link-degraded", "gpu-memory-errors"} & {
        f.rule for f in findings(snapshot_with("busy"), expect_gpu=True)
    }


def test_a_gpu_nvidia_smi_cannot_open_is_missing_not_a_driver_error() -> None:
    snap = snapshot_with("lost")
    assert snap.gpus.unreachable == ("0000:3b:00",) and snap.gpus.error is None and len(snap.gpus.samples) == 2
    got = {f.rule: f for f in findings(snap)}
    assert got["gpu-missing"].severity == "critical" and "gpu-driver-error" not in got


def test_expect_gpus_counts_the_gpus_that_answer() -> None:
    snap = snapshot_with("busy")
    assert not [f for f in findings(snap, expect_gpus=1) if f.rule == "gpu-missing"]
    (f,) = [f for f in findings(snap, expect_gpus=8) if f.rule == "gpu-missing"]
    assert "only 1 of the 8 expected" in f.summary


def test_more_device_nodes_than_answering_gpus() -> None:
    snap = snapshot_with("busy")
    snap = dataclasses.replace(snap, gpus=dataclasses.replace(snap.gpus, device_nodes=("/dev/nvidia0", "/dev/nvidia1")))
    (f,) = [f for f in findings(snap) if f.rule == "gpu-missing"]
    assert "1 GPU(s) answer but 2 /dev/nvidia<N> nodes exist" in f.summary


def test_old_driver_gets_the_older_field_set() -> None:
    snap = snapshot_with("olddriver")
    (g,) = snap.gpus.samples[0]
    assert snap.gpus.error is None and g.temperature_c == 61 and g.power_w == 512.4
    assert g.clock_event_reasons == 0 and g.power_limit_w is None  # the oldest set has no power.limit


def test_real_captures_raise_nothing_on_healthy_gpus() -> None:
    """Idle then loaded, as published (fixtures/nvidia-smi): an idle GPU's PCIe gen 1 and reason 0x1,
    a MIG GPU's [N/A] utilization, and a loaded GPU at full power are all healthy."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "nvsmi", STANDINS.parent.parent / "fixtures" / "nvidia-smi" / "expected.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from vastprobe.parsers.nvidia_smi import parse_gpu_query

    base = snapshot_with("busy")
    for case in (
        "h100-80gb-hbm3-590",
        "h100-mig-590",
        "h200-590",
        "l40s-595",
        "rtx-2080-super-595",
        "rtx-4080-super-595",
    ):
        for a, b in (("idle", "idle"), ("load", "load"), ("idle", "load")):
            s0 = tuple(parse_gpu_query((mod.HERE / case / f"query-gpu.{a}.csv").read_text())[0])
            s1 = tuple(parse_gpu_query((mod.HERE / case / f"query-gpu.{b}.csv").read_text())[0])
            snap = dataclasses.replace(base, gpus=dataclasses.replace(base.gpus, samples=(s0, s1)))
            got = [f.rule for f in findings(snap, expect_gpu=True) if f.rule in GPU_RULES and f.rule != "idle-gpu"]
            assert not got, (case, a, b, got)


# ---------------------------------------------------------------- Xid catalogue, pids, timing


def test_xid_pid_is_matched_to_the_job_on_the_host() -> None:
    job = _spawn("sleep", "600")
    try:
        snap = snapshot_with("busy", app_pid=job.pid)
        line = f"NVRM: Xid (PCI:0000:10:00): 31, pid={job.pid}, name=sleep, Ch 00000008, intr 00000000"
        snap = _with_kernel_lines(snap, [line], at=snap.host.uptime)
        (f,) = [f for f in findings(snap, pids=(job.pid,)) if f.rule == "gpu-xid"]
    finally:
        job.kill()
        job.wait()
    assert f.pids == (job.pid,) and f.severity == "error"
    assert any("is a watched process" in e.detail for e in f.evidence)
    assert any("points at the application" in e.detail for e in f.evidence)


def test_xid_pid_inside_a_container_is_matched_by_program_among_gpu_holders() -> None:
    """A container's /proc: no kernel threads, and the Xid's host pid names none of its processes."""
    snap = snapshot_with("busy")
    users = [p for p in snap.processes if not p.kernel_thread and p.pid not in snap.excluded_pids]
    holder = dataclasses.replace(users[0], fds=(FdEntry(fd=9, target="/dev/nvidia0", mode="rw"),))
    procs = tuple(holder if p.pid == holder.pid else p for p in snap.processes if not p.kernel_thread)
    snap = dataclasses.replace(snap, processes=procs)
    line = f"NVRM: Xid (PCI:0000:10:00): 13, pid=987654, name={holder.comm}, Graphics Exception"
    snap = _with_kernel_lines(snap, [line], at=snap.host.uptime)
    (f,) = [f for f in findings(snap, pids=(holder.pid,)) if f.rule == "gpu-xid"]
    assert f.pids == (holder.pid,) and any("only process here running it" in e.detail for e in f.evidence)


def test_xid_with_a_local_clock_long_before_the_job_is_context() -> None:
    """dmesg -T names no time zone: a stamp more than 14 hours before the job is still "before"."""
    job = _spawn("sleep", "600")
    try:
        snap = snapshot_with("busy")
    finally:
        job.kill()
        job.wait()
    ev = kmsg.parse_kernel_lines("[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, Timeout")
    snap = dataclasses.replace(snap, kernel_log=dataclasses.replace(snap.kernel_log, readable=True, events=ev))
    (f,) = [f for f in findings(snap, pids=(job.pid,)) if f.rule == "gpu-xid"]
    assert f.severity == "info" and any("before the watched" in e.detail for e in f.evidence)


def test_xid_154_takes_the_recovery_action_it_names_and_nvlink_the_line_word() -> None:
    snap = snapshot_with("busy")
    lines = [
        "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
        "NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001)",
        "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)",
    ]
    snap = _with_kernel_lines(snap, lines, at=snap.host.uptime)
    got = {f.summary.split(" (")[0]: f for f in findings(snap) if f.rule == "gpu-xid"}
    assert got["Xid 154 on GPU 0009:01:00"].severity == "critical" and "Drain and Reset" in (
        got["Xid 154 on GPU 0009:01:00"].hint or ""
    )
    assert got["Xid 149 on GPU 0018:01:00"].severity == "warning"
    assert got["Xid 149 on GPU 0019:01:00"].severity == "critical"


def test_fallen_off_the_bus_without_an_xid_is_a_missing_gpu() -> None:
    snap = snapshot_with("busy")
    lines = ["NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: fallen off the bus and is not responding to commands."]
    got = findings(_with_kernel_lines(snap, lines, at=snap.host.uptime))
    (f,) = [f for f in got if f.rule == "gpu-missing"]
    assert f.severity == "critical" and "0000:b3:00 fell off the bus" in f.summary
    assert not [f for f in got if f.rule == "gpu-xid"]
    with_xid = _with_kernel_lines(
        snap, [*lines, "NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus."], snap.host.uptime
    )
    rules = [f.rule for f in findings(with_xid)]
    assert "gpu-xid" in rules and "gpu-missing" not in rules  # one report: the Xid's


def test_nvswitch_sxid_severity_from_the_line() -> None:
    snap = snapshot_with("busy")
    lines = [
        "nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error",
    ]
    got = {
        f.summary.split(" on ")[0]: f
        for f in findings(_with_kernel_lines(snap, lines, snap.host.uptime))
        if f.rule == "gpu-nvswitch-error"
    }
    assert got["fatal SXid 20034"].severity == "critical" and got["non-fatal SXid 12028"].severity == "warning"


def test_xid_catalogue_in_rules_command_and_docs() -> None:
    from vastprobe.analysis.xid import CATALOGUE, SOURCES

    r = subprocess.run(
        [sys.executable, "-m", "vastprobe", "rules", "gpu-xid"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and "# gpu-xid (VP107, error)" in r.stdout
    assert "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in r.stdout and "docs.nvidia.com/deploy/xid-errors" in r.stdout
    doc = (STANDINS.parent.parent / "docs" / "rules" / "gpu-xid.md").read_text()
    for info in CATALOGUE.values():
        assert f"| {info.xid} | {info.mnemonic} |" in doc, info.xid  # docs/rules/gpu-xid.md lists every entry
    for key in SOURCES:
        assert f"[{key}]" in doc


def test_which_of_my_processes_uses_which_gpu_inside_a_container() -> None:
    """In a container nvidia-smi's pid is a host pid: the compute app is found by program among the
    processes holding /dev/nvidia*, never by a pid that happens to be equal."""
    from vastprobe.analysis.gpu import gpu_users, pid_view

    snap = snapshot_with("hung", sample=0.2)
    users = [p for p in snap.processes if not p.kernel_thread and p.pid not in snap.excluded_pids]
    holder = dataclasses.replace(users[0], comm="python3", fds=(FdEntry(fd=9, target="/dev/nvidia0", mode="rw"),))
    decoy = dataclasses.replace(users[1], pid=4242) if users[1].pid != 4242 else users[1]  # same number as the app
    procs = tuple(
        holder if p.pid == holder.pid else decoy if p.pid == users[1].pid else p
        for p in snap.processes
        if not p.kernel_thread
    )
    snap = dataclasses.replace(snap, processes=procs)
    assert pid_view(snap) == "container"
    scope = frozenset(p.pid for p in procs)
    (u,) = gpu_users(snap, scope)
    assert u.pid == holder.pid and u.gpu_uuid and "only process here running it" in u.how
    (f,) = [f for f in findings(snap, pids=tuple(scope)) if f.rule == "idle-gpu"]
    assert f.pids == (holder.pid,)


@pytest.mark.slow
def test_a_wedged_driver_names_the_tasks_asleep_inside_it() -> None:
    """nvidia-smi timed out (the stand-in hangs); a rank asleep in the driver (no driver here: its
    recorded wait channel is put on a real process of the snapshot) is named, D state first, with
    the hint that D state inside the driver needs a reset or a reboot."""
    snap = snapshot_with("hang", sample=0.2, nvsmi_timeout=2)
    user = next(p for p in snap.processes if not p.kernel_thread and p.state == "S")
    rank = dataclasses.replace(user, state="D", wchan="uvm_wait_for_thread_to_complete")
    snap = dataclasses.replace(snap, processes=tuple(rank if p.pid == user.pid else p for p in snap.processes))
    (f,) = [f for f in findings(snap) if f.rule == "gpu-driver-error"]
    assert f.pids[0] == rank.pid
    assert any(e.detail.startswith(f"{rank.pid} ({rank.comm}) D in uvm_wait") for e in f.evidence)
    assert "cannot be killed" in (f.hint or "")
