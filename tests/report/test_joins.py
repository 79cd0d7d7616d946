"""A sweep is one story: hosts of one distributed job, and both ends of one connection, read together.

Each "host" is a real OpenSSH sshd in a PID namespace of its own (unshare), started with the processes it
runs; a sweep reaches them as a fleet's hosts. The job is tests/rank_lab.py's: ranks with torchrun's
environment, a full mesh of TCP pairs to every rank (rank 0's store among them), spinning as NCCL's
ranks do; the client/server pair is a real redis-server and redis-cli."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.cgroup_lab import OOM_KILLS, MemoryCgroup
from tests.helpers import proc_state, proc_wchan, wait_for
from tests.paths import FIXTURES, TESTS
from tests.sshd import Sshd, free_ports, keygen, start_sshd

LAB = TESTS / "rank_lab.py"

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")


class Fleet:
    """sshd hosts, each a PID namespace running `command` beside its sshd; swept together."""

    def __init__(self, d: Path) -> None:
        self.dir = d
        self.key = keygen(d / "user")
        self.hosts: list[Sshd] = []

    def host(self, command: str, address: str = "127.0.0.1") -> Sshd:
        wrap = ["unshare", "--pid", "--kill-child", "--mount-proc", "--", "sh", "-c",
                f'({command} </dev/null >/dev/null 2>&1 &) ; exec "$@"', "sh"]  # fmt: skip
        h = start_sshd(self.dir / f"h{len(self.hosts)}", user_key=self.key, wrap=wrap, address=address)
        self.hosts.append(h)
        return h

    def find(self, h: Sshd, name: str) -> int | None:
        for c in psutil.Process(h.proc.pid).children(recursive=True):
            try:
                if c.name() == name:
                    return c.pid
            except psutil.NoSuchProcess:
                continue
        return None

    def blocked_in(self, h: Sshd, wchan: str) -> bool:
        return any(proc_wchan(c.pid) == wchan for c in psutil.Process(h.proc.pid).children(recursive=True))

    def run(
        self, command: str, *targets: str, fmt: str = "json", extra: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        kh = self.dir / "known_hosts"
        kh.write_text("".join(h.known_hosts.read_text() for h in self.hosts))
        return subprocess.run(
            [sys.executable, "-m", "vastprobe", command, ",".join(targets) if command == "sweep" else targets[0],
             "-i", str(self.key), "--known-hosts", str(kh), "--format", fmt, "--sample", "1",
             *(("--no-history",) if command == "sweep" else ()), *extra],
            capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "100"},
        )  # fmt: skip

    def sweep(self, *targets: str, extra: tuple[str, ...] = ()) -> tuple[int, dict[str, dict]]:
        r = self.run("sweep", *targets, extra=extra)
        assert r.stdout, r.stderr
        return r.returncode, {h["target"]: h for h in json.loads(r.stdout)["hosts"]}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    try:
        yield f
    finally:
        for h in f.hosts:
            h.stop()


def start_job(
    fleet: Fleet, how: str, path: str = "", env_a: str = "", cgroup_b: Path | None = None
) -> tuple[Sshd, Sshd, str]:
    """Ranks 0-1 on host A, 2-3 on host B, all spinning; rank 2 is the culprit (`how`)."""
    ports = ",".join(map(str, free_ports(4)))
    ready = fleet.dir / "ready"
    run = f"lab-{uuid.uuid4().hex[:12]}"
    lab = f"LAB_SPIN=1 LAB_READY={ready} {sys.executable} {LAB} launch {ports} {run} 2 {how} {path}"
    a = fleet.host(f"LAB_LOCAL=0,1 {env_a} {lab}")
    into = f"echo \\$\\$ > {cgroup_b}; exec " if cgroup_b is not None else ""
    b = fleet.host(f'sh -c "{into}env LAB_LOCAL=2,3 {lab}"')
    wait_for(lambda: all(Path(f"{ready}.{r}").exists() for r in range(4)), timeout=30, what="four ranks connected")
    return a, b, run


#: The recorded captures of scenes whose hosts read right only together (fixtures/joins/record.py)
RECORDED = FIXTURES / "joins"


def recorded(tmp_path: Path, scene: str, hosts: str = "ABC") -> list[str]:
    """The scene's captures of `hosts`, in that order (one may repeat), ungzipped into `tmp_path`: the
    files `vastprobe analyze` reads."""
    out = []
    for i, h in enumerate(hosts):
        f = tmp_path / f"{i}-{scene}-{h}.json"
        f.write_bytes(gzip.decompress((RECORDED / f"{scene}-{h}.json.gz").read_bytes()))
        out.append(str(f))
    return out


def in_d_state(cg: MemoryCgroup) -> bool:
    """A process of `cg` in uninterruptible sleep: an OOM victim still dying in reclaim."""
    return any(proc_state(pid) == "D" for pid in cg.procs_file.read_text().split())


def culprit(host: dict) -> dict:
    found = [f for f in host["findings"] if f["rule"] == "culprit-rank"]
    assert found, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    return found[0]


def test_a_job_over_two_hosts_is_held_by_the_rank_blocked_on_the_other(fleet: Fleet) -> None:
    """Ranks 0-1 on A spin as NCCL's ranks do in a collective (CPU busy, nothing else moves); rank 2 on B
    reads a FIFO nobody writes. A alone looks busy; swept with B, it is held by B's rank 2."""
    fifo = fleet.dir / "loader.fifo"
    os.mkfifo(fifo)
    a, b, run = start_job(fleet, "fifo", str(fifo))
    wait_for(lambda: fleet.blocked_in(b, "wait_for_partner"), what="rank 2 blocked opening its FIFO")
    rc, got = fleet.sweep(a.target, b.target)
    assert rc == 1
    holder = culprit(got[b.target])
    assert holder["summary"].startswith("rank 2 (pid ") and "FIFO" in holder["summary"], holder["summary"]
    assert f"ranks 0, 1 on 1 other host(s) of this run wait on it ({a.target})" in holder["summary"]
    assert got[b.target]["verdict"] == "stalled"
    told = culprit(got[a.target])
    pid2 = got[b.target]["jobs"][0]["culprit"]["pid"]
    assert told["summary"].startswith(
        f"rank 2 (pid {pid2}, {b.target}) holds job {run} (torchelastic): waits on a FIFO"
    )
    assert told["summary"].endswith("ranks 0, 1 here cannot finish a collective without it"), told["summary"]
    assert told["severity"] == "error" and told["remote"] == b.target
    assert got[a.target]["verdict"] == "stalled" and got[a.target]["headline"] == told["summary"]
    assert got[a.target]["jobs"][0]["culprit"]["host"] == b.target
    assert any(e["source"] == "progress" for e in told["evidence"])
    summary = json.loads(fleet.run("sweep", a.target, b.target).stdout)["summary"]
    [job] = summary["jobs"]  # the job once, for tools: who holds it, where, who waits
    assert (
        job["id"] == f"torchelastic:{run}"
        and job["world_size"] == 4
        and sorted(job["hosts"]) == sorted([a.target, b.target])
    )
    assert job["holder"]["host"] == b.target and job["holder"]["rank"] == 2 and job["holder"]["state"] == "elsewhere"
    assert job["waiting"] == [a.target] and job["moving"] == [] and job["missing"] == [], job

    table = fleet.run("sweep", a.target, b.target, fmt="table")
    assert table.returncode == 1, table.stderr
    text = re.sub(r"\s+", " ", table.stdout)
    # one block for the job: the culprit, why, the waiting hosts folded; neither host on a line of its own
    assert f"job {run} (torchelastic), 4 rank(s) of 4 on 2 hosts of this run:" in text, table.stdout
    assert f"held by: rank 2 (pid {pid2}, python" in text and f"on {b.target} (stalled): waits on a FIFO" in text
    assert f"waiting: 2 rank(s) on [1: {a.target}]" in text, table.stdout
    assert f"  {a.target}  " not in table.stdout and f"  {b.target}  " not in table.stdout, table.stdout

    alone = fleet.run("diagnose", a.target)  # A on its own: busy ranks, nothing to hold them
    assert alone.returncode == 0 and json.loads(alone.stdout)["hosts"][0]["verdict"] == "healthy", alone.stdout


