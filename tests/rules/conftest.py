"""Every rule test runs on a host where other processes are being OOM-killed in another memory
cgroup meanwhile (one kill a second): no rule test may depend on a quiet kernel log."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cgroup_lab import OomNoise


@pytest.fixture(scope="package", autouse=True)
def neighbours_oom_killed() -> Iterator[OomNoise | None]:
    try:
        noise = OomNoise(interval=1.0)
    except pytest.skip.Exception:
        yield None  # no root or no memory cgroup here: the tests still run, on a quieter host
        return
    yield noise
    noise.stop()
