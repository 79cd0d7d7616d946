from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture
def reap() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts; each is killed with its whole process group afterwards."""
    procs: list[subprocess.Popen] = []
    yield procs
    import os
    import signal

    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.kill()
        except ProcessLookupError:
            pass
        p.wait()
