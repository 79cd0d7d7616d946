from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cgroup_lab import memcg, oom_noise  # noqa: F401  (fixtures, used by name)


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


@pytest.fixture(autouse=True)
def _serial(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests marked `serial("name")` never run at the same time as another test of that name, on
    any parallel worker: each holds an exclusive lock from before its first fixture to after its
    last (a test that diagnoses `--match rank_lab.py` would see another's ranks, or the ones it
    leaves until its teardown kills them)."""
    mark = request.node.get_closest_marker("serial")
    if mark is None:
        yield
        return
    import fcntl
    import os

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common folder
    with open(shared / f"serial-{mark.args[0]}.lock", "w") as lock:
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
