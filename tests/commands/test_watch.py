"""`vastprobe watch`: rounds over one real process tree, their rates and the verdict's changes.
The job is real: a busy child (`yes`) under a shell that waits for it, writing a log; stopping the
child between rounds turns the verdict from healthy to stalled."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import children_of, proc_state, wait_for
from tests.paths import TESTS
from tests.sshd import start_sshd
from vastprobe.pipeline import DiagnoseOptions, probe_any
from vastprobe.probe.script import ProbeParams
from vastprobe.rounds.loop import WatchLog, watch
from vastprobe.rounds.motion import Round


def start_job(reap: list, log: Path) -> tuple[subprocess.Popen, int]:
    """A shell waiting for `yes`, and a writer appending a line to `log` every 0.1 s."""
    job = subprocess.Popen(["bash", "-c", f'yes > /dev/null & while :; do echo tick >> {log}; sleep 0.1; done & wait'],
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: any(Path(f"/proc/{c}/comm").read_text().strip() == "yes" for c in children_of(job.pid)))
    busy = next(c for c in children_of(job.pid) if Path(f"/proc/{c}/comm").read_text().strip() == "yes")
    return job, busy


def options(job: int, log: Path) -> DiagnoseOptions:
    return DiagnoseOptions(params=ProbeParams(sample=0.2, logs=(str(log),)), timeout=60.0, pids=(job,))


def run_rounds(opts: DiagnoseOptions, rounds: int, between=None) -> tuple[list[Round], WatchLog]:
    seen: list[Round] = []

    def on_round(r: Round) -> None:
        seen.append(r)
        if between is not None:
            between(r)

    log = asyncio.run(watch(lambda o: probe_any("local", o), opts, 0.3, rounds, on_round, WatchLog()))
    return seen, log


def test_rounds_carry_rates_of_the_job(reap, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    job, busy = start_job(reap, log)
    seen, _ = run_rounds(options(job.pid, log), 2)
    assert [r.number for r in seen] == [1, 2]
    for r in seen:
        assert r.span_s is not None and r.span_s > 0
        yes = next(m for m in r.processes if m.pid == busy)
        assert yes.cpu_percent is not None and yes.cpu_percent > 1, r.processes  # yes spins (on a loaded machine: some)
        assert yes.write_per_s is not None and yes.write_per_s > 0
        shell = next(m for m in r.processes if m.pid == job.pid)
        assert shell.cpu_percent is not None and shell.cpu_percent < yes.cpu_percent and shell.wchan == "do_wait"
        grown = next(lm for lm in r.logs if lm.path == str(log))
        assert grown.growth_per_s is not None and grown.growth_per_s > 0 and grown.idle_s is not None
    assert seen[1].span_s is not None and seen[1].span_s >= 0.25  # from round 1's last sample to round 2's


def test_a_verdict_change_is_recorded_with_its_round(reap, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    job, busy = start_job(reap, log)

    def stop_after_first(r: Round) -> None:
        if r.number == 1:
            os.kill(busy, signal.SIGSTOP)
            wait_for(lambda: proc_state(busy) == "T", what="yes stopped")

    try:
        seen, watched = run_rounds(options(job.pid, log), 3, stop_after_first)
    finally:
        os.kill(busy, signal.SIGCONT)
    assert [r.report.verdict for r in seen] == ["healthy", "stalled", "stalled"], [r.report.headline for r in seen]
    assert [(c.round, c.before, c.after) for c in watched.changes] == [(1, None, "healthy"), (2, "healthy", "stalled")]
    assert watched.rounds == 3 and watched.last is seen[-1]
    stopped = next(m for m in seen[2].processes if m.pid == busy)
    assert stopped.state == "T" and stopped.cpu_percent == 0.0


def watch_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vastprobe", "watch", *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_watch_writes_a_record_a_round_and_a_summary(reap, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    job, busy = start_job(reap, log)
    r = watch_cli("local", "--pid", str(job.pid), "--rounds", "3", "-n", "0.5", "--sample", "0.2")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0, r.stderr
    assert [rec.get("round") for rec in lines[:3]] == [1, 2, 3] and all(
        rec["schema"] == "vastprobe.rounds/1" for rec in lines
    )
    assert all(rec["verdict"] == "healthy" for rec in lines[:3])
    assert any(p["pid"] == busy and p["cpu_percent"] > 1 for p in lines[2]["processes"]), lines[2]["processes"]
    end = lines[3]["summary"]
    assert end["rounds"] == 3 and end["ended"] == "--rounds 3" and [c["after"] for c in end["changes"]] == ["healthy"]


def test_ctrl_c_ends_the_watch_with_its_summary_and_the_last_verdict(reap, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    job, busy = start_job(reap, log)
    os.kill(busy, signal.SIGSTOP)  # stalled from the first round
    try:
        w = subprocess.Popen([sys.executable, "-m", "vastprobe", "watch", "local", "--pid", str(job.pid), "-n", "0.5",
                              "--sample", "0.2", "--format", "ndjson"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
        reap.append(w)
        assert w.stdout is not None
        first = json.loads(w.stdout.readline())  # a round is out: the watch is running
        w.send_signal(signal.SIGINT)
        rest, err = w.communicate(timeout=60)
    finally:
        os.kill(busy, signal.SIGCONT)
    assert first["round"] == 1 and first["verdict"] == "stalled"
    end = json.loads(rest.splitlines()[-1])["summary"]
    assert end["ended"] == "Ctrl-C" and end["verdict"] == "stalled" and end["rounds"] >= 1
    assert w.returncode == 1 and "Traceback" not in err, err


def test_watch_refuses_json_with_one_line() -> None:
    """A watch is a stream: table or ndjson, never one JSON document."""
    r = watch_cli("local", "--format", "json")
    assert r.returncode == 2 and "'json' is not one of 'table', 'ndjson'" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_three_rounds_over_one_ssh_connection(reap, tmp_path: Path) -> None:
    """Against a real sshd: three rounds, one login (sshd logs each accepted key once)."""
    sshd = start_sshd(tmp_path / "sshd", log_level="INFO")
    try:
        log = tmp_path / "run.log"
        job, busy = start_job(reap, log)
        r = watch_cli(sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(sshd.known_hosts), "--pid",
                      str(job.pid), "--rounds", "3", "-n", "0.5", "--sample", "0.2")  # fmt: skip
        lines = [json.loads(line) for line in r.stdout.splitlines()]
        assert r.returncode == 0, (r.stderr, lines)
        assert [rec["round"] for rec in lines[:3]] == [1, 2, 3] and all(rec["status"] == "ok" for rec in lines[:3])
        assert any(p["pid"] == busy and p["cpu_percent"] > 1 for p in lines[2]["processes"])
        assert sshd.log is not None
        accepted = [line for line in sshd.log.read_text().splitlines() if "Accepted publickey" in line]
        assert len(accepted) == 1, accepted
    finally:
        sshd.stop()


def test_the_table_into_a_pipe_is_each_round_with_remote_names_escaped(reap, tmp_path: Path) -> None:
    """`--format table` into a file: every round's screen (no live redraw), and a process name that
    holds a terminal escape reaches the output as text."""
    evil = tmp_path / "evil\x1b[31mred"
    shutil.copy("/bin/sleep", evil)
    p = subprocess.Popen([str(evil), "300"])
    reap.append(p)
    wait_for(lambda: Path(f"/proc/{p.pid}/comm").read_text().startswith("evil"), what="the renamed sleep")
    r = watch_cli("local", "--pid", str(p.pid), "--rounds", "2", "-n", "0.5", "--sample", "0.1", "--format", "table")
    assert r.returncode == 0, r.stderr
    assert "round 1" in r.stdout and "round 2" in r.stdout and "watched local: 2 rounds" in r.stdout
    assert "\x1b" not in r.stdout and "evil\\x1b[31mred" in r.stdout, r.stdout


def test_a_job_that_exits_between_rounds_is_said_gone(reap, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    job, busy = start_job(reap, log)

    def end_after_first(r: Round) -> None:
        if r.number == 1:
            os.kill(busy, signal.SIGKILL)
            wait_for(lambda: proc_state(busy) in ("Z", None), what="yes gone")

    seen, _ = run_rounds(options(job.pid, log), 2, end_after_first)
    assert (busy, "yes") in seen[1].gone and all(m.pid != busy for m in seen[1].processes), seen[1].gone
    assert seen[0].gone == ()


def test_gpu_memory_is_the_compute_apps_of_the_job(reap) -> None:
    """The nvidia-smi stand-in (tests/standins: no GPU here) names the job as a compute app: its
    memory is the job's in every round, and the GPU's use is in the record."""
    standins = TESTS / "standins"
    job = subprocess.Popen(["sleep", "300"])
    reap.append(job)
    env = {**os.environ, "PATH": f"{standins}:{os.environ['PATH']}", "VASTPROBE_STANDIN_GPU": "hung",
           "VASTPROBE_STANDIN_APP_PID": str(job.pid)}  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "vastprobe", "watch", "local", "--pid", str(job.pid), "--rounds", "2",
                        "-n", "0.5", "--sample", "0.1"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    rounds = [json.loads(line) for line in r.stdout.splitlines()][:2]
    assert [x["round"] for x in rounds] == [1, 2], r.stderr
    for x in rounds:
        [p] = [p for p in x["processes"] if p["pid"] == job.pid]
        assert p["gpu_memory_mib"] is not None and p["gpu_memory_mib"] > 0, x["processes"]
        assert x["gpus"] and x["gpus"][0]["memory_used_mib"] > 0, x["gpus"]
