"""A distributed job on this host (tests/rank_lab.py: a launcher and three ranks with torchrun's
environment, a full mesh of TCP pairs, each rank's main thread waiting for the collective while its
communication thread polls the others), one rank held elsewhere in each way a rank is lost: blocked on
its loader's FIFO, on a FUSE dataset mount whose server does not answer, stopped, killed, OOM-killed.
`diagnose local` names that rank, says why, and how many ranks wait on it; the waiting ranks' own
findings follow from it. The real PyTorch shape is fixtures/procfs/torch-gloo-fifo."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.cgroup_lab import OOM_KILLS, MemoryCgroup
from tests.helpers import children_of, favour_on_cpu, mount_fuse, proc_state, proc_wchan, vastprobe_json, wait_for
from tests.sshd import free_ports, keygen, start_sshd

LAB = Path(__file__).parents[1] / "rank_lab.py"


RECORDED_DUMPS = Path(__file__).parents[2] / "fixtures" / "flight-recorder" / "gloo-fifo"
SECRETS = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-planted-K7MDENG", "HF_TOKEN": "hf_plantedTokenDoNotPrint"}


class Lab(dict[int, int]):
    """rank -> pid, and the --match that names this job's processes only (its run id is in their argv:
    other tests' rank labs, in this suite or another one on the machine, are not this job)."""

    match: str


