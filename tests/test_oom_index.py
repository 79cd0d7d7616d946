"""The OOM matcher's cgroup index answers what testing every process against every kill would."""

from __future__ import annotations

import itertools

from vastprobe.analysis.oom import ROOT_CGROUPS, _index, _members
from vastprobe.model import Process


def _proc(pid: int, v1: str | None, v2: str | None) -> Process:
    return Process(pid=pid, ppid=1, comm="p", state="S", pgrp=pid, session=pid, tty_nr=0, starttime=0, threads=1,
                   rss_kb=None, hwm_kb=None, uid=0, tracer_pid=0, nspid=(pid,), sig_ign=None, sig_cgt=None,
                   cmdline=(), wchan="0", fds=(), fds_truncated=False, memory_cgroup=v1, cgroup_v2=v2, samples=(),
                   kernel_thread=False)  # fmt: skip


def _brute(path: str, procs: list[Process]) -> list[int]:
    def inside(cgroups: set[str]) -> bool:
        return path in cgroups or any(c not in ROOT_CGROUPS and path.startswith(c.rstrip("/") + "/") for c in cgroups)

    return [p.pid for p in procs if inside({c for c in (p.memory_cgroup, p.cgroup_v2) if c is not None})]


def test_members_match_testing_every_process() -> None:
    paths = ["/", "", "/job", "/job/", "/job/a", "/job/a/b", "/jobx", "/other", "/job/ab"]
    procs = [_proc(i + 10, v1, v2) for i, (v1, v2) in enumerate(itertools.product([*paths, None], repeat=2))]
    by_cgroup = _index(procs)
    order = {p.pid: i for i, p in enumerate(procs)}
    for path in [*paths, "/job/a/b/c", "/nowhere"]:
        assert [p.pid for p in _members(path, by_cgroup, order)] == _brute(path, procs), path