def test_ranks_whose_log_grows_are_not_called_held(fleet: Fleet) -> None:
    """The same job, but A's ranks append to their log as ranks that train do: that is progress of
    their own, so A is told about B's rank in a note and stays healthy."""
    fifo = fleet.dir / "loader.fifo"
    os.mkfifo(fifo)
    a, b, _run = start_job(fleet, "fifo", str(fifo), env_a=f"LAB_LOG={fleet.dir / 'train.log'}")
    wait_for(lambda: fleet.blocked_in(b, "wait_for_partner"), what="rank 2 blocked opening its FIFO")
    rc, got = fleet.sweep(a.target, b.target)
    told = culprit(got[a.target])
    assert told["severity"] == "info" and "show progress" in told["summary"], told
    assert re.search(r"rank [01] \(pid \d+\) wrote [\d.]+ \S+ between the samples", told["summary"]), told["summary"]
    assert got[a.target]["verdict"] == "healthy" and got[b.target]["verdict"] == "stalled" and rc == 1


@OOM_KILLS
def test_an_oom_killed_rank_is_named_by_number_on_both_hosts(fleet: Fleet) -> None:
    """Rank 2 on B allocates past its memory cgroup's limit and the kernel kills it: B says rank 2 of 4
    is gone, when, and under which launcher; A is told that rank holds the job."""
    cg = MemoryCgroup(256 * 1024 * 1024)
    try:
        a, b, run = start_job(fleet, "oom", cgroup_b=cg.procs_file)
        # the counter counts the kill when it is made; the victim then dies in reclaim (D, reclaim_throttle)
        # for a while, and a sweep in that window read rank 2 alive in D (a clean-clone CI at df3ba31)
        wait_for(lambda: cg.oom_kills() >= 1 and not in_d_state(cg), timeout=30, what="rank 2 OOM-killed and gone")
        rc, got = fleet.sweep(a.target, b.target)
        holder = culprit(got[b.target])
        assert holder["summary"].startswith(f"rank 2 of 4 in job {run} (torchelastic) is gone: OOM-killed at "), holder
        assert re.search(r"OOM-killed at \d\d:\d\d:\d\d UTC \(host pid \d+, python3?, a child of launcher python3? "
                         r"\(\d+\)\)", holder["summary"]), holder["summary"]  # fmt: skip
        assert got[b.target]["verdict"] == "stalled" and "rank 2 of 4" in got[b.target]["headline"]
        told = culprit(got[a.target])
        assert told["summary"].startswith(f"rank 2 ({b.target}) holds job {run} (torchelastic): it is gone: OOM-killed")
        assert told["severity"] == "error" and got[a.target]["verdict"] == "stalled" and rc == 1
    finally:
        cg.remove()