def start_job(reap: list, tmp_path: Path, how: str, path: str = "", procs_file: Path | None = None,
              env: dict[str, str] | None = None) -> Lab:  # fmt: skip
    """rank -> pid of a three-rank job whose rank 1 is the culprit, once every rank is set up."""
    ready = tmp_path / "ready"
    ports = ",".join(map(str, free_ports(3)))
    run = f"lab-{uuid.uuid4().hex[:12]}"
    cmd = [sys.executable, str(LAB), "launch", ports, run, "1", how, path]
    if procs_file is not None:
        cmd = ["sh", "-c", f'echo $$ > {procs_file}; exec "$@"', "sh", *cmd]
    launcher = subprocess.Popen(cmd, env=dict(os.environ, LAB_READY=str(ready), **(env or {})), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    reap.append(launcher)

    def written(r: int) -> bool:  # a rank opens its file before it writes its PID there: wait for the digits
        try:
            return Path(f"{ready}.{r}").read_text().strip().isdigit()
        except OSError:
            return False

    wait_for(lambda: all(written(r) for r in range(3)), timeout=30, what="three ranks connected")
    lab = Lab({r: int(Path(f"{ready}.{r}").read_text()) for r in range(3)})
    lab.match = f"rank_lab.py (launch .* )?{run}"
    return lab


def culprit_finding(host: dict) -> dict:
    found = [f for f in host["findings"] if f["rule"] == "culprit-rank"]
    ranks = [(r.get("rank"), r.get("state"), r.get("why")) for j in host.get("jobs", []) for r in j.get("ranks", [])]
    assert found, ([(f["rule"], f["severity"], f["summary"]) for f in host["findings"]], ranks)
    return found[0]


def waiting(pids: dict[int, int]) -> None:
    for r in (0, 2):
        wait_for(lambda r=r: proc_wchan(pids[r]).startswith("futex"), what=f"rank {r} in its collective")


@pytest.mark.parametrize("sample", ["1", "0"])
def test_a_rank_blocked_on_its_loaders_fifo_holds_the_job(reap, tmp_path: Path, sample: str) -> None:
    fifo = tmp_path / "loader.fifo"
    os.mkfifo(fifo)
    pids = start_job(reap, tmp_path, "fifo", str(fifo))
    waiting(pids)
    wait_for(lambda: proc_wchan(pids[1]) == "wait_for_partner", what="rank 1 blocked on the FIFO")
    rc, host = vastprobe_json("--match", pids.match, "--sample", sample)
    f = culprit_finding(host)
    assert f["summary"].startswith(f"rank 1 (pid {pids[1]}, python") and "FIFO" in f["summary"], f["summary"]
    assert "2 other ranks (0, 2) wait on it in a collective" in f["summary"]
    assert f["pids"][:1] == [pids[1]] and {pids[0], pids[2]} <= set(f["pids"])
    if sample == "1":
        assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1
        assert host["incidents"][0]["root"]["rule"] == "culprit-rank", host["incidents"][0]
        followers = [c["rule"] for c in host["incidents"][0]["consequences"]]
        assert "fifo-no-partner" in followers, followers  # the culprit's own chain follows from it
    else:
        assert f["severity"] == "warning" and f["summary"].endswith("(seen in one sample)")
    assert "TORCH_FR_BUFFER_SIZE" in f["hint"]  # the job ran without the flight recorder


def test_a_stopped_rank_holds_the_job(reap, tmp_path: Path) -> None:
    pids = start_job(reap, tmp_path, "none")
    waiting(pids)
    os.kill(pids[1], signal.SIGSTOP)
    wait_for(lambda: proc_state(pids[1]) == "T", what="rank 1 stopped")
    rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
    f = culprit_finding(host)
    assert f["summary"].startswith(f"rank 1 (pid {pids[1]}") and "stopped" in f["summary"]
    assert f"kill -CONT {pids[1]}" in f["hint"] and rc == 1


def test_a_rank_waiting_for_a_signal_holds_the_job(reap, tmp_path: Path) -> None:
    """Found by a helper: a rank stuck in signal.pause() (its other threads idle) was said to wait in a
    collective, like the ranks waiting on it, and the job read HEALTHY, exit 0."""
    pids = start_job(reap, tmp_path, "pause")
    waiting(pids)
    wait_for(lambda: proc_wchan(pids[1]).endswith("sys_pause"), what="rank 1 in pause()")
    rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
    f = culprit_finding(host)
    assert f["summary"].startswith(f"rank 1 (pid {pids[1]}, python") and "waits for a signal" in f["summary"], f
    assert "2 other ranks (0, 2) wait on it in a collective" in f["summary"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1


@pytest.mark.parametrize("reaped", [True, False])
def test_a_rank_that_exited_is_named_and_a_single_threaded_one_is_not_gone(reap, tmp_path: Path, reaped: bool) -> None:
    """Found by a helper: rank 1 exited; rank 2, whose communication thread ended with it, is left with
    one thread, and the probe read only multi-threaded processes' environments: "rank 2 is gone" in an
    error while rank 2 ran; with rank 1 a zombie its launcher had not reaped, rank 1 was named nowhere."""
    env = {"LAB_LOOPLESS": "2", **({} if reaped else {"LAB_NO_REAP": "1"})}
    pids = start_job(reap, tmp_path, "exit", env=env)
    waiting(pids)
    wait_for(lambda: proc_state(pids[1]) == (None if reaped else "Z"), what="rank 1 exited")
    rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
    f = culprit_finding(host)
    gone = "no process is this local rank any more" if reaped else f"exited (pid {pids[1]}, python"
    assert f["summary"].startswith("rank 1 of 3 in job") and f" is gone: {gone}" in f["summary"], f["summary"]
    assert "2 other ranks (0, 2) wait on it" in f["summary"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1
    ranks = [(x["rank"], x["pid"], x["state"]) for x in host["jobs"][0]["ranks"]]
    assert (2, pids[2], "collective") in ranks and [r for r in ranks if r[2] == "gone"] == [(1, None, "gone")], ranks
    assert not any("rank 2" in g["summary"] and "gone" in g["summary"] for g in host["findings"]), host["findings"]


@pytest.mark.parametrize("helper", [False, True])
def test_a_killed_rank_is_gone_and_holds_the_job(reap, tmp_path: Path, helper: bool) -> None:
    """`helper`: the launcher also runs a program of the ranks' name that is no rank (its environment read,
    no RANK); counted as a rank whose environment was not read, it made rank 1 "on another host" (found by
    the session's regression hunt)."""
    pids = start_job(reap, tmp_path, "none", env={"LAB_HELPER": "1"} if helper else None)
    waiting(pids)
    os.kill(pids[1], signal.SIGKILL)
    wait_for(lambda: proc_state(pids[1]) is None, what="rank 1 reaped by its launcher")
    rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
    f = culprit_finding(host)
    # the survivors' RANK and LOCAL_RANK number it: rank 1 of the job's 3, not "local rank 1"
    assert f["summary"].startswith("rank 1 of 3 in job") and " is gone: " in f["summary"], f["summary"]
    assert f["severity"] == "error" and host["verdict"] == "stalled"
    assert "2 other ranks (0, 2)" in f["summary"] and rc == 1
    job = host["jobs"][0]
    assert [(x["rank"], x["state"]) for x in job["ranks"]] == [(0, "collective"), (2, "collective"), (1, "gone")]


def test_a_rank_reading_a_dead_fuse_mount_holds_the_job(reap, tmp_path: Path) -> None:
    mnt = tmp_path / "datasets"
    mount_fuse(reap, mnt)
    try:
        pids = start_job(reap, tmp_path, "fuse", str(mnt / "shard-00001.tar"))
        waiting(pids)
        wait_for(lambda: proc_wchan(pids[1]) == "request_wait_answer", what="rank 1 waiting on the mount")
        _rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
        f = culprit_finding(host)
        assert f["summary"].startswith(f"rank 1 (pid {pids[1]}") and str(mnt) in f["summary"], f["summary"]
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@OOM_KILLS
def test_an_oom_killed_rank_holds_the_job_and_the_kill_leads(reap, tmp_path: Path, memcg: MemoryCgroup) -> None:
    cg = MemoryCgroup(256 * 1024 * 1024)
    try:
        pids = start_job(reap, tmp_path, "oom", procs_file=cg.procs_file)
        wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="rank 1 OOM-killed")
        waiting({0: pids[0], 2: pids[2]})
        wait_for(lambda: proc_state(pids[1]) is None, what="rank 1 reaped")
        rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
        f = culprit_finding(host)
        assert "OOM-killed" in f["summary"] and f["caused_by"] == "oom-killed-child", f
        # which rank died, when, and under which launcher: the kernel log's victim tied to the missing rank
        assert f["summary"].startswith("rank 1 of 3 in job"), f["summary"]
        assert re.search(r"is gone: OOM-killed at \d\d:\d\d:\d\d UTC \(host pid \d+, python3?, a child of launcher "
                         r"python3? \(\d+\)\)", f["summary"]), f["summary"]  # fmt: skip
        assert host["incidents"][0]["root"]["rule"] == "oom-killed-child" and rc == 1
        assert "rank 1 of 3" in host["headline"] and host["verdict"] == "stalled", host["headline"]
    finally:
        cg.remove()


def test_ranks_that_all_wait_with_nothing_moving_stall_the_job_and_blame_nobody(reap, tmp_path: Path) -> None:
    """Every rank of the job on this host waits in its collective, none elsewhere, and nothing of the job
    moves: no rank is outside the wait to end it. No rank is named (nothing says which skipped the
    collective), and the job is stalled: it read HEALTHY, no finding, while it waited for ever (found by
    the regression hunt). Ranks at work are tests/rules/test_ranks_waiting_on_each_other.py's control."""
    pids = start_job(reap, tmp_path, "none")
    waiting(pids)
    wait_for(lambda: proc_wchan(pids[1]).startswith("futex"), what="rank 1 in its collective")
    rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
    f = culprit_finding(host)
    assert (
        f["severity"] == "error"
        and "nothing of the job moved over " in f["summary"]
        and f["summary"].endswith(": they wait on one another")
    ), f["summary"]
    assert "all 3 on this host, waits on another" in f["summary"], f["summary"]
    [job] = host["jobs"]
    assert job["culprit"] is None and sorted(job["waiting"]) == [0, 1, 2], job
    assert rc == 1 and host["verdict"] == "stalled", host["headline"]


@pytest.mark.parametrize("how", ["skip", "none"])
def test_the_rank_whose_gloo_run_loops_are_idle_is_named_where_every_rank_waits(reap, tmp_path: Path, how: str) -> None:
    """gloo's ranks all wait in futexes, the rank that skipped the collective too: nothing moves, STALLED,
    but no rank was named (real PyTorch: a skipped all_reduce, a rank on its own lock). Its run loops are
    idle where each other rank has one waiting with the group's timeout: it is named, first. `none`: every
    rank inside its collective, none named."""
    pids = start_job(reap, tmp_path, how, env={"LAB_RUNLOOPS": "1"})
    waiting(pids)
    wait_for(lambda: proc_wchan(pids[1]).startswith("futex"), what="rank 1 waiting")
    rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
    f = culprit_finding(host)
    assert "nothing of the job moved over " in f["summary"] and "all 3 on this host" in f["summary"], f["summary"]
    if how == "skip":
        named = f["summary"].split("moved over ")[1].split(": ", 1)[1]
        assert named.startswith(f"rank 1 (pid {pids[1]}, python") and "has not entered the collective" in named, named
        assert f["pids"][0] == pids[1] and f"see where rank 1 is (py-spy dump --pid {pids[1]})" in f["hint"], f
    else:
        assert f["summary"].endswith(": they wait on one another"), f["summary"]
    assert f["severity"] == "error" and rc == 1 and host["verdict"] == "stalled", host["headline"]


def test_ranks_waiting_on_one_whose_main_thread_waits_with_a_deadline_are_not_stalled(reap, tmp_path: Path) -> None:
    """The control: rank 1's main thread waits on a condition with a timeout (`Event.wait(3600)`), the others
    in their collective. It wakes by itself, so nothing says the job will not move: it read STALLED, "they
    wait on one another", when every rank waiting with nothing moving first counted (found by a helper)."""
    pids = start_job(reap, tmp_path, "timedwait")
    waiting(pids)
    wait_for(lambda: proc_wchan(pids[1]).startswith("futex"), what="rank 1 in its timed wait")
    rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
    assert not [f for f in host["findings"] if f["rule"] == "culprit-rank" and f["severity"] == "error"], host[
        "findings"
    ]
    assert rc == 0 and host["verdict"] != "stalled", host["headline"]
    # named as what holds the others, in true words: it waits with a deadline, it does not compute (it was
    # said to wait in a collective; found by a helper)
    f = culprit_finding(host)
    assert (
        f["summary"].startswith(f"rank 1 (pid {pids[1]}, python) of job ") and "waits with a deadline" in f["summary"]
    )
    assert "goes on when that is up" in f["hint"] and "computes" not in f["hint"], f["hint"]


#: A server that sends 1 KiB every 0.3 s for ever: a slow download
SLOW_SERVER = """
import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
while True:
    c.sendall(b"x" * 1024)
    time.sleep(0.3)
"""


@pytest.mark.parametrize("how", ["subsleep", "download", "download-thread"])
def test_a_rank_held_up_by_what_goes_on_by_itself_does_not_stall_the_job(reap, tmp_path: Path, how: str) -> None:
    """Rank 1 waits on a `sleep` child, or downloads from a slow server in its main thread, or in an
    executor thread while its main thread waits for the result; the others wait in their collective. It
    holds them, but nothing proves it will not go on: the first two read STALLED, "not on another rank"
    (an error), the third "they wait on one another" (found by a helper on real PyTorch)."""
    path = ""
    if how.startswith("download"):
        server = subprocess.Popen([sys.executable, "-c", SLOW_SERVER], stdout=subprocess.PIPE, text=True,
                                  start_new_session=True)  # fmt: skip
        reap.append(server)
        assert server.stdout is not None
        path = f"127.0.0.1:{server.stdout.readline().strip()}"
    pids = start_job(reap, tmp_path, how, path)
    waiting(pids)
    if how == "subsleep":
        wait_for(lambda: any(proc_wchan(k) == "hrtimer_nanosleep" for k in children_of(pids[1])), what="its sleep")
    else:
        wait_for(lambda: f":{path.rsplit(':', 1)[1]}" in " ".join(_peers(pids[1])), what="rank 1 downloading")
    rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
    told = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in host["findings"] if f["rule"] == "culprit-rank" and f["severity"] == "error"], told
    assert rc == 0 and host["verdict"] != "stalled", told
    if how != "download-thread":  # its main thread waits on a lock of its own: a rank in a collective
        f = culprit_finding(host)
        assert f["summary"].startswith(f"rank 1 (pid {pids[1]}, ") and f["severity"] == "warning", told


def test_a_local_rank_that_never_started_is_missing_not_gone(reap, tmp_path: Path) -> None:
    """Ranks 0 and 1 of a three-rank job on this host (LOCAL_WORLD_SIZE 3) started by hand, rank 2 not (yet):
    they wait in their rendezvous (a store on rank 0, as torch's TCPStore). Nothing says rank 2 ever ran: it
    read "gone: no process is this local rank any more (killed, or exited)", STALLED at once (found by a
    helper on real PyTorch, ranks in init_process_group). Now it is missing, a warning."""
    run = f"lab-{uuid.uuid4().hex[:12]}"
    *mesh, store = free_ports(4)
    env = dict(os.environ, LAB_LOCAL="0,1", LAB_LOCAL_WORLD="3", LAB_STORE_PORT=str(store))
    launcher = subprocess.Popen([sys.executable, str(LAB), "launch", ",".join(map(str, mesh)), run, "-1", "none"],
                                env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    reap.append(launcher)
    wait_for(lambda: len(children_of(launcher.pid)) == 2, what="ranks 0 and 1 started")
    ranks = children_of(launcher.pid)
    wait_for(lambda: all(proc_wchan(r) in ("wait_woken", "sk_wait_data") for r in ranks), what="both in the rendezvous")
    rc, host = vastprobe_json("--match", f"rank_lab.py (launch .* )?{run}", "--sample", "1")
    f = culprit_finding(host)
    assert f["summary"].startswith(f"rank 2 of 3 in job {run} (torchelastic) is missing: "), f["summary"]
    assert "gone" not in f["summary"] and f["severity"] == "warning", f["summary"]
    [job] = host["jobs"]
    assert {x["rank"]: x["state"] for x in job["ranks"]}[2] == "missing", job["ranks"]
    assert rc == 0 and host["verdict"] == "degraded", host["headline"]


def _peers(pid: int) -> list[str]:
    """The remote ends (`:PORT`, hex) of the TCP connections `pid` holds, as /proc/net/tcp writes them."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[9] in inodes:
            out.append(f":{int(f[2].split(':')[1], 16)}")
    return out


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_sweep_of_three_hosts_names_the_host_and_rank_that_hold_the_job(tmp_path: Path) -> None:
    """Three loopback "hosts" (a PID namespace behind its own sshd each), one rank of a three-rank job
    on each; rank 1's host B has it blocked on its loader's FIFO. One sweep: B names rank 1, and A and
    C, whose ranks wait in the collective with nothing holding them there, are told it is B's rank 1."""
    key = keygen(tmp_path / "user")
    fifo = tmp_path / "loader.fifo"
    os.mkfifo(fifo)
    ports = ",".join(map(str, free_ports(3)))
    ready = tmp_path / "ready"
    run = f"lab-{uuid.uuid4().hex[:12]}"
    hosts = []
    try:
        for r in range(3):
            lab = f"LAB_LOCAL={r} LAB_READY={ready} {sys.executable} {LAB} launch {ports} {run} 1 fifo {fifo}"
            wrap = ["unshare", "--pid", "--kill-child", "--mount-proc", "--", "sh", "-c",
                    f'({lab} </dev/null >/dev/null 2>&1 &) ; exec "$@"', "sh"]  # fmt: skip
            hosts.append(start_sshd(tmp_path / f"h{r}", user_key=key, wrap=wrap))
        wait_for(lambda: all(Path(f"{ready}.{r}").exists() for r in range(3)), timeout=30, what="three ranks")
        kh = tmp_path / "known_hosts"
        kh.write_text("".join(h.known_hosts.read_text() for h in hosts))
        a, b, c = (h.target for h in hosts)

        def sweep() -> dict[str, dict]:
            r = subprocess.run([sys.executable, "-m", "vastprobe", "sweep", f"{a},{b},{c}", "-i", str(key),
                                "--known-hosts", str(kh), "--format", "json", "--snapshot", "--match", f"rank_lab.py (launch .* )?{run}", "--sample",
                                "1", "--no-history"], capture_output=True, text=True, timeout=120)  # fmt: skip
            assert r.stdout, r.stderr
            return {h["target"]: h for h in json.loads(r.stdout)["hosts"]}

        def rank1_blocked() -> bool:
            got = sweep()
            job = (got[b].get("jobs") or [{}])[0]
            return bool(job.get("culprit")) and all(got[t].get("jobs") for t in (a, c))

        wait_for(rank1_blocked, timeout=60, what="rank 1 blocked and the others waiting")
        got = sweep()
        holder = next(f for f in got[b]["findings"] if f["rule"] == "culprit-rank")
        assert holder["summary"].startswith("rank 1 (pid") and "FIFO" in holder["summary"], holder["summary"]
        assert "ranks 0, 2 on 2 other host(s) of this run wait on it" in holder["summary"], holder["summary"]
        assert any(e["source"] == "this run" and e["detail"].startswith("ranks 0, 2 on other hosts of this run wait")
                   for e in holder["evidence"])  # fmt: skip
        pid1 = got[b]["jobs"][0]["culprit"]["pid"]
        for t in (a, c):
            f = next(f for f in got[t]["findings"] if f["rule"] == "culprit-rank")
            assert f["remote"] == b and f["summary"].startswith(f"rank 1 (pid {pid1}, {b}) holds job"), f
            assert f["severity"] == "error" and got[t]["verdict"] == "stalled", (f, got[t]["verdict"])
            joined = [e["detail"] for e in f["evidence"] if e["source"] == "this run"]
            assert joined and joined[0].startswith(
                f"rank 1 (pid {pid1}, {b}) holds job torchelastic:{run}: waits on a FIFO"
            ), joined
            assert got[t]["jobs"][0]["culprit"]["host"] == b, got[t]["jobs"]
        job = got[b]["jobs"][0]
        assert job["world_size"] == 3 and job["culprit"]["rank"] == 1 and job["culprit"]["host"] == b
    finally:
        for h in hosts:
            h.stop()


def test_the_flight_recorder_dumps_agree_and_no_secret_reaches_any_format(reap, tmp_path: Path) -> None:
    """The ranks wrote the dumps real PyTorch ranks wrote in this shape (rank 1 never entered the 4th
    all_reduce); two secrets are planted in every rank's environment. The culprit's evidence says what
    the dumps say, read without running pickle code; no format of the report holds a secret."""
    fifo = tmp_path / "loader.fifo"
    os.mkfifo(fifo)
    env = {"LAB_FR_FIXTURE": str(RECORDED_DUMPS), "TORCH_FR_DUMP_TEMP_FILE": f"{tmp_path}/fr_rank_",
           "TORCH_FR_BUFFER_SIZE": "2000", **SECRETS}  # fmt: skip
    pids = start_job(reap, tmp_path, "fifo", str(fifo), env=env)
    waiting(pids)
    wait_for(lambda: proc_wchan(pids[1]) == "wait_for_partner", what="rank 1 blocked on the FIFO")
    _rc, host = vastprobe_json("--match", pids.match, "--sample", "1")
    f = culprit_finding(host)
    fr = [e["detail"] for e in f["evidence"] if e["source"] == "flight recorder"]
    assert fr == ["process group 0: every rank entered collective #3; ranks 0, 2 entered #4 (gloo:all_reduce, "
                  "sizes [[65536]]), ranks 1 did not"], f["evidence"]  # fmt: skip
    assert "the flight recorder is on" in f["hint"]
    outputs = [json.dumps(host)]
    for fmt in ("table", "ndjson", "json"):
        r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--match", pids.match,
                            "--sample", "0", "--format", fmt, "-v"], capture_output=True, text=True, timeout=120)  # fmt: skip
        outputs.append(r.stdout + r.stderr)
    cap = tmp_path / "capture.json"
    subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--sample", "0", "-o", str(cap)],
                   capture_output=True, timeout=120, check=True)  # fmt: skip
    import base64

    raw = json.loads(cap.read_text())
    outputs += [cap.read_text(), base64.b64decode(raw["raw_b64"]).decode("utf-8", "replace")]
    # the values are this test's own; a variable's name may be in another tenant's log line on a shared
    # host (a helper's `docker run --env=HF_TOKEN=…` failed CI), so names are looked for in what the
    # report says of this job: its findings and its processes
    mine = set(pids.values())
    job = json.dumps([host["findings"], [p for p in host["snapshot"]["processes"] if p["pid"] in mine]])
    for text in outputs:
        for value in SECRETS.values():
            assert value not in text
    for name in SECRETS:
        assert name not in job


