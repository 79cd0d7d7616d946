"""disk-full on a real, really full filesystem: a 1 MiB tmpfs the test mounts."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import vastprobe_json


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