def _rank_pid(h: Sshd, run: str) -> int:
    """The host pid of the rank of job `run` on `h` (its ready file holds the namespace's)."""
    for c in psutil.Process(h.proc.pid).children(recursive=True):
        try:
            if c.cmdline()[-2:] == ["rank", run]:
                return c.pid
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no rank of {run} under {h.target}")


@pytest.mark.parametrize("spin", [True, False], ids=["spinning", "waiting"])
def test_a_rank_killed_on_a_host_with_no_other_rank_of_the_job_is_named(fleet: Fleet, spin: bool) -> None:
    """One rank a host: rank 1 on B is killed, and its launcher reaps it. Rank 0 on A spins as NCCL's
    do (or waits in a futex, as gloo's do), its connection to rank 1 closed from B's end (CLOSE_WAIT).
    Spinning, both hosts read HEALTHY, exit 0: B had no rank left to say one was gone, and A's
    rank looked busy (found by a helper). Now the closed connection, at an address only B has among
    the run's hosts, names rank 1 gone from B: both STALLED. A alone: a waiting rank whose pair was
    closed from the other end is held by a rank that exited (STALLED); a spinning one says nothing."""
    ports = ",".join(map(str, free_ports(2)))
    ready = fleet.dir / "ready"
    run = f"lab-{uuid.uuid4().hex[:12]}"
    lab = f"{'LAB_SPIN=1 ' if spin else ''}LAB_READY={ready} {sys.executable} {LAB} launch {ports} {run} 1 killed"
    a = fleet.host(f"LAB_LOCAL=0 {lab}")
    b = fleet.host(f"LAB_LOCAL=1 {lab}")
    wait_for(lambda: all(Path(f"{ready}.{r}").exists() for r in range(2)), timeout=30, what="two ranks connected")
    rank1 = _rank_pid(b, run)
    os.kill(rank1, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(rank1), what="rank 1 reaped by its launcher")
    rank0 = _rank_pid(a, run)
    closed = lambda: any(c.status == psutil.CONN_CLOSE_WAIT for c in psutil.Process(rank0).net_connections("tcp"))  # noqa: E731
    wait_for(closed, what="rank 0's connection to rank 1 closed from B's end")
    rc, got = fleet.sweep(a.target, b.target)
    told, gone = culprit(got[a.target]), culprit(got[b.target])
    assert rc == 1 and got[a.target]["verdict"] == "stalled" and got[b.target]["verdict"] == "stalled", (
        rc, got[a.target]["headline"], got[b.target]["headline"])  # fmt: skip
    assert told["summary"].startswith(f"rank 1 ({b.target}) holds job {run} (torchelastic): it is gone: no rank "
                                      f"of the job is left on {b.target}"), told["summary"]  # fmt: skip
    assert "(CLOSE_WAIT)" in told["summary"] and told["severity"] == "error" and told["remote"] == b.target
    assert gone["summary"] == (f"rank 1 of 2 of job {run} (torchelastic) is gone from this host: rank 0 on "
                               f"{a.target} waits on it"), gone["summary"]  # fmt: skip
    assert gone["severity"] == "error" and gone["remote"] == a.target
    # the table: the holder host has no rank of the job, which crashed its job block (StopIteration,
    # exit 4; found by a helper)
    table = fleet.run("sweep", a.target, b.target, fmt="table")
    assert table.returncode == 1 and "internal error" not in table.stderr, table.stderr
    assert f"held by: rank 1 on {b.target} (stalled): gone" in table.stdout, table.stdout
    assert "missing:" not in table.stdout, table.stdout  # rank 1, gone, is no rank missing besides
    alone = fleet.run("diagnose", a.target)  # A on its own
    host = json.loads(alone.stdout)["hosts"][0]
    if spin:  # a busy rank: nothing on A alone says whether it computes or spins
        assert alone.returncode == 0 and host["verdict"] == "healthy", host["headline"]
    else:  # a rank waiting on a pair its other end closed: a rank there exited
        assert alone.returncode == 1 and host["verdict"] == "stalled", host["headline"]
        assert host["headline"].endswith("(CLOSE_WAIT): a rank there exited"), host["headline"]
    # B unreachable: nothing says no process of the job is left there, and it was told so (found by a helper)
    b.stop()
    _rc, got = fleet.sweep(a.target, b.target)
    assert got[b.target]["status"] != "ok" and not got[b.target]["findings"], got[b.target]
    assert not any(f.get("remote") == b.target and "gone" in f["summary"] for f in got[a.target]["findings"])