def test_dumps_of_an_earlier_run_or_another_job_name_no_culprit(reap, tmp_path: Path) -> None:
    """A healthy job (every rank in its collective) whose dump prefix holds the recorded dumps of a
    hang: written before its ranks started (an earlier run's, left behind), they name nobody; the same
    files written now are this run's and name rank 1. Another job's dumps (a prefix none of this
    job's ranks names) never count."""
    prefix = tmp_path / "fr_rank_"
    other = tmp_path / "other_job_rank_"
    for r in range(3):
        data = (RECORDED_DUMPS / f"nccl_trace_rank_{r}").read_bytes()
        Path(f"{prefix}{r}").write_bytes(data)
        Path(f"{other}{r}").write_bytes(data)
    env = {"TORCH_FR_DUMP_TEMP_FILE": str(prefix), "TORCH_FR_BUFFER_SIZE": "2000"}
    pids = start_job(reap, tmp_path, "none", env=env)
    waiting(pids)
    wait_for(lambda: proc_wchan(pids[1]).startswith("futex"), what="rank 1 in its collective")
    day_ago = time.time() - 86400
    for r in range(3):
        os.utime(f"{prefix}{r}", (day_ago, day_ago))
    _rc, host = vastprobe_json("--match", pids.match, "--sample", "0")
    assert not [f for f in host["findings"] if f["rule"] == "culprit-rank"], host["findings"]
    dumps = {d["path"]: d for d in host["snapshot"]["flight_dumps"]}
    assert dumps[f"{prefix}1"]["mtime"] == int(day_ago), dumps  # read, and set aside as an earlier run's
    for r in range(3):
        os.utime(f"{prefix}{r}")
    _rc, host = vastprobe_json("--match", pids.match, "--sample", "0")
    found = [f for f in host["findings"] if f["rule"] == "culprit-rank"]
    assert len(found) == 1, [(f["summary"], f["pids"]) for f in found]  # (failed once with two, under load)
    (f,) = found
    assert f["summary"].startswith("the flight recorder dumps say rank(s) 1 never entered collective #4"), f
    assert all(str(other) not in e["detail"] for e in f["evidence"]), f["evidence"]


