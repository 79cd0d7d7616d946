"""Golden tests: recorded real probe outputs parse to the snapshots stored beside them."""

from __future__ import annotations

import json

import pytest

from fixtures.procfs.record import parse_fixture
from tests.paths import REPO
from vastprobe.render.jsonable import to_jsonable

FIXTURES = REPO / "fixtures" / "procfs"
CASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "probe.out").exists())


@pytest.mark.parametrize("case", CASES)
def test_fixture_parses_to_expected(case: str) -> None:
    got = json.loads(json.dumps(to_jsonable(parse_fixture(FIXTURES / case)), sort_keys=True))
    want = json.loads((FIXTURES / case / "expected.json").read_text())
    assert got == want


@pytest.mark.parametrize("case", CASES)
def test_fixture_has_a_note(case: str) -> None:
    assert (FIXTURES / case / "NOTE.md").read_text().strip()


def test_pidns_fixture_facts() -> None:
    snap = parse_fixture(FIXTURES / "pidns-unshare")
    init = snap.process(1)
    assert init is not None and init.ppid == 0
    assert snap.host.own_pid_namespace is True
    states = {p.comm + ":" + p.state for p in snap.processes}
    assert "sh:T" in states and "sleep:Z" in states
    zombie = next(p for p in snap.processes if p.state == "Z")
    assert zombie.cmdline == ()
    assert snap.logs[0].exists and not snap.logs[1].exists


def test_busybox_fixture_facts() -> None:
    snap = parse_fixture(FIXTURES / "busybox-pidns")
    assert snap.host.clk_tck == 100
    assert snap.probe.timeout_mode == "new"
    assert snap.disks and snap.disks[0].inodes
    assert not any(p.comm == "timeout" for p in snap.processes if p.pid not in snap.excluded_pids)


def test_an_earlier_probes_busybox_watchers_are_the_probes_own() -> None:
    """`watch -n 1` in a BusyBox container: the previous round's `timeout` watchers are still
    there while the next probe reads /proc. They are the probe's, not the job's;
    the job's processes (the workload's shells and sleeps) stay in."""
    snap = parse_fixture(FIXTURES / "busybox-watch-leftovers")
    shell = next(p for p in snap.processes if p.pid == snap.probe.shell_pid)
    watchers = [p for p in snap.processes if p.comm == "timeout"]
    earlier = [p for p in watchers if p.starttime < shell.starttime]
    assert earlier, "no earlier probe's watcher in the recording: this test would prove nothing"
    assert all(p.pid in snap.excluded_pids for p in watchers), [(p.pid, p.cmdline) for p in watchers]
    job = {p.comm for p in snap.processes if p.pid not in snap.excluded_pids}
    assert {"sh", "sleep"} <= job and "timeout" not in job


def test_stat_first_fixture_facts() -> None:
    """The format that reads only stat of kernel threads, with no clk_tck or uid in meta."""
    snap = parse_fixture(FIXTURES / "host-vm-kthreads-stat-only")
    assert snap.host.clk_tck == 100 and snap.host.uid == 0 and snap.host.own_pid_namespace is True
    kthreads = [p for p in snap.processes if p.kernel_thread]
    assert kthreads and all(p.fds == () and p.uid is None and not p.cmdline for p in kthreads)
    users = [p for p in snap.processes if not p.kernel_thread and p.state != "Z"]
    assert users and all(p.uid == 0 and isinstance(p.wchan, str) for p in users)
    states = {p.comm + ":" + p.state for p in snap.processes}
    assert {"sh:T", "sleep:Z"} <= states