def test_a_host_with_ranks_of_two_jobs_is_told_of_each_jobs_holder(fleet: Fleet) -> None:
    """Host A runs rank 0 of two jobs; rank 1 of job 1 on B and rank 1 of job 2 on C are stopped. A's
    findings were matched to a job by their rule alone: one job's joined finding replaced the other's,
    and with a D-state holder A read DEGRADED, exit 0 (found by a helper). Each job now has its own."""
    ready = fleet.dir / "ready"
    jobs = []
    for _ in range(2):
        ports, run = ",".join(map(str, free_ports(2))), f"lab-{uuid.uuid4().hex[:12]}"
        jobs.append((run, f"LAB_READY={ready}-{run} {sys.executable} {LAB} launch {ports} {run} 1 stopped"))
    (run1, lab1), (run2, lab2) = jobs
    a = fleet.host(f"sh -c 'LAB_LOCAL=0 {lab1} & LAB_LOCAL=0 {lab2} & wait'")
    b, c = fleet.host(f"LAB_LOCAL=1 {lab1}"), fleet.host(f"LAB_LOCAL=1 {lab2}")
    wait_for(lambda: all(Path(f"{ready}-{run}.{r}").exists() for run, _ in jobs for r in range(2)), timeout=30,
             what="both jobs' ranks connected")  # fmt: skip
    stopped = [_rank_pid(b, run1), _rank_pid(c, run2)]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: all(proc_state(pid) == "T" for pid in stopped), what="both rank 1s stopped")
    rc, got = fleet.sweep(a.target, b.target, c.target)
    told = {f["remote"]: f for f in got[a.target]["findings"] if f["rule"] == "culprit-rank"}
    assert set(told) == {b.target, c.target}, [(f["severity"], f["summary"]) for f in got[a.target]["findings"]]
    assert f"holds job {run1} (torchelastic): stopped (T)" in told[b.target]["summary"], told
    assert f"holds job {run2} (torchelastic): stopped (T)" in told[c.target]["summary"], told
    assert all(f["severity"] == "error" for f in told.values())
    for h, run in ((b, run1), (c, run2)):
        assert any(f"of job {run} (torchelastic) stopped (T)" in f["summary"] for f in got[h.target]["findings"])
    assert rc == 1 and {h["verdict"] for h in got.values()} == {"stalled"}


def _rank_pid_of(h: Sshd, run: str, rank: int) -> int:
    for c in psutil.Process(h.proc.pid).children(recursive=True):
        try:
            if c.cmdline()[-2:] == ["rank", run] and c.environ().get("RANK") == str(rank):
                return c.pid
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no rank {rank} of {run} under {h.target}")


def test_a_job_held_by_ranks_on_two_hosts_names_both(fleet: Fleet) -> None:
    """Six ranks on three hosts; rank 1 on A and rank 4 on C are stopped. The run named one holder,
    and an operator who resumed it found the job still stuck (found by a helper): the summary, the
    table and the held host now name both."""
    ports, run = ",".join(map(str, free_ports(6))), f"lab-{uuid.uuid4().hex[:12]}"
    ready = fleet.dir / "ready"
    lab = f"LAB_READY={ready} {sys.executable} {LAB} launch {ports} {run} 1 stopped"
    a, b, c = (fleet.host(f"LAB_LOCAL={ranks} {lab}") for ranks in ("0,1", "2,3", "4,5"))
    wait_for(lambda: all(Path(f"{ready}.{r}").exists() for r in range(6)), timeout=60, what="six ranks connected")
    stopped = [_rank_pid_of(a, run, 1), _rank_pid_of(c, run, 4)]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: all(proc_state(pid) == "T" for pid in stopped), what="ranks 1 and 4 stopped")
    r = fleet.run("sweep", a.target, b.target, c.target)
    doc = json.loads(r.stdout)
    (job,) = doc["summary"]["jobs"]
    named = {(job["holder"]["host"], job["holder"]["rank"])} | {(o["host"], o["rank"]) for o in job["also_held_by"]}
    assert named == {(a.target, 1), (c.target, 4)}, job
    # of two holders alike, the lower rank is the job's holder, whatever order the hosts finished in (it
    # changed between sweeps); the other's host is told who waits, not to run a sweep it is in
    assert (job["holder"]["host"], job["holder"]["rank"]) == (a.target, 1), job
    also = next(h for h in doc["hosts"] if h["target"] == c.target)
    assert not any("a sweep of them says" in f["summary"] for f in also["findings"]), also["findings"]
    assert any("ranks 2, 3 on 1 other host(s) of this run wait on it" in f["summary"] for f in also["findings"])
    told = culprit(next(h for h in doc["hosts"] if h["target"] == b.target))
    assert told["severity"] == "error" and "holds it too: stopped (T)" in str(told["evidence"]), told
    holder = next(h for h in doc["hosts"] if h["target"] == job["holder"]["host"])
    here = {a.target: 0, c.target: 5}[holder["target"]]  # the holder host's other rank, by number
    assert any(f"; rank {here} here and ranks 2, 3 on 1 other host(s)" in f["summary"] for f in holder["findings"]), [
        f["summary"] for f in holder["findings"]
    ]
    assert r.returncode == 1 and {h["verdict"] for h in doc["hosts"]} == {"stalled"}
    table = fleet.run("sweep", a.target, b.target, c.target, fmt="table")
    assert "held by: rank " in table.stdout and "also:    rank " in table.stdout, table.stdout
    # the holder host's own waiting rank said apart from the hosts listed (it was counted among them)
    text = re.sub(r"\s+", " ", table.stdout)
    assert re.search(rf"waiting: 2 rank\(s\) on \[1: {re.escape(b.target)}\], and 1 on ", text), table.stdout


STORE = """import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
held = []
while True:
    c, _ = s.accept()
    held.append(c)  # kept open: the rank waits for its answer
    threading.Thread(target=c.recv, args=(64,), daemon=True).start()  # reads the request, never answers
"""
STORE_CLIENT = """import os, socket, sys, threading, time
threading.Thread(target=time.sleep, args=(10**6,), daemon=True).start()  # a rank has threads; the probe reads their environ
while True:  # the store may not listen yet: retried, as torch's clients do
    try:
        c = socket.create_connection(("127.0.0.1", int(os.environ["MASTER_PORT"])))
        break
    except OSError:
        time.sleep(0.05)
c.sendall(b"wait rendezvous")
open(sys.argv[1] + "." + os.environ["RANK"], "w").close()
c.recv(64)  # the store's answer
"""