def test_on_gpus_the_rank_whose_gpu_idles_while_the_others_spin_holds_them(reap, tmp_path: Path) -> None:
    """NCCL's waiting ranks spin: a CPU at full use and the GPU at 100% in the collective's kernel. The
    rank they wait for runs on its CPU too, but its GPU idles. No GPU here: nvidia-smi is the stand-in
    (tests/standins), one GPU per rank, rank 1's idle."""
    pids = start_job(reap, tmp_path, "none", env={"LAB_SPIN": "1"})
    wait_for(lambda: all(proc_state(p) == "R" for p in pids.values()), what="three ranks spinning")
    standin = Path(__file__).parents[1] / "standins"
    env = {**os.environ, "PATH": f"{standin}:{os.environ['PATH']}", "VASTPROBE_STANDIN_GPU": "ranks",
           "VASTPROBE_STANDIN_RANK_PIDS": ",".join(str(pids[r]) for r in range(3)), "VASTPROBE_STANDIN_IDLE": "1"}  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot", "--match",
                        pids.match, "--sample", "1"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    f = culprit_finding(host)
    assert f["summary"].startswith(f"rank 1 (pid {pids[1]}") and "its GPU idles" in f["summary"], f["summary"]
    assert "2 other ranks (0, 2) wait on it in a collective" in f["summary"]
    job = host["jobs"][0]
    assert [x["state"] for x in job["ranks"]] == ["collective", "elsewhere", "collective"], job
    assert job["progress"] is None, job  # 100% busy at 71 W of 700 W: a collective's spin, not work
    # the same ranks, rank 0's GPU drawing 512 W of 700 W: a GPU that computes is progress of the job's own
    busy = {**env, "VASTPROBE_STANDIN_GPU": "busy", "VASTPROBE_STANDIN_APP_PID": str(pids[0])}
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--match",
                        pids.match, "--sample", "1"], capture_output=True, text=True, env=busy, timeout=120)  # fmt: skip
    job = json.loads(r.stdout)["hosts"][0]["jobs"][0]
    assert job["progress"] == f"the GPU of pid {pids[0]} draws 512 W of its 700 W limit", job


