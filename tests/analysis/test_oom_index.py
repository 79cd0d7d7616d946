"""The OOM matcher's cgroup index answers what testing every process against every kill would."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

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


def test_a_kill_without_its_cgroup_line_goes_only_to_a_counting_cgroup_that_lived_through_it() -> None:
    """Found on a busy host, whole-host scope: a python killed (cgroup line rate-limited) at t=100 in
    a test's cgroup was placed in another job's cgroup by that cgroup's counter, whose processes
    started at t=200, and blamed on an unrelated bash outside it that had a python child."""
    from vastprobe.analysis.oom import _place_unnamed, _Ties
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.model import CgroupMemory, KernelEvent

    def cg(path: str, kills: int) -> CgroupMemory:
        return CgroupMemory("v1", path, "/sys/fs/cgroup/memory" + path, kills, None, 40 << 20, None, None, None)

    bystander = _proc(50, "/user", None)  # has a python child; not in any counting cgroup
    early = _proc(60, "/job-a", None)  # in /job-a, alive at both kills
    late = _proc(70, "/job-b", None)  # in /job-b, started after the first kill
    parents_of = {"python": [bystander]}
    first = KernelEvent("oom-kill", "Killed process 4182 (python)", 100.0, 100.0, 4182, "python", anon_rss_kb=40704)
    second = KernelEvent("oom-kill", "Killed process 4300 (python)", 300.0, 300.0, 4300, "python", anon_rss_kb=40704)
    out: list = [None, None]
    unnamed = [(0, first, [bystander, early]), (1, second, [bystander, early, late])]
    tree = ProcessTree(SimpleNamespace(processes=[bystander, early, late]))  # type: ignore[arg-type]
    ties = _Ties(set(), parents_of, {}, tree, host_pids=False)
    _place_unnamed(out, unnamed, [cg("/job-b", 1)], [], [bystander, early, late], ties, bounded=False)
    assert out[0].tie == "elsewhere" and out[0].loser is None  # nobody in /job-b lived through it
    assert out[1].tie == "job" and out[1].cgroup == "/job-b" and out[1].loser != bystander.pid
    # with /job-a counting one too, the first kill is /job-a's; a counter is never spent twice
    out = [None, None]
    _place_unnamed(out, unnamed, [cg("/job-a", 1), cg("/job-b", 1)], [], [bystander, early, late], ties,
                   bounded=False)  # fmt: skip
    assert {(m.tie, m.cgroup) for m in out} == {("job", "/job-a"), ("job", "/job-b")}
    # a counter spent on a kill the log named the cgroup for takes no unnamed one (a neighbour's
    # kill of the same size, its cgroup line rate-limited, was made the job's second loss)
    out = [None, None]
    _place_unnamed(out, unnamed, [cg("/job-a", 1), cg("/job-b", 1)], ["/job-a"], [bystander, early, late], ties,
                   bounded=False)  # fmt: skip
    assert out[0].tie == "elsewhere" and (out[1].tie, out[1].cgroup) == ("job", "/job-b")
