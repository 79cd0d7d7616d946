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
    # a v1 counter counts its own kills only, a v2 one its children's too: a kill the log named in a
    # child cgroup spends the parent's counter on v2 alone (v1 checked on this project's host)
    for version, placed in (("v1", True), ("v2", False)):
        out = [None, None]
        parent = CgroupMemory(version, "/job-b", "/sys/fs/cgroup/job-b", 1, None, 40 << 20, None, None, None)
        _place_unnamed(out, unnamed, [parent], ["/job-b/sub"], [bystander, early, late], ties, bounded=False)
        assert (out[1].tie == "job") is placed, version


def test_a_kill_from_before_the_job_spends_a_counter_where_it_is_the_likelier() -> None:
    """A clean-clone CI found two findings for one launcher: kills from before the job, whose cgroup
    lines the kernel dropped, were counted by the job's cgroup, and a neighbour's kill after the job
    started took that count and was blamed on the job. The earlier kill competes for the count: it
    takes it where its size says the cgroup (near its limit) and the later one's does not; on a tie
    the later kill, as before."""
    from vastprobe.analysis.oom import _place_unnamed, _Ties
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.model import CgroupMemory, KernelEvent

    job = _proc(60, "/job", None)
    tree = ProcessTree(SimpleNamespace(processes=[job]))  # type: ignore[arg-type]
    ties = _Ties({job.pid}, {}, {}, tree, host_pids=False)
    counter = CgroupMemory("v1", "/job", "/sys/fs/cgroup/memory/job", 1, None, 40 << 20, None, None, None)

    def kill(pid: int, at: float, rss_kb: int) -> KernelEvent:
        return KernelEvent("oom-kill", f"Killed process {pid} (python)", at, at, pid, "python", anon_rss_kb=rss_kb)

    for before_kb, after_kb, placed in ((40704, 24192, False), (24192, 24192, True), (40704, 40704, True),
                                        (24192, 40704, True)):  # fmt: skip
        before, after = kill(4100, 100.0, before_kb), kill(4300, 300.0, after_kb)
        out: list = [object(), None]  # the earlier kill is already context ("before")
        _place_unnamed(out, [(1, after, [job])], [counter], [], [job], ties, bounded=True, earlier=[(0, before)])
        assert (out[1].tie == "job") is placed, (before_kb, after_kb, out[1])
        assert not placed or out[1].loser == job.pid
