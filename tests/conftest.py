from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

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
def _history_out_of_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sweep` records history by default under $XDG_STATE_HOME: never into the real home from a test."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
