"""podman://NAME against real containers, where this machine can run them: an image made here from
BusyBox (`busybox --install` into a directory, its libraries beside it, `podman import`: no registry
is reached), containers named after this test run's PID and removed at the end. Skipped, with the
reason, where podman is missing or cannot start a container (no runtime, no cgroups it accepts,
no privileges)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from vastprobe.pipeline import DiagnoseOptions, probe_and_report
from vastprobe.probe.script import ProbeParams

OPTIONS = DiagnoseOptions(params=ProbeParams(sample=0), timeout=60)
TAG = f"localhost/vastprobe-test-busybox:{os.getpid()}"
NOSH = f"localhost/vastprobe-test-nosh:{os.getpid()}"
#: `podman run` settings tried in turn: the defaults, then what a container host without systemd
#: and with cgroup v1 (this development VM) needs: runc, cgroupfs, and rlimits no higher than ours.
_LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
FLAVOURS = ([], ["--runtime", "runc", "--cgroup-manager=cgroupfs"], ["--runtime", "runc", "--cgroup-manager=cgroupfs"])
RUN_EXTRA = ([], [], _LIMITS)


def _podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=check)


def _rootfs(root: Path, with_sh: bool) -> None:
    busybox = shutil.which("busybox")
    assert busybox is not None
    (root / "bin").mkdir(parents=True)
    for d in ("proc", "sys", "dev", "tmp", "etc"):
        (root / d).mkdir()
    shutil.copy2(busybox, root / "bin" / "busybox")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if applet != "busybox" and (with_sh or applet not in ("sh", "ash")):
            (root / "bin" / applet).symlink_to("busybox")
    ldd = subprocess.run(["ldd", busybox], capture_output=True, text=True).stdout
    for word in ldd.split():
        if word.startswith("/") and os.path.exists(word):  # a dynamic busybox: its libraries too
            dest = root / word.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(word), dest)


def _image(tmp: Path, tag: str, with_sh: bool) -> None:
    root = tmp / tag.rsplit("/", 1)[-1].replace(":", "-")
    _rootfs(root, with_sh)
    tar = root.with_suffix(".tar")
    with tarfile.open(tar, "w") as t:
        t.add(root, arcname=".")
    _podman("import", str(tar), tag)


@pytest.fixture(scope="module")
def containers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install podman runc)")
    if shutil.which("busybox") is None:
        pytest.skip("busybox is not installed: the test image is made from it")
    tmp = tmp_path_factory.mktemp("podman")
    names = {k: f"vastprobe-test-{os.getpid()}-{k}" for k in ("job", "stopped", "bare")}
    try:
        _image(tmp, TAG, with_sh=True)
        _image(tmp, NOSH, with_sh=False)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"podman cannot import an image here: {getattr(exc, 'stderr', '') or exc}")
    try:
        why = ""
        for flags, extra in zip(FLAVOURS, RUN_EXTRA, strict=True):
            r = _podman(*flags, "run", "-d", "--init", "--network=none", "--name", names["job"], *extra, TAG,
                        "sleep", "600", check=False)  # fmt: skip
            if r.returncode == 0:
                break
            why = r.stderr.strip()
            _podman("rm", "-f", names["job"], check=False)
        else:
            pytest.skip(f"podman cannot start a container here: {why}")
        _podman(*flags, "create", "--name", names["stopped"], *extra, TAG, "sleep", "1")
        _podman(*flags, "run", "-d", "--init", "--network=none", "--name", names["bare"], *extra, NOSH,
                "busybox", "sleep", "600")  # fmt: skip
        yield names
    finally:
        _podman("rm", "-f", "-t", "0", *names.values(), check=False)
        _podman("rmi", "-f", TAG, NOSH, check=False)


def test_a_real_container_is_probed(containers: dict[str, str]) -> None:
    [r] = probe_and_report([f"podman://{containers['job']}"], OPTIONS)
    assert (r.status, r.error) == ("ok", None), r.error
    snap = r.snapshot
    assert snap is not None and snap.probe.transport == "podman" and snap.probe.complete
    cid = _podman("inspect", "--format", "{{.Id}}", containers["job"]).stdout.strip()
    assert cid.startswith(snap.host.hostname)  # podman names the container's host after its ID
    assert snap.probe.shell_ppid == 0  # the exec'd shell's parent is outside the container
    procs = {p.pid: p for p in snap.processes}
    assert procs[1].comm in ("podman-init", "catatonit")  # --init: PID 1 is the container's own
    assert any(p.comm == "sleep" and p.pid not in snap.excluded_pids for p in procs.values())
    shell = snap.probe.shell_pid
    assert shell is not None and shell in snap.excluded_pids
    # what is left out is the exec'd shell's session and BusyBox `timeout`'s watchers (a session
    # each, parsers/own_processes.py), never the container's own processes
    own = [procs[p] for p in snap.excluded_pids if p in procs]
    assert all(p.session == procs[shell].session or p.comm == "timeout" for p in own)


@pytest.mark.parametrize(
    ("which", "status", "words"),
    [
        ("stopped", "unreachable", "the container is not running (podman said: Error: can only create exec "
         "sessions on running containers"),
        ("nosuch", "unreachable", "no such container (podman said: Error: no container with name or ID"),
        ("bare", "probe-error", "the container has no sh"),
    ],
)  # fmt: skip
def test_a_real_refusal_is_one_line(containers: dict[str, str], which: str, status: str, words: str) -> None:
    name = containers.get(which, f"vastprobe-test-{os.getpid()}-nosuch")
    [r] = probe_and_report([f"podman://{name}"], OPTIONS)
    assert r.status == status and r.error is not None and "\n" not in r.error
    assert r.error.startswith(f"podman://{name}: {words}"), r.error


def test_watch_leaves_the_last_rounds_watchers_out(containers: dict[str, str]) -> None:
    """`watch -n 1` in a BusyBox container: each round's probe starts while the last one's `timeout`
    watchers still count down their bounds. They are the probe's own: every round sees the same job
    (before, the rounds after the first listed some of them as the job's)."""
    r = subprocess.run([sys.executable, "-m", "vastprobe", "watch", f"podman://{containers['job']}", "-n", "1",
                        "--rounds", "5", "--format", "ndjson", "--sample", "0"],
                       capture_output=True, text=True, timeout=120, cwd="/")  # fmt: skip
    rounds = [x for x in map(json.loads, r.stdout.splitlines()) if "round" in x]
    assert len(rounds) == 5, (r.returncode, r.stderr[-500:])
    seen = [sorted((p["pid"], p["comm"]) for p in x["processes"]) for x in rounds]
    assert all(s == seen[0] for s in seen) and not any(c == "timeout" for s in seen for _p, c in s), seen
