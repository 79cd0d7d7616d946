"""`vastprobe watch`: rounds over one real process tree, their rates and the verdict's changes.
The job is real: a busy child (`yes`) under a shell that waits for it, writing a log; stopping the
child between rounds turns the verdict from healthy to stalled."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

from tests.helpers import children_of, proc_state, wait_for
from vastprobe.pipeline import DiagnoseOptions, probe_any
from vastprobe.probe.render import ProbeParams
from vastprobe.watch.loop import WatchLog, watch
from vastprobe.watch.motion import Round


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
        assert yes.cpu_percent is not None and yes.cpu_percent > 20, r.processes  # yes spins
        assert yes.write_per_s is not None and yes.write_per_s > 0
        shell = next(m for m in r.processes if m.pid == job.pid)
        assert shell.cpu_percent is not None and shell.cpu_percent < 20 and shell.wchan == "do_wait"
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
