"""--py-spy: py-spy's real dumps (fixtures/py-spy) read into threads and frames; what the probe
frames around them (a cut, py-spy absent, hostile frame names) kept in its place."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO
from vastprobe.parsers.pystack import parse_pystack_section

FIXTURES = REPO / "fixtures" / "py-spy"


def framed(pid: int, name: str) -> str:
    return f"@pyspy {pid}\n" + "".join(f"|{line}\n" for line in (FIXTURES / name).read_text().splitlines())


def test_real_dumps_read_into_threads_and_frames() -> None:
    text = framed(7070, "joining-parent.txt") + framed(7100, "queue-feeder-child.txt") + framed(7200, "not-python.txt")
    (parent, child, other), note = parse_pystack_section(text)
    assert note is None
    assert parent.pid == 7070 and parent.error is None and len(parent.threads) == 1
    (main,) = parent.threads
    assert (main.tid, main.name, main.status) == ("7070", "MainThread", "idle")
    assert main.frames[0] == "Popen.poll (multiprocessing/popen_fork.py:27)"
    assert main.frames[-1] == "<module> (put_before_join.py:8)"
    names = [t.name for t in child.threads]
    assert names == ["MainThread", "QueueFeederThread"], names
    feeder = child.threads[1]
    assert feeder.frames[0].startswith("Connection._send (multiprocessing/connection.py:")
    assert other.threads == () and other.error == "Failed to find python version from target process"
    line = child.thread_lines()[0]
    assert line.startswith('thread 7101 "MainThread" (idle): Thread._wait_for_tstate_lock') or "MainThread" in line
    assert line.endswith("<- <module> (put_before_join.py:7)"), line


def test_what_the_probe_frames_stays_in_its_place() -> None:
    hostile = '@pyspy 1\n|Thread 1 (idle): "MainThread"\n|    @pyspy 666 (evil.py:1)\n|@@absent\n@cut\n@@budget\n'
    (one,), note = parse_pystack_section(hostile)
    assert one.pid == 1 and one.cut and one.threads[0].frames == ("@pyspy 666 (evil.py:1)",)
    assert note is not None and "12 s" in note
    assert parse_pystack_section("@@absent\n") == ((), parse_pystack_section("@@absent\n")[1])
    assert "not on the target's PATH" in (parse_pystack_section("@@absent\n")[1] or "")
    (empty,), _ = parse_pystack_section("@pyspy 5\n")
    assert empty.error is not None and empty.threads == ()


def _py_spy_path() -> str | None:
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    return path if shutil.which("py-spy", path=path) else None


@pytest.mark.skipif(_py_spy_path() is None, reason="py-spy is not installed (the test extra brings it)")
def test_a_real_deadlock_shows_where_each_python_thread_is(reap, tmp_path: Path) -> None:
    """The put-before-join deadlock, diagnosed with --py-spy --pid: its finding's evidence holds both
    processes' Python stacks, the feeder thread by name; nothing outside the --pid is dumped. Without
    --py-spy the probe runs no py-spy at all."""
    from tests.helpers import wait_for
    from tests.rules.test_threads import PUT_BEFORE_JOIN, start, thread_wchans

    job_pid, child = start(reap, tmp_path, PUT_BEFORE_JOIN)
    wait_for(lambda: any(w.endswith("pipe_write") for w in thread_wchans(child)), what="the feeder blocked")
    env = dict(os.environ, PATH=_py_spy_path() or "")

    def diagnose(*extra: str) -> dict:
        r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot",
                            "--pid", str(job_pid), "--sample", "0", *extra], capture_output=True, text=True, env=env,
                           timeout=120)  # fmt: skip
        assert r.stdout, r.stderr
        return json.loads(r.stdout)["hosts"][0]

    host = diagnose("--py-spy")
    f = next(f for f in host["findings"] if f["rule"] == "deadlock")
    spy = [e["detail"] for e in f["evidence"] if e["source"] == "py-spy"]
    assert any(d.startswith(f"{job_pid} (") and "BaseProcess.join" in d for d in spy), spy
    assert any('"QueueFeederThread"' in d and "Connection._send" in d for d in spy), spy
    cap = tmp_path / "c.json"
    for extra in (["--py-spy"], []):
        subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--pid", str(job_pid), "--sample", "0",
                        "-o", str(cap), *extra], env=env, check=True, capture_output=True, timeout=120)  # fmt: skip
        stacks = {s["pid"] for s in json.loads(cap.read_text())["snapshot"]["python_stacks"]}
        assert stacks == ({job_pid, child} if extra else set()), stacks
