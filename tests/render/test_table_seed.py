"""The seed case live: a real PID-namespace container in a 64 MiB memory cgroup (tests/seed_lab.py),
with an sshd-like daemon in a session of its own beside the job, while other processes on the
host are OOM-killed. Diagnosed from inside the container and from the host (--pid), it reads as
the story: the OOM kill first, the chain that waits on the idle daemon under it, nothing about
sshd, the tree entrypoint.sh -> benchmark.sh -> cuzk-daemon. PIDs and times differ from run to
run; these tests check the structure (tests/render/test_table.py checks the exact text)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.seed_lab import SeedContainer, inside, seed_container  # noqa: F401  (a fixture, used by name)

VASTPROBE = [sys.executable, "-m", "vastprobe", "diagnose", "local", "--sample", "1"]


def diagnose(seed: SeedContainer, where: str, *args: str) -> subprocess.CompletedProcess[str]:
    extra = ("--log", str(seed.log), "--artifacts", f"{seed.root}/*")
    cmd = [*inside(seed), *VASTPROBE] if where == "inside" else [*VASTPROBE, "--pid", str(seed.entry)]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([*cmd, *extra, *args], capture_output=True, text=True, timeout=120, env=env)


def seen_as(seed: SeedContainer, host_pid: int, where: str) -> int:
    """The PID a process has where the probe runs: its PID in the container's namespace, inside."""
    if where == "host":
        return host_pid
    line = next(x for x in Path(f"/proc/{host_pid}/status").read_text().splitlines() if x.startswith("NSpid:"))
    return int(line.split()[-1])


def check_story(seed: SeedContainer, where: str) -> None:
    r = diagnose(seed, where, "--format", "json", "--snapshot")
    assert r.returncode == 1, r.stderr
    host = json.loads(r.stdout)["hosts"][0]
    procs = {p["pid"]: p for p in host["snapshot"]["processes"]}
    entry, bench, daemon, sshd_pid = (
        seen_as(seed, pid, where) for pid in (seed.entry, seed.bench, seed.daemon, seed.sshd)
    )
    sshd = procs[sshd_pid]
    assert sshd["comm"] == "sshd" and procs[entry]["comm"] == "entrypoint.sh"
    assert sshd["pid"] in host["scope"] and sshd["session"] == sshd["pid"]  # in scope, a daemon
    assert "cuzk-bench was OOM-killed" in host["headline"]
    assert f"entrypoint.sh ({entry}) and benchmark.sh ({bench}) wait on cuzk-daemon ({daemon})" in host["headline"]
    first = host["incidents"][0]
    assert first["root"]["rule"] == "oom-killed-child" and first["root"]["severity"] == "error"
    assert first["consequences"][0]["rule"] == "do-wait-orphan"
    assert first["consequences"][0]["pids"] == [entry, bench, daemon]
    findings = json.dumps(host["findings"])
    assert "sshd" not in findings and f"({sshd['pid']})" not in findings and f" {sshd['pid']} " not in findings
    # (the size of --brief is checked on the recorded seed case, tests/render/test_table.py: here the
    # neighbours' kills may add findings of their own)
    brief = json.loads(diagnose(seed, where, "--format", "json", "--brief").stdout)["hosts"][0]
    assert "snapshot" not in brief and brief["incidents"][0]["root"]["rule"] == "oom-killed-child"

    text = diagnose(seed, where, "--format", "table").stdout
    lines = text.splitlines()
    assert lines[0].startswith("local  STALLED  cuzk-bench was OOM-killed at ")
    first_finding = next(line for line in lines if re.match(r"  (error|warning|critical) ", line))
    assert "VP102 oom-killed-child" in first_finding  # the root cause comes first
    i = next(n for n, line in enumerate(lines) if f" {entry} entrypoint.sh  S do_wait" in line)
    assert f"└─ waits for child → {bench} benchmark.sh  S do_wait" in lines[i + 1]
    assert f"└─ waits for child → {daemon} cuzk-daemon  ◀ blocker (idle)  S inet_csk_accept" in lines[i + 2]
    assert lines[i + 2].index("└─") == lines[i + 1].index("└─") + 3
    story = "\n".join(lines[: lines.index("  timeline (the target's clock, UTC):")])
    assert "sshd" not in story
    assert "also " in text and "info" in text  # the neighbours' OOM kills: folded notes


@pytest.mark.slow
def test_seed_case_from_inside_the_container(seed_container: SeedContainer) -> None:  # noqa: F811
    check_story(seed_container, "inside")


@pytest.mark.slow
def test_seed_case_from_the_host(seed_container: SeedContainer) -> None:  # noqa: F811
    check_story(seed_container, "host")
