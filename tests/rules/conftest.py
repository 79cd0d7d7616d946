"""Every rule test runs on a host where other processes are being OOM-killed in another memory
cgroup meanwhile (one kill every two seconds: more, and the kernel's rate limit on OOM reports, 10
in 5 s, would drop the lines that name the cgroups): no rule test may depend on a quiet kernel log."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cgroup_lab import OomNoise


@pytest.fixture(scope="package", autouse=True)
def neighbours_oom_killed() -> Iterator[OomNoise | None]:
    try:
        noise = OomNoise(interval=2.0)
    except pytest.skip.Exception:
        yield None  # no root or no memory cgroup here: the tests still run, on a quieter host
        return
    yield noise
    noise.stop()