def test_a_job_whose_every_rank_waits_on_its_stopped_store_names_no_rank_as_holder(fleet: Fleet) -> None:
    """Three ranks on three hosts, each reading the job's TCP store on A, which is stopped. Every
    rank waits on something that is not a rank; the first host's rank was said to hold the job and
    the operator sent to it (found by a helper). No rank holds it now; each host is STALLED on the
    store, which is named."""
    port, run, ready = free_ports(1)[0], f"lab-{uuid.uuid4().hex[:12]}", fleet.dir / "ready"
    env = f"MASTER_ADDR=127.0.0.1 MASTER_PORT={port} WORLD_SIZE=3 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0 TORCHELASTIC_RUN_ID={run}"
    store, client = fleet.dir / "store.py", fleet.dir / "client.py"
    store.write_text(STORE)
    client.write_text(STORE_CLIENT)
    a = fleet.host(f"sh -c '{sys.executable} {store} {port} & env {env} RANK=0 {sys.executable} {client} {ready}'")
    hosts = [a, *(fleet.host(f"env {env} RANK={r} {sys.executable} {client} {ready}") for r in (1, 2))]
    wait_for(lambda: all(Path(f"{ready}.{r}").exists() for r in range(3)), timeout=30, what="ranks at the store")
    pid = next(p.pid for p in psutil.Process(a.proc.pid).children(recursive=True) if str(store) in p.cmdline())
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: proc_state(pid) == "T", what="the store stopped")
    r = fleet.run("sweep", *(h.target for h in hosts))
    doc = json.loads(r.stdout)
    assert "jobs" in doc["summary"], [(h["target"], h["headline"]) for h in doc["hosts"]]
    (job,) = doc["summary"]["jobs"]
    assert job["holder"] is None and job["also_held_by"] == [], job
    for h in doc["hosts"][1:] if doc["hosts"][0]["target"] == a.target else doc["hosts"]:
        if h["target"] == a.target:
            continue
        f = next(f for f in h["findings"] if f["rule"] == "socket-peer-wait")
        assert f["severity"] == "error" and "stopped (T)" in f["summary"], f
    assert r.returncode == 1 and {h["verdict"] for h in doc["hosts"]} == {"stalled"}


def test_two_clusters_under_one_rendezvous_are_two_jobs(fleet: Fleet) -> None:
    """Two clusters with no run id and one rendezvous string (`node0:29500`, each its own node0): A and
    B (rank 1 stopped), and C and D, spinning as busy NCCL ranks do. They were joined as one job of
    "4 rank(s) of 2", and C and D read STALLED, held by B's stopped rank (found by a helper). Each host
    has its own address, as on a fleet: the ranks that connect to each other are one job."""
    ports = [",".join(map(str, free_ports(2))) for _ in range(2)]
    ready = fleet.dir / "ready"
    hosts = []
    for cluster, (ips, spin) in enumerate(
        ((("127.0.0.2", "127.0.0.3"), ""), (("127.0.0.4", "127.0.0.5"), "LAB_SPIN=1 "))
    ):
        lab = (f"{spin}LAB_READY={ready}-{cluster} LAB_IPS={','.join(ips)} LAB_RENDEZVOUS=node0:29500 "
               f"{sys.executable} {LAB} launch {ports[cluster]} lab-{cluster}-{uuid.uuid4().hex[:8]} 1 stopped")  # fmt: skip
        hosts += [fleet.host(f"LAB_LOCAL={r} {lab}", address=ip) for r, ip in enumerate(ips)]
    wait_for(lambda: all(Path(f"{ready}-{c}.{r}").exists() for c in range(2) for r in range(2)), timeout=30,
             what="both clusters' ranks connected")  # fmt: skip
    a, b, c, d = hosts
    stopped = int(Path(f"{ready}-0.1").read_text())
    rank1 = next(p.pid for p in psutil.Process(b.proc.pid).children(recursive=True) if p.environ().get("RANK") == "1"
                 and p.cmdline()[-2] == "rank")  # fmt: skip
    os.kill(rank1, signal.SIGSTOP)
    wait_for(lambda: proc_state(rank1) == "T", what=f"rank 1 of cluster 1 stopped (ns pid {stopped})")
    rc, got = fleet.sweep(*(h.target for h in hosts))
    assert got[c.target]["verdict"] == "healthy" and got[d.target]["verdict"] == "healthy", (
        got[c.target]["headline"], got[d.target]["headline"])  # fmt: skip
    told = culprit(got[a.target])
    assert told["remote"] == b.target and told["severity"] == "error", told
    assert rc == 1 and got[a.target]["verdict"] == "stalled" and got[b.target]["verdict"] == "stalled"


def test_a_rank_held_up_by_a_timer_holds_the_job_on_both_hosts_in_words_that_say_so(fleet: Fleet) -> None:
    """Rank 2 on B waits for a `sleep` child; the others spin in their collective. It holds the job, but
    it goes on when its timer is up: a warning on both hosts, each saying why. Both read STALLED, and
    once a warning, the holder's own host and the other host of a sweep lost the reason (found by a
    helper, two hosts swept)."""
    a, b, _run = start_job(fleet, "subsleep")
    wait_for(lambda: fleet.blocked_in(b, "hrtimer_nanosleep"), what="rank 2's sleep child")
    rc, got = fleet.sweep(a.target, b.target)
    told = {t: [(f["rule"], f["severity"], f["summary"]) for f in h["findings"]] for t, h in got.items()}
    for h in (a, b):
        f = culprit(got[h.target])
        assert f["severity"] == "warning" and "goes on when that is up" in f["summary"], told
    assert culprit(got[a.target])["remote"] == b.target, told
    assert rc == 0 and {h["verdict"] for h in got.values()} == {"degraded"}, told


