"""Containers and pods as targets, as a user runs them: diagnose, sweep --from and watch through the
docker CLI's stand-in (tests/standins/docker: no docker daemon here), and the real kubectl where
there is no cluster to reach. A runtime's refusal is one line and its documented exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import TESTS

STANDIN = TESTS / "standins" / "docker"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The stand-in alone first on PATH, with two running containers and a stopped one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").symlink_to(STANDIN)
    e = {k: v for k, v in os.environ.items() if not k.startswith("VASTPROBE_STANDIN")}
    e["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    e["VASTPROBE_STANDIN_DOCKER"] = "prover-0=running prover-1=running old=exited web=running"
    return e


@pytest.fixture
def job(reap) -> str:
    """The stand-in runs `sh -s` on this machine, so the "container" is the whole shared machine, where
    other tests' processes are stuck on purpose: the probes are scoped to a quiet process of ours."""
    p = subprocess.Popen(["sleep", "600"])
    reap.append(p)
    return str(p.pid)


def vastprobe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vastprobe", *args], capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip


def test_diagnose_a_docker_container(env: dict[str, str], job: str) -> None:
    r = vastprobe(env, "diagnose", "docker://prover-0", "docker://old", "--pid", job, "--sample", "0", "--format",
                  "json", "--snapshot")  # fmt: skip
    hosts = {h["target"]: h for h in json.loads(r.stdout)["hosts"]}
    ok = hosts["docker://prover-0"]
    assert ok["status"] == "ok" and ok["snapshot"]["probe"]["transport"] == "docker", ok["error"]
    stopped = hosts["docker://old"]
    assert stopped["status"] == "unreachable" and "the container is not running" in stopped["error"]
    assert r.returncode == 3, r.stderr  # one target could not be probed, none stalled


def test_sweep_from_docker_ps_probes_what_it_lists(env: dict[str, str], job: str) -> None:
    r = vastprobe(env, "sweep", "--from", "docker:name=prover", "--pid", job, "--sample", "0", "--format", "json",
                  "--no-history")  # fmt: skip
    assert r.returncode == 0, r.stderr
    hosts = json.loads(r.stdout)["hosts"]
    assert sorted(h["target"] for h in hosts) == ["docker://prover-0", "docker://prover-1"]
    assert all(h["status"] == "ok" for h in hosts), [h["error"] for h in hosts]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["sweep", "--from", "lxc"], "not a kind that lists targets"),
        (["sweep", "--from", "docker"], "Cannot connect to the Docker daemon"),
        (["diagnose", "docker://a;b"], "not a docker target"),
        (["diagnose", "kubectl://Pod"], "not a kubectl target"),
        (["watch", "docker://"], "empty container name"),
    ],
)
def test_a_bad_container_target_or_listing_is_one_line(env: dict[str, str], args: list[str], said: str) -> None:
    env["VASTPROBE_STANDIN_DOCKER_DAEMON"] = "down"
    r = vastprobe(env, *args)
    assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_watch_a_container(env: dict[str, str], job: str) -> None:
    r = vastprobe(env, "watch", "docker://web", "--pid", job, "--rounds", "2", "-n", "0.5", "--sample", "0.1")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0, r.stderr
    assert [x.get("round") for x in lines[:2]] == [1, 2] and all(x["status"] == "ok" for x in lines[:2])
    assert lines[2]["summary"]["rounds"] == 2


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs the kubectl CLI")
def test_kubectl_with_a_context_that_does_not_exist(env: dict[str, str], tmp_path: Path) -> None:
    """The real kubectl, with an empty kubeconfig: no cluster is contacted."""
    env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
    r = vastprobe(env, "sweep", "--from", "kubectl:app=prover", "--context", "nope")
    assert r.returncode == 2 and "kubectl could not list" in r.stderr and "nope" in r.stderr, r.stderr
    d = vastprobe(env, "diagnose", "kubectl://default/prover-0", "--context", "nope", "--format", "json")
    host = json.loads(d.stdout)["hosts"][0]
    assert d.returncode == 3 and host["status"] == "unreachable" and "no such kubectl context" in host["error"]


def test_a_listing_that_finds_nothing_is_nothing_to_sweep(env: dict[str, str]) -> None:
    """A cron sweep of a host with no container running now: said, and no error."""
    r = vastprobe(env, "sweep", "--from", "DOCKER:name=nothing-like-this", "--no-history")
    assert r.returncode == 0 and "nothing running matches" in r.stderr and "nothing to sweep" in r.stderr, r.stderr


def test_a_scheme_without_its_slashes_is_one_line_with_the_fix(env: dict[str, str]) -> None:
    r = vastprobe(env, "diagnose", "podman:review-x")
    assert r.returncode == 2 and "did you mean podman://review-x?" in r.stderr, r.stderr


def test_context_without_a_kubectl_target_is_said_not_silently_ignored() -> None:
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--context", "prod", "--sample", "0",
                        "--format", "json"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "--context prod applies to kubectl:// targets only" in r.stderr, r.stderr
    assert r.returncode in (0, 1), r.stderr
