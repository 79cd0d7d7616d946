"""apt-get waiting for the package system's lock (`DPkg::Lock::Timeout`), with the real apt-get: a
retry loop that sleeps between attempts and holds neither the lock nor the file in between, so no
kernel wait names it. vastprobe names the process holding a write lock while it has the frontend
lock file open. The machine's own apt state is not touched: the admin directory (and so the lock
files), the state and the cache are moved into the test's directory with -o."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import proc_wchan, vastprobe_json, wait_for

pytestmark = pytest.mark.skipif(
    shutil.which("apt-get") is None or not Path("/var/lib/dpkg/status").exists(), reason="needs apt-get and dpkg"
)

HOLD = """
import fcntl, os, signal, sys
for path in sys.argv[1:]:            # apt-get at its prompt holds the frontend lock and dpkg's `lock`
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX)   # what apt and dpkg take: an fcntl write lock
print("held", flush=True)
signal.pause()                       # stuck (asleep on a timer it would wake by itself: no proof)
"""


def apt_get(tmp: Path) -> list[str]:
    """apt-get install of a package that is installed already: a no-op once it has the lock."""
    (tmp / "cache" / "archives" / "partial").mkdir(parents=True)
    shutil.copy("/var/lib/dpkg/status", tmp / "status")
    return [
        "apt-get", "-q", "-y",
        "-o", f"Dir::State={tmp}", "-o", f"Dir::State::status={tmp}/status",
        "-o", "Dir::State::Lists=/var/lib/apt/lists", "-o", f"Dir::Cache={tmp}/cache",
        "-o", "DPkg::Lock::Timeout=600", "install", "dpkg",
    ]  # fmt: skip


@pytest.mark.parametrize("sample", ["1", "0"])
def test_apt_get_waiting_for_the_frontend_lock_names_its_holder(reap, tmp_path: Path, sample: str) -> None:
    lock = tmp_path / "lock-frontend"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "lock"), str(lock)], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    reap.append(holder)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    out = tmp_path / "apt.out"
    with out.open("w") as f:
        job = subprocess.Popen(apt_get(tmp_path), stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: "Could not get lock" in out.read_text() and proc_wchan(job.pid).endswith("nanosleep"),
             timeout=60, what=lambda: f"apt-get retrying the lock: exit {job.poll()}, wait channel "
             f"{proc_wchan(job.pid)!r}, it wrote {out.read_text()[-2000:]!r}")  # fmt: skip
    try:
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
        found = [f for f in host["findings"] if f["rule"] == "file-lock-wait"]
        assert found, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        f = found[0]
        assert f"keeps retrying the lock on {lock}, held by {holder.pid} (python" in f["summary"], f["summary"]
        assert "Never delete the lock file" in f["hint"]
        # two samples: the holder idled the whole window holding the lock, proven stuck (exit 1)
        assert f["severity"] == ("error" if sample == "1" else "info")
        assert (rc, host["verdict"]) == ((1, "stalled") if sample == "1" else (0, "healthy")), host["headline"]
    finally:
        job.kill()  # before the lock is let go: apt-get must not go on to do anything
        job.wait()


def test_apt_get_with_nobody_holding_the_lock_is_no_finding(reap, tmp_path: Path) -> None:
    """The control: a sleeping process with a lock file open that nobody holds a lock on."""
    lock = tmp_path / "lock-frontend"
    lock.write_text("")
    job = subprocess.Popen(["bash", "-c", f"exec 3<{lock}; sleep 600"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).endswith("nanosleep"), what="the sleeper")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    assert not [f for f in host["findings"] if f["rule"] == "file-lock-wait"] and rc == 0