def test_a_dump_cut_short_by_the_probe_blames_no_writer() -> None:
    """A dump the probe's output ended inside is not read, as a refused one is not, but the hint
    says the probe ran out, not that something else wrote the file."""
    from vastprobe.model import FlightDump
    from vastprobe.parsers.flight_recorder import CUT_SHORT
    from vastprobe.rules.culprit_rank import _refused

    cut = FlightDump("/tmp/nccl_trace_rank_1", None, "", (), {}, refused=CUT_SHORT, cut=True)
    odd = FlightDump("/tmp/nccl_trace_rank_2", None, "", (), {}, refused="not base64")
    (a, b) = _refused([cut, odd])
    assert a.severity == b.severity == "info"
    assert "cut short" in a.summary and "--timeout" in (a.hint or "") and "who wrote it" not in (a.hint or "")
    assert "who wrote it" in (b.hint or "")


def _starve(capture: Path, pid: int) -> None:
    """The capture as if the scheduler had not run `pid` between the samples: its second sample's CPU
    times set back to its first's (what a niced rank on a loaded machine reads). The raw output is the
    probe's own otherwise; its sha256 is computed again, the parsed snapshot left to `analyze`."""
    d = json.loads(capture.read_text())
    raw = base64.b64decode(d["raw_b64"]).decode("latin-1")  # other tenants' names may be any bytes
    stats = re.findall(rf"^/proc/{pid}/stat:{pid} \(.*$", raw, re.M)
    assert len(stats) == 2, stats
    first = stats[0].rsplit(")", 1)[1].split()
    second = stats[1].rsplit(")", 1)[1].split()
    assert first[0] == second[0] == "R", (first[0], second[0])  # runnable in both samples
    second[11:13] = first[11:13]  # utime, stime
    raw = raw.replace(stats[1], stats[1].rsplit(")", 1)[0] + ") " + " ".join(second), 1)
    d["raw_b64"] = base64.b64encode(raw.encode("latin-1")).decode()
    d["raw_sha256"] = hashlib.sha256(raw.encode("latin-1")).hexdigest()
    d.pop("snapshot", None)
    capture.write_text(json.dumps(d))