@pytest.mark.parametrize("case", ["waits-host", "waits-pidns", "waits-busybox"])
def test_wait_graph_sources_recorded(case: str) -> None:
    """Probe format 2 on a real host, a PID namespace and BusyBox: the graph names the flock holder,
    the silent server behind the loopback connection, and (with ss) the socketpair's peer."""
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.analysis.waitgraph.graph import WaitGraph
    from vastprobe.model import SocketTable, Syscall

    snap = parse_fixture(FIXTURES / case)
    g = WaitGraph(snap, ProcessTree(snap))
    by_comm = {}
    for p in snap.processes:
        by_comm.setdefault(p.comm, []).append(p)
    waiter = next(p for p in by_comm["flock"] if isinstance(p.wchan, str) and p.wchan.startswith("locks_"))
    assert isinstance(waiter.syscall, Syscall) and waiter.syscall.name == "flock"
    (lock_edge,) = g.edges(waiter.pid)
    holder = snap.process(lock_edge.holders[0])
    assert lock_edge.kind == "file-lock" and lock_edge.path == "/tmp/vastprobe-waits/lock"
    assert holder is not None and holder.comm == "flock" and holder.wchan == "do_wait"
    assert isinstance(snap.sockets, SocketTable)
    client = next(p for p in by_comm["python"] if p.wchan == "wait_woken")
    (tcp,) = g.edges(client.pid)
    assert tcp.kind == "tcp" and tcp.peer is not None and tcp.peer.recv_queue == 24  # the unread request
    server = snap.process(min(tcp.holders))
    assert server is not None and server.wchan == "hrtimer_nanosleep"
    reader = next(p for p in by_comm["python"] if p.wchan == "unix_stream_read_generic")
    (unix,) = g.edges(reader.pid)
    assert unix.kind == "unix-socket" and bool(unix.holders) == snap.sockets.unix_peers_known
    assert snap.sockets.unix_peers_known == (case != "waits-busybox")
    assert not snap.probe.tampering


def test_thread_waits_recorded() -> None:
    """Probe format 3 with real multiprocessing feeders: the child whose only other thread waits for the
    feeder without a timeout is in a cycle with its parent; the one with a heartbeat thread is not."""
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.analysis.waitgraph.edges import untimed_futex
    from vastprobe.analysis.waitgraph.graph import WaitGraph
    from vastprobe.model import Syscall

    snap = parse_fixture(FIXTURES / "waits-threads")
    g = WaitGraph(snap, ProcessTree(snap))
    children = [p for p in snap.processes if p.comm.startswith("python") and p.threads_detail]
    assert len(children) == 2
    for child in children:
        feeder = next(t for t in child.threads_detail if t.wchan == "anon_pipe_write")
        assert isinstance(feeder.syscall, Syscall) and feeder.syscall.name == "write"
        assert untimed_futex(child.syscall)  # the main thread joins the feeder
        (edge,) = g.edges(child.pid)
        assert edge.thread == feeder.tid and edge.writes and edge.holders == (child.ppid,)
    plain = next(c for c in children if len(c.threads_detail) == 1)
    beat = next(c for c in children if len(c.threads_detail) == 2)
    assert [c.pids for c in g.cycles] == [(plain.ppid, plain.pid, plain.ppid)]
    assert g.acts_elsewhere(beat.pid, next(t.tid for t in beat.threads_detail if t.wchan == "anon_pipe_write"))
    assert all(t.state == "S" and t.comm == "python" for t in (*plain.threads_detail, *beat.threads_detail))


def test_torch_gloo_culprit_recorded() -> None:
    """Real PyTorch gloo, three ranks, rank 1 blocked on its loader's FIFO while 0 and 2 wait in an
    all_reduce: the job, the ranks and the culprit from /proc alone, and no planted secret anywhere."""
    from vastprobe.analysis.context import Context
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.rule_options import RuleOptions
    from vastprobe.rules.engine import run_rules

    folder = FIXTURES / "torch-gloo-fifo"
    assert b"planted" not in (folder / "probe.out").read_bytes()
    snap = parse_fixture(folder)
    scope = tuple(p.pid for p in snap.processes if not p.kernel_thread)
    ctx = Context(snap, scope, RuleOptions(), ProcessTree(snap))
    (job,) = ctx.jobs
    assert job.key == "rendezvous:127.0.0.1:29533" and job.world_size == 3
    assert [(r.rank, r.state) for r in job.ranks] == [(0, "collective"), (1, "elsewhere"), (2, "collective")]
    (culprit,) = job.culprits
    assert culprit.rank == 1 and "FIFO" in culprit.why
    findings = run_rules(snap, frozenset(scope), RuleOptions(), ctx.tree, context=ctx)
    f = next(f for f in findings if f.rule == "culprit-rank")
    assert f.severity == "error" and f.pids[0] == culprit.pid and "2 other ranks (0, 2)" in f.summary
    text = json.dumps(to_jsonable(snap)) + json.dumps([to_jsonable(x) for x in findings])
    assert "planted" not in text and "AWS_SECRET" not in text and "HF_TOKEN" not in text
    rank_env = dict(snap.process(culprit.pid).env)  # type: ignore[union-attr]
    assert rank_env["RANK"] == "1" and rank_env["TORCH_FR_BUFFER_SIZE"] == "2000"


