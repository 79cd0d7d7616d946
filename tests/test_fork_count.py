"""The probe's fork count must not grow with the number of processes on the target."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vastprobe.probe.render import ProbeParams, render_script

FORK = re.compile(r"^(clone3?|fork|vfork)\(.*= (\d+)$")


#: The watchdog's tick (script.sh, vp_watch): a `sleep 0.5` twice a second the probe runs, whatever
#: the number of processes; a probe slowed by strace over 600 processes runs a tick or two longer.
TICK = '["sleep", "0.5"]'


def count_forks(tmp: Path, extra: int) -> int:
    """The probe's forks in a PID namespace of its own holding `extra` quiet processes: what other
    processes of this machine do (a rank naming a dump prefix, a stopped job) changes no count."""
    trace = tmp / "trace"
    trace.mkdir(exist_ok=True)
    for old in trace.iterdir():
        old.unlink()
    params = ProbeParams(sample=0.1, logs=("/tmp/x.log",))
    strace = f"strace -ff -qq -o {trace / 't'} -e trace=clone,clone3,fork,vfork,execve dash -s"
    subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
         f"i=0; while [ $i -lt {extra} ]; do sleep 600 >/dev/null 2>&1 & i=$((i + 1)); done; {strace}"],
        input=render_script(params).encode(),
        capture_output=True,
        timeout=120,
        start_new_session=True,
    )  # fmt: skip
    # one file per process (-ff), so no call is split across lines by another's output;
    # a fork that succeeded returns the child's pid (> 0) in the parent
    texts = [f.read_text() for f in trace.iterdir()]
    lines = [line for t in texts for line in t.splitlines()]
    forks = sum(1 for line in lines if (m := FORK.search(line)) and int(m.group(2)) > 0)
    ticks = sum(1 for t in texts if f'"sleep", {TICK[1:]}' in t or f'execve("/usr/bin/sleep", {TICK}' in t)
    return forks - ticks


@pytest.mark.slow
def test_forks_do_not_grow_with_processes(tmp_path: Path) -> None:
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare (util-linux) for a PID namespace of its own")
    a = count_forks(tmp_path, 10)
    b = count_forks(tmp_path, 600)
    assert a > 20  # the trace saw the probe's commands at all
    # (one either way: the probe's end takes the watchdog's tick along, and a tick forked just before
    # it is killed before its exec, so it is a fork not counted as a tick)
    assert abs(a - b) <= 1, f"{a} forks with 10 extra processes, {b} with 600"