def test_spinning_ranks_one_of_which_got_no_cpu_blame_nobody(reap, tmp_path: Path) -> None:
    """Ranks that spin as NCCL's do, niced; on a loaded machine the scheduler may run one of them not
    at all over the window. Runnable in both samples, it waits for a CPU, not in a collective: it read
    as the collective's waiter, a spinning rank that got its tick as the straggler holding it (a
    warning, DEGRADED), and a two-host sweep then blamed that rank instead of the real culprit."""
    pids = start_job(reap, tmp_path, "none", env={"LAB_SPIN": "1"})
    wait_for(lambda: all(proc_state(p) == "R" for p in pids.values()), what="every rank spinning")
    cap = tmp_path / "cap.json"
    for _ in range(10):  # a main thread caught waiting for the GIL (its other thread polls) reads S: again
        r = subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--match", pids.match,
                            "--sample", "1", "-o", str(cap)], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        raw = base64.b64decode(json.loads(cap.read_text())["raw_b64"]).decode("latin-1")
        states = [re.findall(rf"^/proc/{p}/stat:{p} \(.*?\) (\S)", raw, re.M) for p in pids.values()]
        if all(st == ["R", "R"] for st in states):
            break
    else:
        pytest.fail(f"the spinning ranks were never all read running in both samples: {states}")
    _starve(cap, pids[0])
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", str(cap), "--format", "json"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    assert not [f for f in host["findings"] if f["rule"] == "culprit-rank"], host["findings"]
    assert host["verdict"] == "healthy" and r.returncode == 0, host["headline"]
    [job] = host["jobs"]
    assert {x["rank"]: x["state"] for x in job["ranks"]}[0] == "running", job["ranks"]