@pytest.mark.parametrize("how", ["none", "skip"])
def test_a_job_whose_every_rank_waits_is_not_said_to_be_held_elsewhere(fleet: Fleet, how: str) -> None:
    """Four ranks on two hosts, each waiting in the collective (gloo's futex and epoll), none elsewhere.
    Each host said "the rank holding them is on another host (ranks 2, 3)" while the run saw those
    ranks waiting too (found by a helper). Now: no rank is seen holding the others, and as nothing of the
    job moves on either host (no byte, no main-thread wake, no CPU beyond a watchdog's), no rank is
    outside the wait to end it: an error (a warning before; a collective that takes its time moves
    bytes or wakes its ranks, tests/report/test_ring_jobs.py's ring at work). `skip`: gloo's run loops
    too, and rank 1's idle (it skipped the collective): both hosts name it, and its host."""
    ports, run, ready = ",".join(map(str, free_ports(4))), f"lab-{uuid.uuid4().hex[:12]}", fleet.dir / "ready"
    loops = "LAB_RUNLOOPS=1 " if how == "skip" else ""
    lab = f"{loops}LAB_READY={ready} {sys.executable} {LAB} launch {ports} {run} {1 if loops else -1} {how}"
    a, b = fleet.host(f"LAB_LOCAL=0,1 {lab}"), fleet.host(f"LAB_LOCAL=2,3 {lab}")
    wait_for(lambda: all(Path(f"{ready}.{r}").exists() for r in range(4)), timeout=30, what="four ranks connected")
    rc, got = fleet.sweep(a.target, b.target)
    for h in (a, b):
        f = culprit(got[h.target])
        assert f["summary"].startswith(f"every rank of job {run} (torchelastic), on 2 hosts of this run, waits on "
                                       "another, and nothing of the job moved over the window on any host: "), f  # fmt: skip
        how_words = f["summary"].split("on any host: ", 1)[1]
        if how == "skip":
            skipped = int(Path(f"{ready}.1").read_text())  # the rank's pid on host A (its own PID namespace)
            assert (
                how_words.startswith(f"rank 1 (pid {skipped}, python")
                and f" on {a.target} has not entered the collective the others wait in" in how_words
            ), how_words
            assert f"see where rank 1 is (py-spy dump --pid {skipped} on {a.target})" in f["hint"], f["hint"]
        else:
            assert how_words == "they wait on one another", how_words
        assert "on another host" not in f["summary"] and f["severity"] == "error"
    assert rc == 1 and {h["verdict"] for h in got.values()} == {"stalled"}


