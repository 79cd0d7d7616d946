"""A memory cgroup with its OOM killer disabled (`docker run --oom-kill-disable`, v1's
memory.oom_control) parks a process that allocates past its limit in mem_cgroup_oom_synchronize (D):
nothing moves until memory is freed in it or its limit raised, and the cgroup reads under_oom 1. It
read as a storage hang ("check … the storage it uses"), and HEALTHY at one sample (found by a helper)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cgroup_lab import MemoryCgroup
from tests.helpers import proc_wchan, vastprobe_json, wait_for

#: argv: the cgroup's procs file. Joins it, then allocates 4 MiB at a time, 400 MiB in all
GROWS = """
import os, sys
open(sys.argv[1], "w").write(str(os.getpid()))
chunks = [bytearray(4 << 20) for _ in range(100)]
"""


@pytest.mark.parametrize("sample", ["1", "0"])
def test_a_job_parked_at_its_cgroups_limit_with_the_oom_killer_off_is_stalled(
    reap, memcg: MemoryCgroup, sample: str
) -> None:
    if memcg.version != "v1":
        pytest.skip("memory.oom_control is cgroup v1's (v2 has no way to disable the OOM killer)")
    (memcg.path / "memory.oom_control").write_text("1")
    job = subprocess.Popen([sys.executable, "-c", GROWS, str(memcg.procs_file)], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).startswith("mem_cgroup_oom"), timeout=30,
             what=lambda: f"the job parked at its limit, not in {proc_wchan(job.pid)!r}")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
    found = [f for f in host["findings"] if f["rule"] == "d-state"]
    assert found, [(f["rule"], f["summary"]) for f in host["findings"]]
    f = found[0]
    assert (
        f"waits for memory in its cgroup {memcg.name}, at its limit of 40 MiB with the OOM killer disabled"
        in f["summary"]
    )
    assert "memory.oom_control" in f["hint"] and "storage" not in f["hint"], f["hint"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, host["headline"]


def test_a_job_in_a_child_of_the_limited_cgroup_is_told_where_the_limit_is(reap, memcg: MemoryCgroup) -> None:
    """The limit and the disabled OOM killer are the parent's; the job's own cgroup, below it, has
    neither, and reads under_oom 1 too (the kernel marks the subtree). The finding named the child's
    files to raise and re-enable, which fixed nothing (the attack on the first version found it)."""
    if memcg.version != "v1":
        pytest.skip("memory.oom_control is cgroup v1's")
    (memcg.path / "memory.oom_control").write_text("1")
    sub = memcg.child(1 << 30)
    (sub.path / "memory.limit_in_bytes").write_text("-1")  # none of its own
    job = subprocess.Popen([sys.executable, "-c", GROWS, str(sub.procs_file)], start_new_session=True)
    reap.append(job)
    try:
        wait_for(lambda: proc_wchan(job.pid).startswith("mem_cgroup_oom"), timeout=30, what="the job parked")
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0")
        f = next(f for f in host["findings"] if f["rule"] == "d-state")
        assert f"in its cgroup {sub.name}, at the limit of a cgroup above it" in f["summary"], f["summary"]
        assert f"{sub.path}/memory" not in f["hint"], f["hint"]
        assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, host["headline"]
    finally:
        job.kill()
        job.wait()
        wait_for(lambda: not sub.procs_file.read_text().strip(), what="the child cgroup empty")
        sub.path.rmdir()
