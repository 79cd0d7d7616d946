"""analysis/relevance.py through `diagnose local --artifacts`: a file is the job's only by evidence
(held open by it, the very file it runs, or named like its programs, written by its users since it
started); a file named alike that another user wrote, or that was there long before the job, is on
the host, not the job's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import wait_for


def test_files_named_like_the_job_are_its_only_by_its_user_and_time(tmp_path: Path, reap) -> None:
    prog = tmp_path / "vp-trainer"
    prog.symlink_to(shutil.which("sleep") or "/bin/sleep")
    out = tmp_path / "out"
    out.mkdir()
    old = out / "vp-trainer-2025.ckpt"  # the job's user, a day before the job: an earlier run's
    old.write_text("x")
    day_ago = time.time() - 86400
    os.utime(old, (day_ago, day_ago))
    job = subprocess.Popen([str(prog), "600"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: Path(f"/proc/{job.pid}/comm").read_text().strip() == "vp-trainer", what="the job")
    mine = out / "vp-trainer-step1.ckpt"  # the job's user, since it started
    mine.write_text("x")
    theirs = out / "vp-trainer-theirs.ckpt"  # another user's, named alike, since it started
    theirs.write_text("x")
    os.chown(theirs, 65534, 65534)
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(job.pid), "--sample", "0",
                        "--artifacts", f"{out}/*", "--format", "table"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"artifacts {out}/*: 3 matches, 1 the job's (-v lists all), the job's first" in r.stdout, r.stdout
    assert f"vp-trainer-step1.ckpt  named like vp-trainer ({job.pid}), of its user" in r.stdout, r.stdout
    assert "vp-trainer-theirs.ckpt" not in r.stdout and "vp-trainer-2025.ckpt" not in r.stdout, r.stdout