def _redis(fleet: Fleet) -> tuple[Sshd, Sshd, int]:
    """B runs redis-server, then stopped; A runs a redis-cli GET against it (accepted, never answered)."""
    port = free_ports(1)[0]
    b = fleet.host(f"redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no")
    wait_for(lambda: fleet.find(b, "redis-server") is not None, what="redis-server")
    up = ["redis-cli", "-p", str(port), "ping"]
    wait_for(lambda: subprocess.run(up, capture_output=True).returncode == 0, what="redis-server answering")
    server = fleet.find(b, "redis-server")
    assert server is not None
    os.kill(server, signal.SIGSTOP)
    wait_for(lambda: proc_state(server) == "T", what="redis-server stopped")
    a = fleet.host(f"redis-cli -p {port} GET somekey")
    wait_for(lambda: fleet.find(a, "redis-cli") is not None, what="redis-cli")
    cli = fleet.find(a, "redis-cli")
    assert cli is not None
    wait_for(lambda: proc_state(cli) == "S", what="redis-cli waiting")
    return a, b, port


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server and redis-cli")
def test_a_client_on_one_host_is_held_by_the_stopped_server_on_another(fleet: Fleet) -> None:
    a, b, port = _redis(fleet)
    rc, got = fleet.sweep(a.target, b.target)
    waits = [f for f in got[a.target]["findings"] if f["rule"] == "socket-peer-wait"]
    assert waits, got[a.target]["findings"]
    f = waits[0]
    assert re.match(rf"redis-cli \(\d+\) waits on TCP 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:{port}, whose other end is "
                    rf"redis-server \(\d+\) on {re.escape(b.target)}: stopped \(T\)", f["summary"]), f["summary"]  # fmt: skip
    assert f["severity"] == "error" and f["remote"] == b.target and f["peer"]["remote"] == f"127.0.0.1:{port}"
    assert "kill -CONT" in f["hint"] and got[a.target]["verdict"] == "stalled" and rc == 1
    stopped = [g for g in got[b.target]["findings"] if any(e["source"] == "this run" for e in g["evidence"])]
    assert stopped and "redis-server" in stopped[0]["summary"], got[b.target]["findings"]
    line = next(e["detail"] for e in stopped[0]["evidence"] if e["source"] == "this run")
    assert line.startswith(f"{a.target}: redis-cli (") and "waits on redis-server (" in line, line

    # NDJSON streams each host as it finishes, before the joins: a joined host is written again
    r = fleet.run("sweep", a.target, b.target, fmt="ndjson")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    last = {x["target"]: x for x in lines if "target" in x}
    assert last[a.target]["verdict"] == "stalled" and lines[-1]["summary"]["verdict"]["stalled"] == 2, r.stdout
    assert r.returncode == 1 and len(lines) >= 3


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server and redis-cli")
def test_one_host_alone_names_the_other_end_it_cannot_see(fleet: Fleet) -> None:
    """A diagnosed alone, its named client waiting on a connection whose other end no process there holds
    and nothing moving over the window: a warning that names the address and what to diagnose."""
    a, _b, port = _redis(fleet)
    r = fleet.run("diagnose", a.target, extra=("--match", "redis-cli"))
    host = json.loads(r.stdout)["hosts"][0]
    f = next(f for f in host["findings"] if f["rule"] == "socket-peer-wait")
    assert f["severity"] == "warning" and host["verdict"] == "degraded" and r.returncode == 0, f
    assert f"no process on this host holds the other end, 127.0.0.1:{port}" in f["summary"], f["summary"]
    assert f"listens on port {port}" in f["hint"], f["hint"]
    r = fleet.run("diagnose", a.target)  # the whole host: an idle connection is no one's stall alone
    assert r.returncode == 0 and json.loads(r.stdout)["hosts"][0]["verdict"] == "healthy", r.stdout


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server and redis-cli")
def test_a_client_queued_on_a_listener_that_accepts_nothing_on_another_host_is_stalled(fleet: Fleet) -> None:
    """B's redis-server sleeps in DEBUG SLEEP (asked by a first client); a second client on A waits in
    its accept queue. Seen from one host that sees both ends this is the listener's proof (docs/
    evidence.md); across two hosts it read A DEGRADED, B HEALTHY, exit 0, until B's report carried the
    listener's queue and whether its holder did anything over the window."""
    port = free_ports(1)[0]
    b = fleet.host(f"redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no --enable-debug-command yes")
    up = ["redis-cli", "-p", str(port), "ping"]
    wait_for(lambda: subprocess.run(up, capture_output=True).returncode == 0, what="redis-server answering")
    server = fleet.find(b, "redis-server")
    assert server is not None
    asleep = subprocess.Popen(["redis-cli", "-p", str(port), "DEBUG", "SLEEP", "300"], stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: proc_wchan(server) == "hrtimer_nanosleep", what="redis-server asleep")
        a = fleet.host(f"redis-cli -p {port} GET somekey")
        wait_for(lambda: fleet.find(a, "redis-cli") is not None and fleet.blocked_in(a, "wait_woken"),
                 what="the client waiting in the accept queue")  # fmt: skip
        rc, got = fleet.sweep(a.target, b.target, extra=("--match", "redis"))
        f = next((f for f in got[a.target]["findings"] if f["rule"] == "socket-peer-wait"), None)
        assert f is not None, got[a.target]["findings"]
        seen = re.search(rf"whose other end is redis-server \((\d+)\) on {re.escape(b.target)}: not accepting: 1 "
                         rf"connection\(s\) wait in the accept queue of 127\.0\.0\.1:{port}", f["summary"])  # fmt: skip
        assert seen is not None, f["summary"]
        assert f["severity"] == "error" and got[a.target]["verdict"] == "stalled"
        told = [g for g in got[b.target]["findings"] if int(seen.group(1)) in g["pids"]]  # B's own PID for it
        assert told and told[0]["severity"] == "error" and got[b.target]["verdict"] == "stalled", got[b.target]
        assert rc == 1
    finally:
        asleep.kill()
        asleep.wait()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server and redis-cli")
def test_a_queue_worker_waiting_on_a_working_server_on_another_host_is_healthy(fleet: Fleet) -> None:
    """A's redis-cli BLPOP waits for work on B's live redis-server (its timer ticks ten times a second).
    A alone, the named client moved nothing over the window and its other end is out of sight: a
    warning. In a run with B, the other end is seen working, as one host seeing both ends reads it (a
    blocker that works holds nobody): a note, HEALTHY, exit 0. It read A DEGRADED in the run too."""
    port = free_ports(1)[0]
    b = fleet.host(f"redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no")
    up = ["redis-cli", "-p", str(port), "ping"]
    wait_for(lambda: subprocess.run(up, capture_output=True).returncode == 0, what="redis-server answering")
    a = fleet.host(f"redis-cli -p {port} BLPOP jobs 0")
    wait_for(lambda: fleet.find(a, "redis-cli") is not None and fleet.blocked_in(a, "wait_woken"),
             what="the worker waiting for a job")  # fmt: skip
    alone = fleet.run("diagnose", a.target, extra=("--match", "redis-cli"))
    host = json.loads(alone.stdout)["hosts"][0]
    assert host["verdict"] == "degraded" and alone.returncode == 0, host["findings"]
    rc, got = fleet.sweep(a.target, b.target, extra=("--match", "redis"))
    f = next(f for f in got[a.target]["findings"] if f["rule"] == "socket-peer-wait")
    assert f["severity"] == "info" and f["remote"] == b.target, f
    assert re.search(
        rf"whose other end is redis-server \(\d+\) on {re.escape(b.target)}, where redis-server \(\d+\) worked over",
        f["summary"],
    ), f
    assert got[a.target]["verdict"] == "healthy" and got[b.target]["verdict"] == "healthy", got
    assert rc == 0


