from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cgroup_lab import memcg, oom_noise, oom_storm  # noqa: F401  (fixtures, used by name)


@pytest.fixture
def reap() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts; each is killed with its whole process group afterwards."""
    procs: list[subprocess.Popen] = []
    yield procs
    kill_families(procs)


@pytest.fixture(scope="module")
def reap_module() -> Iterator[list[subprocess.Popen]]:
    """As `reap`, for processes a module's tests share (a state that takes long to reach)."""
    procs: list[subprocess.Popen] = []
    yield procs
    kill_families(procs)


def kill_families(procs: list[subprocess.Popen]) -> None:
    import os
    import signal

    from tests.helpers import children_of

    for p in procs:
        if p.returncode is not None and Path(f"/proc/{p.pid}").exists():
            # the test reaped it, and its PID is another process's now (pid_max 32768 here: the suite
            # wraps it): killing that one's family would kill another test's processes. A reaped
            # leader's number stays reserved while its group has members, so where /proc has no such
            # process the group below is still this test's, and is killed
            continue
        # descendants first: one that started a session of its own (a setsid daemon) escapes killpg
        stack, family = [p.pid], []
        while stack:
            kids = children_of(stack.pop())
            family += kids
            stack += kids
        for pid in family:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        p.wait()


#: How many tests run at once on this machine, counting every suite on it (this run's parallel
#: workers and other checkouts' runs): most wait on real processes, sshd's and probe samples, so twice
#: the CPUs keeps the machine busy, and no more keeps it from starving the timing of every test on it
#: (three suites of four workers each took a 2-CPU machine to a load of 26, and each took 14 minutes).
#: VASTPROBE_TEST_SLOTS=N sets it; 0 is no limit.
SLOTS_ENV = "VASTPROBE_TEST_SLOTS"
SLOT_DIR = "vastprobe-test-slots"


def machine_slots() -> int:
    import os

    value = os.environ.get(SLOTS_ENV, "").strip()
    if value.isdigit():
        return int(value)
    return 2 * len(os.sched_getaffinity(0))


@contextlib.contextmanager
def machine_slot() -> Iterator[None]:
    """One of the machine's test slots, held while the block runs: an exclusive lock on one of
    SLOTS files in a folder every suite on the machine shares (a crashed holder's lock goes with it)."""
    import fcntl
    import random
    import tempfile
    import time

    folder = Path(tempfile.gettempdir()) / SLOT_DIR
    folder.mkdir(exist_ok=True)
    n = machine_slots()
    if n == 0:
        yield
        return
    while True:
        for i in random.sample(range(n), n):
            with open(folder / f"slot-{i}", "a") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                yield
                return
        time.sleep(0.05)  # every slot busy: poll until one is released


@pytest.fixture(autouse=True)
def _turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's turn, held from before its own fixtures to after them: a machine slot first
    (machine_slots), then, for a test marked `serial("name")`, the lock that keeps every other
    test of that name on this machine (any worker, any checkout's suite) from running meanwhile:
    a test that diagnoses `--match rank_lab.py` would see another's ranks, or those it leaves
    until its teardown. Slot before lock, always: no two tests wait on each other."""
    import fcntl
    import tempfile

    with machine_slot():
        mark = request.node.get_closest_marker("serial")
        if mark is None:
            yield
            return
        folder = Path(tempfile.gettempdir()) / SLOT_DIR
        with open(folder / f"serial-{mark.args[0]}", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


@pytest.fixture(autouse=True)
def _history_out_of_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sweep` records history by default under $XDG_STATE_HOME: never into the real home from a test."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # once, in the process that starts the workers
        _compile_vastprobe()


def _compile_vastprobe() -> None:
    """Hundreds of tests run `python -m vastprobe` from this tree. Where PYTHONDONTWRITEBYTECODE is
    set (this project's machines set it) none of those runs may cache its bytecode, so each compiled
    every module it imports again: ~0.1 s of CPU a run, minutes a suite. Compiled once here
    (__pycache__ is ignored by git); a module edited later is recompiled as Python always does."""
    import compileall

    with contextlib.suppress(OSError):
        compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "vastprobe"), quiet=2)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that hold slow tests first, each module's tests still together and in order
    (module fixtures start once): parallel workers then end together instead of one worker running
    a long test alone at the end."""
    slow = {item.module for item in items if item.get_closest_marker("slow")}  # type: ignore[attr-defined]
    items.sort(key=lambda item: item.module not in slow)  # type: ignore[attr-defined]
