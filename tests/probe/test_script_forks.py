"""The probe's fork count must not grow with the number of processes on the target, nor with the time
it runs: its watchdog waits on the client's stdin and on one deadline `sleep` (script.sh), not on a
tick a second."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vastprobe.probe.script import ProbeParams, render_script

FORK = re.compile(r"^(clone3?|fork|vfork)\(.*= (\d+)$")


def count_forks(tmp: Path, extra: int, sample: float) -> int:
    """The probe's forks in a PID namespace of its own holding `extra` quiet processes (what other
    processes of this machine do, a rank naming a dump prefix or a stopped job, changes no count), its
    stdin held open until its output ended, as vastprobe's transports hold it."""
    trace = tmp / "trace"
    trace.mkdir(exist_ok=True)
    for old in trace.iterdir():
        old.unlink()
    # a --log that does not exist, in a root-only directory: a /tmp/x.log another user left there was
    # read, and its tail's forks failed the count (hermetic on a shared machine)
    params = ProbeParams(sample=sample, logs=(str(tmp / "absent.log"),))
    strace = f"strace -ff -qq -o {trace / 't'} -e trace=clone,clone3,fork,vfork,execve dash -s"
    p = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
         f"i=0; while [ $i -lt {extra} ]; do sleep 600 >/dev/null 2>&1 & i=$((i + 1)); done; {strace}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(render_script(params).encode())
    p.stdin.flush()
    out = p.stdout.read()  # to the probe's end: its stdout closes with it
    p.stdin.close()
    p.wait(timeout=120)
    assert b"@@ end" in out, out[-300:]
    # one file per process (-ff), so no call is split across lines by another's output;
    # a fork that succeeded returns the child's pid (> 0) in the parent
    lines = [line for f in trace.iterdir() for line in f.read_text().splitlines()]
    return sum(1 for line in lines if (m := FORK.search(line)) and int(m.group(2)) > 0)


@pytest.mark.slow
def test_forks_grow_neither_with_processes_nor_with_time(tmp_path: Path) -> None:
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare (util-linux) for a PID namespace of its own")
    short = count_forks(tmp_path, 10, 0.1)
    many = count_forks(tmp_path, 600, 0.1)
    slow = count_forks(tmp_path, 10, 3)  # three seconds between the samples: six ticks, before
    assert short > 20  # the trace saw the probe's commands at all
    # 56 (62 before issue 36's cuts: docs/benchmarks.md, "Toward the floor"), and ss when a process
    # read asleep has a wait channel of "0" by the time it is read (a race on a loaded machine: the
    # full suite met it once). A fork added is a cost on every host, to be argued for there, and this
    # number raised with it.
    assert short <= 57, f"{short} forks with 10 extra processes"
    assert abs(short - many) <= 1, f"{short} forks with 10 extra processes, {many} with 600"
    assert abs(short - slow) <= 1, f"{short} forks with --sample 0.1, {slow} with --sample 3"
