"""A small memory cgroup for real OOM kills in tests (root only; v1 or v2)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

V1 = Path("/sys/fs/cgroup/memory")

#: A test that OOM-kills runs beside no other that does: the kernel lets 10 OOM reports through in
#: 5 s, and a report it drops leaves a kill with no cgroup, which kills of one program and size
#: elsewhere cannot be told from (test_seed_case named the wrong victim, and an OOM-sibling test
#: missed a kill, in 3 of 7 runs of four OOM modules on 4 workers with these tests side by side)
OOM_KILLS = pytest.mark.serial("oom-kills")
V2 = Path("/sys/fs/cgroup")


class MemoryCgroup:
    def __init__(self, limit_bytes: int) -> None:
        if os.geteuid() != 0:
            pytest.skip("real OOM kills need root to create a memory cgroup")
        name = f"vastprobe-test-{uuid.uuid4().hex[:8]}"
        if (V1 / "memory.limit_in_bytes").exists() and os.access(V1, os.W_OK):
            self.version = "v1"
            self.path = V1 / name
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
        elif (V2 / "cgroup.controllers").exists() and "memory" in (V2 / "cgroup.subtree_control").read_text():
            self.version = "v2"
            self.path = V2 / name
            self.path.mkdir()
            (self.path / "memory.max").write_text(str(limit_bytes))
            (self.path / "memory.swap.max").write_text("0")
        else:
            pytest.skip("no writable memory cgroup controller (v1 at /sys/fs/cgroup/memory, or v2 with memory enabled)")
        self.name = "/" + name

    def child(self, limit_bytes: int) -> MemoryCgroup:
        """A memory cgroup below this one with its own limit (remove it before this one)."""
        sub = object.__new__(MemoryCgroup)
        sub.version, sub.path, sub.name = self.version, self.path / "sub", f"{self.name}/sub"
        sub.path.mkdir()
        limit = "memory.limit_in_bytes" if self.version == "v1" else "memory.max"
        (sub.path / limit).write_text(str(limit_bytes))
        return sub

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def oom_kills(self) -> int:
        f = self.path / ("memory.oom_control" if self.version == "v1" else "memory.events")
        for line in f.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def remove(self) -> None:
        """Kill what is still inside (rmdir fails on a populated cgroup), then remove it."""
        import signal
        import time

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                pids = [int(x) for x in self.procs_file.read_text().split()]
            except OSError:
                return
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        with contextlib.suppress(OSError):
            self.path.rmdir()


@pytest.fixture
def memcg() -> Iterator[MemoryCgroup]:
    """A 40 MiB memory cgroup, emptied and removed after the test."""
    cg = MemoryCgroup(40 * 1024 * 1024)
    yield cg
    cg.remove()


def workers() -> int:
    """How many test processes run at once (pytest-xdist's workers; 1 without it)."""
    return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))


class OomNoise:
    """Unrelated OOM kills, over and over, in a cgroup of their own while a test runs: the shared
    host our users have. No test may depend on a quiet kernel log.

    `interval` is the host's pace: with parallel workers each runs its own noise, as often divided
    by their number, so the kernel's OOM-report rate limit (10 in 5 s) is not hit by the noise
    alone and the lines that name cgroups still reach the log."""

    def __init__(self, interval: float = 0.3) -> None:
        import threading

        self.interval = interval * workers()
        self.cgroup = MemoryCgroup(24 * 1024 * 1024)
        self.name = self.cgroup.name
        self.kills = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oom-noise", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import subprocess
        import sys

        hog = "b = bytearray(100 * 1024 * 1024)"
        while not self._stop.is_set():
            r = subprocess.run(["sh", "-c", f"echo $$ > {self.cgroup.procs_file}; exec {sys.executable} -c '{hog}'"])
            if r.returncode == -9:
                self.kills += 1
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.cgroup.remove()


@pytest.fixture
def oom_noise() -> Iterator[OomNoise]:
    """Other processes on the host being OOM-killed in another memory cgroup, concurrently."""
    import time

    noise = OomNoise(interval=1.0)
    deadline = time.monotonic() + 30
    while noise.kills < 1 and time.monotonic() < deadline:
        time.sleep(0.05)  # the first unrelated kill is in the log before the test looks
    assert noise.kills >= 1, "the noise process was never OOM-killed"
    yield noise
    noise.stop()


@pytest.fixture
def oom_storm() -> Iterator[None]:
    """For a test that passes the kernel's rate limit on OOM reports on purpose: its window (5 s of
    time, no state to poll) runs out before the next OOM_KILLS test may start."""
    import time

    yield
    time.sleep(5.5)
