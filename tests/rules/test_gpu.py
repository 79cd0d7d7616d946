"""idle-gpu and gpu-driver-error against a stand-in nvidia-smi on PATH (this machine has no GPU),
and gpu-xid on kernel-log lines in the real format."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_probe_raw
from vastprobe.analysis.scope import compute_scope
from vastprobe.model import FdEntry, HostSnapshot
from vastprobe.parsers import kmsg
from vastprobe.parsers.snapshot import build_snapshot
from vastprobe.probe.render import ProbeParams
from vastprobe.probe.sections import split_sections
from vastprobe.rules.base import RuleOptions
from vastprobe.rules.engine import run_rules, verdict

STANDINS = Path(__file__).resolve().parent.parent / "standins"


def gpu_env(scenario: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{STANDINS}:{os.environ['PATH']}", "VASTPROBE_STANDIN_GPU": scenario}


def snapshot_with(scenario: str, sample: float = 0.2, nvsmi_timeout: int = 8) -> HostSnapshot:
    params = ProbeParams(sample=sample, nvidia_smi_timeout=nvsmi_timeout)
    raw = run_probe_raw(params, env=gpu_env(scenario))
    return build_snapshot(split_sections(raw, params.boundary), params, "local", "local", len(raw))


def findings(snap: HostSnapshot, expect_gpu: bool | None = None, pids: tuple[int, ...] = ()):
    scope = compute_scope(snap, pids)
    return run_rules(snap, scope, RuleOptions(expect_gpu=expect_gpu))


def diagnose(scenario: str, *args: str) -> tuple[int, dict]:
    import json

    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", *args],
                       capture_output=True, text=True, env=gpu_env(scenario), timeout=120)  # fmt: skip
    return r.returncode, json.loads(r.stdout)["hosts"][0]


def test_memory_held_no_kernels_is_hung() -> None:
    rc, host = diagnose("hung", "--sample", "0.3", "--pid", "1")
    f = next(f for f in host["findings"] if f["rule"] == "idle-gpu")
    assert f["severity"] == "error" and "runs no kernels" in f["summary"] and rc == 1
    assert host["snapshot"]["gpus"]["apps"][0]["pid"] == 4242


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


def test_xid_during_the_job_is_critical() -> None:
    snap = snapshot_with("busy")
    snap = _with_kernel_lines(snap, XID, at=snap.host.uptime)  # logged just now
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