PY_SERVER = """
import socket, subprocess, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
if mode == "compute":
    subprocess.Popen(["sleep", "100000"])   # a helper of its own (a log shipper), unrelated to clients
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port)); ls.listen(16)
c, _ = ls.accept()
if mode == "compute":
    c.recv(100)
    while True:                             # a slow answer: it works on it
        pass
import signal
signal.pause()                              # accepted, never reads the request (not on a timer: that wakes by itself)
"""
PY_CLIENT = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"request\\n")
c.recv(100)
"""


def _client_and_server(fleet: Fleet, mode: str) -> tuple[Sshd, Sshd, int]:
    port = free_ports(1)[0]
    server = fleet.dir / "server.py"
    server.write_text(PY_SERVER)
    client = fleet.dir / "client.py"
    client.write_text(PY_CLIENT)
    b = fleet.host(f"{sys.executable} {server} {port} {mode}")
    wait_for(lambda: any(f":{port:04X} " in line and line.split()[3] == "0A"
                         for line in Path("/proc/net/tcp").read_text().splitlines()[1:]), what="the server listening")  # fmt: skip
    a = fleet.host(f"{sys.executable} {client} {port}")
    wait_for(lambda: fleet.blocked_in(a, "wait_woken"), what="the client waiting for its answer")
    return a, b, port


def test_a_request_a_server_on_another_host_never_reads_is_a_stall(fleet: Fleet) -> None:
    """B's server accepted the connection and sleeps without reading the request. On one host the
    unread bytes in the server's receive queue are the proof (docs/evidence.md); across two hosts
    both read HEALTHY, exit 0 (found by a helper), and the server asleep on a timer was even taken
    for one that works."""
    a, b, _port = _client_and_server(fleet, "sleep")
    rc, got = fleet.sweep(a.target, b.target)
    f = next((f for f in got[a.target]["findings"] if f["rule"] == "socket-peer-wait"), None)
    assert f is not None, got[a.target]["findings"]
    assert re.search(rf"whose other end is python3? \(\d+\) on {re.escape(b.target)}: not reading: the 8 B sent to it "
                     "sit unread", f["summary"]), f["summary"]  # fmt: skip
    assert f["severity"] == "error" and got[a.target]["verdict"] == "stalled"
    assert got[b.target]["verdict"] == "stalled" and rc == 1, got[b.target]["findings"]


def test_a_busy_servers_own_stopped_helper_is_not_blamed_for_its_client(fleet: Fleet) -> None:
    """B's server computes its answer (it works) and has a helper child of its own, stopped. The join
    told A "its host says: sleep is stopped" (an error, STALLED) because the helper is under the
    server: a holder that works is not held by a child of its own."""
    a, b, _port = _client_and_server(fleet, "compute")
    helper = fleet.find(b, "sleep")
    assert helper is not None
    os.kill(helper, signal.SIGSTOP)
    try:
        wait_for(lambda: proc_state(helper) == "T", what="the helper stopped")
        rc, got = fleet.sweep(a.target, b.target, extra=("--match", "server.py|client.py"))
        ha = got[a.target]
        assert ha["verdict"] == "healthy", [(f["severity"], f["summary"]) for f in ha["findings"]]
        assert not any("sleep (" in f["summary"] for f in ha["findings"]), ha["findings"]
        assert got[b.target]["verdict"] == "stalled" and rc == 1  # B's own stopped helper
    finally:
        os.kill(helper, signal.SIGCONT)


PY_RECEIVER = """
import socket, sys
ls = socket.socket(); ls.bind(("127.0.0.1", int(sys.argv[1]))); ls.listen(1)
c, _ = ls.accept()
ls.close()                                  # one stream, then no listener: the sender is no "server"
while c.recv(100):
    pass
"""
PY_SENDER = """
import socket, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
while True:
    c.sendall(b"sample\\n"); time.sleep(0.2)
"""


def test_a_receiver_held_by_a_stopped_sender_on_another_host_is_a_stall(fleet: Fleet) -> None:
    """A accepted one stream and reads it; B's sender, a client (its connection accepted on no
    listening port of B's), is stopped. B's report listed only listeners and the connections
    accepted on them, so A's wait had no other end in the run: A HEALTHY beside a STALLED B (found
    by a helper). Connections whose holder is stopped are listed too now."""
    port = free_ports(1)[0]
    (fleet.dir / "receiver.py").write_text(PY_RECEIVER)
    (fleet.dir / "sender.py").write_text(PY_SENDER)
    a = fleet.host(f"{sys.executable} {fleet.dir / 'receiver.py'} {port}")
    wait_for(lambda: any(f":{port:04X} " in line for line in Path("/proc/net/tcp").read_text().splitlines()[1:]),
             what="the receiver listening")  # fmt: skip
    b = fleet.host(f"{sys.executable} {fleet.dir / 'sender.py'} {port}")
    wait_for(lambda: fleet.find(b, "python3") is not None or fleet.find(b, "python") is not None, what="the sender")
    sender = fleet.find(b, "python3") or fleet.find(b, "python")
    assert sender is not None
    wait_for(lambda: fleet.blocked_in(a, "wait_woken"), what="the receiver reading")
    os.kill(sender, signal.SIGSTOP)
    try:
        wait_for(lambda: proc_state(sender) == "T", what="the sender stopped")
        rc, got = fleet.sweep(a.target, b.target)
        f = next((f for f in got[a.target]["findings"] if f.get("remote") == b.target), None)
        assert f is not None, got[a.target]["findings"]
        assert f"on {b.target}: stopped (T)" in f["summary"] and f["severity"] == "error", f["summary"]
        assert got[a.target]["verdict"] == "stalled" and got[b.target]["verdict"] == "stalled" and rc == 1
    finally:
        os.kill(sender, signal.SIGCONT)