GIL_RANK = """
import os, socket, sys, threading, time
rank, port = int(os.environ["RANK"]), int(sys.argv[1])
if rank == 0:
    s = socket.socket(); s.bind(("127.0.0.1", port)); s.listen(); c, _ = s.accept()
else:
    c = socket.create_connection(("127.0.0.1", port))
def spin():
    while True:
        pass
threading.Thread(target=time.sleep, args=(100000,), daemon=True).start()  # a rank has threads: its env is read
if rank == 0:
    spin()                                  # computes in its main thread
threading.Thread(target=spin, daemon=True).start()
threading.Event().wait(100000)              # its main thread in a futex, its other thread computing
"""


def test_a_rank_computing_in_another_thread_is_not_a_waiting_rank(reap, tmp_path: Path) -> None:
    """Two ranks of a CPU job both compute: rank 0 in its main thread, rank 1 in another thread while
    its main thread sleeps in a futex (as a Python rank's main thread waiting for the GIL its polling
    thread holds looks). Rank 1 read as waiting in a collective, rank 0 as the straggler holding it
    (a warning, DEGRADED); both compute, so no rank holds the other."""
    port = free_ports(1)[0]
    run = f"lab-{uuid.uuid4().hex[:12]}"
    env = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", TORCHELASTIC_RUN_ID=run, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))  # fmt: skip
    ranks = []
    for r in (0, 1):
        p = subprocess.Popen([sys.executable, "-c", GIL_RANK, str(port), run],
                             env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), start_new_session=True)  # fmt: skip
        reap.append(p)
        ranks.append(p)
        favour_on_cpu(p.pid)  # busy on a loaded machine too
        if r == 0:
            wait_for(lambda: any(f":{port:04X} " in line for line in Path("/proc/net/tcp").read_text().splitlines()),
                     what="rank 0 listening")  # fmt: skip
    wait_for(lambda: proc_wchan(ranks[1].pid).startswith("futex"), what="rank 1's main thread in its futex")
    rc, host = vastprobe_json("--match", run, "--sample", "1")
    [job] = host["jobs"]
    states = {x["rank"]: x["state"] for x in job["ranks"]}
    assert states == {0: "running", 1: "running"}, job["ranks"]
    assert not [f for f in host["findings"] if f["rule"] == "culprit-rank"], host["findings"]
    assert host["verdict"] == "healthy" and rc == 0
