"""disk-full on a real, really full filesystem: a 1 MiB tmpfs the test mounts."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import vastprobe_json
from vastprobe.model import DiskUsage
from vastprobe.rules import disk_full

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_fs(tmp_path: Path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)]).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def test_full_filesystem_of_a_log(tiny_fs: Path) -> None:
    log = tiny_fs / "job.log"
    with open(log, "wb") as f, contextlib.suppress(OSError):
        f.write(b"x" * (2 * 1024 * 1024))
    rc, host = vastprobe_json("--pid", "1", "--sample", "0", "--log", str(log), "--stale-after", "100000")
    f = next(f for f in host["findings"] if f["rule"] == "disk-full")
    assert f["severity"] == "error" and str(tiny_fs) in f["summary"] and rc == 1


def test_roomy_filesystem_is_fine(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("ok\n")
    _rc, host = vastprobe_json("--pid", "1", "--sample", "0", "--log", str(log))
    assert not [f for f in host["findings"] if f["rule"] == "disk-full"]


def test_a_small_filesystem_mostly_free_is_not_full(reap, tmp_path: Path) -> None:
    """A 64 MiB tmpfs (docker's /dev/shm) holding a job's fresh log read "is full" at 0.0% used,
    STALLED: under 256 MiB free counts only on a filesystem 90% used (found by a helper)."""
    mnt = tmp_path / "shm"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)]).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        log = mnt / "job.log"
        log.write_text("step 1\n")
        job = subprocess.Popen(["sleep", "600"], start_new_session=True)  # the job: PID 1's tree is everyone's
        reap.append(job)
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0", "--log", str(log), "--stale-after", "100000")
        assert not [f for f in host["findings"] if f["rule"] == "disk-full"], host["findings"]
        assert rc == 0 and host["verdict"] != "stalled"
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


# ---------------------------------------------------------------- a full filesystem the job may not write

#: A private mount namespace whose /tmp is a full 1 MiB tmpfs (`free_kb` left): the job's processes,
#: started with `job` in it, and vastprobe, run in it last, see the same /tmp (the job is named by
#: its command line, which holds `marker`).
_FULL_TMP = r"""
set -e
mount --bind /tmp {old}
mount -t tmpfs -o size=1m tmpfs /tmp
for keep in {keeps}; do mkdir -p "$keep"; mount --bind "{old}${{keep#/tmp}}" "$keep"; done
dd if=/dev/zero of=/tmp/fill bs=1k count=$(( 1024 - {free_kb} )) 2>/dev/null || true
{job} </dev/null >/dev/null 2>&1 &
echo $! > {pidfile}
i=0; while [ ! -e {ready} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
exec "$@"
"""


def _under_tmp() -> list[str]:
    """The checkout and the Python running the tests where they lie under /tmp (a CI clone, its venv):
    bound back below the full /tmp, or vastprobe could not start there (a clean clone's CI failed so)."""
    need = {str(ROOT), sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    return sorted(p for p in need if p.startswith("/tmp/"))


def _in_full_tmp(job: str, ready: str, free_kb: int, *args: str) -> tuple[int, dict]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a private /tmp")
    pidfile = Path("/dev/shm") / f"vp-disk-full-{os.getpid()}.pid"
    old = Path("/dev/shm") / f"vp-disk-full-{os.getpid()}.tmp"  # the real /tmp, bound back below the full one
    old.mkdir(exist_ok=True)
    keeps = " ".join(shlex.quote(k) for k in _under_tmp())
    script = _FULL_TMP.format(job=job, ready=ready, free_kb=free_kb, pidfile=pidfile, old=old, keeps=keeps)
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
           sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", *args]  # fmt: skip
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        pidfile.unlink(missing_ok=True)
        old.rmdir()
    if "mount" in r.stderr and not r.stdout:
        pytest.skip(f"cannot mount a private /tmp: {r.stderr.strip()[:200]}")
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)["hosts"][0]


def _disk_full(host: dict) -> dict:
    found = [f for f in host["findings"] if f["rule"] == "disk-full"]
    assert len(found) == 1, host["findings"]
    return found[0]


def test_a_full_tmp_the_job_writes_nothing_on_is_a_warning(tmp_path: Path) -> None:
    """The job logs to another filesystem (here /dev/shm, not the private /tmp): a full /tmp read
    STALLED, exit 1, for a job whose log kept growing (found by a helper)."""
    log = Path("/dev/shm") / f"vp-disk-full-{os.getpid()}.log"
    ready = f"/dev/shm/vp-disk-full-{os.getpid()}.ready"
    job = f"sh -c 'exec >>{log}; touch {ready}; while :; do echo step; sleep 0.05; done' vp-roomy-job"
    try:
        rc, host = _in_full_tmp(job, ready, 0, "--match", "vp-roomy-job", "--sample", "0.3")
    finally:
        log.unlink(missing_ok=True)
        Path(ready).unlink(missing_ok=True)
    f = _disk_full(host)
    assert f["summary"] == "/tmp is full" and f["severity"] == "warning", f
    assert any("no log of the job is on it" in e["detail"] for e in f["evidence"]), f
    assert rc == 0 and host["verdict"] == "degraded", host["findings"]


def test_a_full_tmp_the_jobs_log_is_on_is_a_stall() -> None:
    """The control: the job's stdout is /tmp/job.out (its log, found open) and nothing grows."""
    ready = "/tmp/job.out"
    job = "sh -c 'exec >>/tmp/job.out; while :; do sleep 1; done' vp-tmp-writer"
    rc, host = _in_full_tmp(job, ready, 0, "--match", "vp-tmp-writer", "--sample", "0.3")
    f = _disk_full(host)
    assert f["summary"] == "/tmp is full" and f["severity"] == "error", f
    assert any("/tmp/job.out, the job's log (found open), is on it" in e["detail"] for e in f["evidence"]), f
    assert rc == 1 and host["verdict"] == "stalled", host["findings"]


def test_a_lock_file_alone_on_a_full_tmp_is_a_warning() -> None:
    """A cron job holds only its lock file on the full /tmp (`exec 9>/tmp/job.lock`), and works
    elsewhere: a file held for writing is no write that fails, and it read STALLED (found by a helper)."""
    ready = "/tmp/job.lock"
    job = "sh -c 'exec 9>/tmp/job.lock; exec >/dev/null; while :; do sleep 1; done' vp-tmp-locker"
    rc, host = _in_full_tmp(job, ready, 0, "--match", "vp-tmp-locker", "--sample", "0.3")
    f = _disk_full(host)
    assert f["summary"] == "/tmp is full" and f["severity"] == "warning", f
    assert rc == 0 and host["verdict"] == "degraded", host["findings"]


def test_a_log_still_growing_on_a_nearly_full_filesystem_is_a_warning() -> None:
    """12 KiB left of 1 MiB (98.8% used): the job's log on it grows between the samples, so its
    writes still land."""
    ready = "/tmp/grow.log"
    job = "sh -c 'exec >>/tmp/grow.log; while :; do echo step; sleep 0.05; done' vp-tmp-grower"
    rc, host = _in_full_tmp(job, ready, 12, "--match", "vp-tmp-grower", "--log", "/tmp/grow.log", "--sample", "0.5")
    f = _disk_full(host)
    assert f["summary"] == "/tmp is full" and f["severity"] == "warning", f
    assert any("grew between the samples" in e["detail"] for e in f["evidence"]), f
    assert rc == 0 and host["verdict"] != "stalled", host["findings"]


@pytest.mark.parametrize(
    ("size_gib", "used_pct", "error"),
    [(200, 98.1, False), (200, 99.0, False), (200, 99.95, True), (1, 99.0, True), (1, 91.0, False)],
)
def test_full_means_no_room_left_not_a_share(size_gib: int, used_pct: float, error: bool) -> None:
    """A 200 GiB volume at 98% has GiBs free: filling up, not out of room (the helper's case read
    STALLED with 3.8 GiB free)."""
    size = size_gib * 1024 * 1024
    used = int(size * used_pct / 100)
    d = DiskUsage("/dev/x", "/data", size, used, size - used, None, None, None)
    _evidence, filling, full = disk_full._problems(d)
    assert filling and full is error