@pytest.mark.parametrize("scene", ["torch-gloo-order", "torch-gloo-timedwait", "torch-gloo-skip"])
def test_torch_gloo_ranks_waiting_on_each_other_recorded(scene: str) -> None:
    """Real PyTorch gloo, two ranks: in collectives entered in different orders, each waits for the other
    for ever, nothing of the job moves (STALLED, no rank named; it read HEALTHY, no finding); the control,
    rank 0 on a wait with a deadline while rank 1 waits in a barrier, is no stall. Three ranks, rank 1
    waiting on an event instead of the all_reduce ranks 0 and 2 entered: STALLED, and rank 1 named (its
    gloo run loops idle; every main thread waits in a futex, and no rank was named)."""
    from vastprobe.analysis.context import Context
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.model import verdict
    from vastprobe.rule_options import RuleOptions
    from vastprobe.rules.engine import run_rules

    snap = parse_fixture(FIXTURES / scene)
    scope = tuple(p.pid for p in snap.processes if not p.kernel_thread)
    ctx = Context(snap, scope, RuleOptions(), ProcessTree(snap))
    (job,) = ctx.jobs
    timed = scene.endswith("timedwait")  # rank 0 on a wait with a deadline: not in a collective
    world = 3 if scene.endswith("skip") else 2
    assert job.world_size == world and [r.state for r in job.ranks] == ["running" if timed else "collective"] + [
        "collective"
    ] * (world - 1)
    findings = [
        f for f in run_rules(snap, frozenset(scope), RuleOptions(), ctx.tree, context=ctx) if f.rule != "missing-logs"
    ]  # fmt: skip  (the recorder's absent log, planted)
    ranks = [f for f in findings if f.rule == "culprit-rank"]
    if timed:  # named, a warning in true words: it waits on a timer, it does not compute
        assert job.still is None and verdict(tuple(findings)) == "degraded", findings
        (f,) = ranks
        assert f.severity == "warning" and "waits with a deadline" in f.summary and "computes" not in f.hint, f
        return
    assert job.still is not None and job.deadlocked and not job.culprits, job
    (f,) = ranks
    if scene.endswith("skip"):
        skipped = next(r for r in job.ranks if r.rank == 1)
        assert [r.in_gloo_collective for r in job.ranks] == [True, False, True], job.ranks
        assert f.pids[0] == skipped.pid and f"see where rank 1 is (py-spy dump --pid {skipped.pid})" in f.hint, f
        assert f"rank 1 (pid {skipped.pid}, python) has not entered the collective the others wait in" in f.summary
        assert f.severity == "error" and verdict(tuple(findings)) == "stalled", f.summary
        return
    assert [r.in_gloo_collective for r in job.ranks] == [True, True], job.ranks  # both inside: none named
    assert f.severity == "error" and "all 2 on this host, waits on another" in f.summary, f.summary
    assert f.summary.endswith(": they wait on one another") and verdict(tuple(findings)) == "stalled", f.summary


def test_mariadb_row_lock_recorded() -> None:
    """Real MariaDB, an UPDATE waiting for a row lock another session holds: /proc shows a client
    polling its server with nothing in flight (its threads are unnamed, its lock waits are futexes),
    and the finding on the named client says so as `info` and names the server's tables that say who
    holds the lock; no finding claims more than that."""
    from dataclasses import replace

    from vastprobe.analysis.context import Context
    from vastprobe.analysis.tree import ProcessTree
    from vastprobe.rule_options import RuleOptions
    from vastprobe.rules.engine import run_rules

    snap = parse_fixture(FIXTURES / "mariadb-row-lock")
    waiter = next(p for p in snap.processes if p.comm == "mariadb" and "-e" in p.cmdline)
    server = next(p for p in snap.processes if p.comm == "mariadbd")
    opts = replace(RuleOptions(), explicit_scope=True)
    scope = frozenset({waiter.pid})
    ctx = Context(snap, scope, opts, ProcessTree(snap))
    findings = run_rules(snap, scope, opts, ctx.tree, context=ctx)
    (f,) = [f for f in findings if f.rule == "socket-peer-wait"]
    assert f.severity == "info" and f"its peer {server.pid} (mariadbd)" in f.summary, f.summary
    assert "INNODB_LOCK_WAITS" in f.hint and "SHOW FULL PROCESSLIST" in f.hint, f.hint
    assert not [x for x in findings if x.severity in ("error", "critical")], findings
