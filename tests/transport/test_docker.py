"""docker://NAME through the transport seam, with the docker CLI's stand-in (tests/standins/docker:
this machine has no docker daemon). The stand-in runs `sh -s` here for a running container and
answers with the real CLI's messages and exit statuses for the rest."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from tests.paths import TESTS
from vastprobe.pipeline import DiagnoseOptions, collect_target, probe_and_report
from vastprobe.probe.script import ProbeParams
from vastprobe.targets import TargetError
from vastprobe.transport.registry import check_target, kind_for, kind_named, needs_ssh, transport_for

STANDIN = TESTS / "standins" / "docker"
OPTIONS = DiagnoseOptions(params=ProbeParams(sample=0), timeout=30)


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in alone, first on PATH (not the other stand-ins: the probe reads PATH too)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").symlink_to(STANDIN)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("VASTPROBE_STANDIN_DOCKER", "job=running stopped=exited held=paused bare=nosh stuck=hang")
    monkeypatch.delenv("VASTPROBE_STANDIN_DOCKER_DAEMON", raising=False)
    return bin_dir


def test_the_registry_names_docker() -> None:
    kind = kind_for("docker://job")
    assert kind.name == "docker" and kind_named("docker") is kind
    assert not kind.needs_ssh and not kind.this_machine and kind.own_processes == "none"
    assert not needs_ssh("docker://job") and needs_ssh("gpu01") and not needs_ssh("local")
    assert transport_for("docker://job").name == "docker"
    assert kind_for("DOCKER://job").name == "docker"  # a scheme is case-insensitive, as in a URL


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("docker://", "empty container name"),
        ("docker://-rm", "starts with a letter or digit"),
        ("docker://a/b", "letters, digits and _.-"),
        ("docker://a b", "control, format or space"),
        ("docker://a;id", "letters, digits and _.-"),
    ],
)
def test_a_malformed_target_is_one_line(target: str, why: str, docker: Path) -> None:
    with pytest.raises(TargetError, match=why):
        check_target(target)
    cap = collect_target(target, OPTIONS)  # the pipeline says it as the host's error, runs nothing
    assert cap.status == "probe-error" and cap.transport == "docker"
    assert cap.error is not None and why in cap.error and "\n" not in cap.error


def test_a_running_container_is_probed_and_the_probe_leaves_itself_out(docker: Path) -> None:
    [r] = probe_and_report(["docker://job"], OPTIONS)
    assert (r.target, r.status, r.error) == ("docker://job", "ok", None)
    snap = r.snapshot
    assert snap is not None and snap.probe.transport == "docker" and snap.probe.complete
    shell = snap.probe.shell_pid
    assert shell is not None and shell in snap.excluded_pids
    session = {p.pid for p in snap.processes if p.pid == shell or p.ppid == shell}
    assert session <= set(snap.excluded_pids) and not set(r.scope) & set(snap.excluded_pids)
    # nothing above the exec'd shell is the transport's: the stand-in's caller (this test) stays
    # in the snapshot, where `local` would have looked for vastprobe among the shell's ancestors
    assert snap.probe.shell_ppid == os.getpid() and os.getpid() not in snap.excluded_pids


@pytest.mark.parametrize(
    ("name", "status", "words", "said"),
    [
        ("nosuch", "unreachable", "no such container", "No such container: nosuch"),
        ("stopped", "unreachable", "the container is not running", "is not running"),
        ("held", "unreachable", "the container is paused or restarting", "unpause the container"),
        (
            "bare",
            "probe-error",
            "the container has no sh (its image has no shell): the probe cannot run there",
            'exec: "sh": executable file not found',
        ),
    ],
)
def test_the_runtimes_refusal_is_the_hosts_one_line(
    name: str, status: str, words: str, said: str, docker: Path
) -> None:
    [r] = probe_and_report([f"docker://{name}"], OPTIONS)
    assert r.status == status and r.verdict == "unknown" and r.snapshot is None
    assert r.error is not None and "\n" not in r.error
    assert r.error.startswith(f"docker://{name}: {words} (docker said: ") and said in r.error
    assert "Traceback" not in r.error


@pytest.mark.parametrize(
    ("daemon", "status", "words"),
    [("down", "unreachable", "the docker daemon cannot be reached"), ("denied", "auth-failed", "permission denied")],
)
def test_the_daemon_unreachable_or_refusing(
    daemon: str, status: str, words: str, docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VASTPROBE_STANDIN_DOCKER_DAEMON", daemon)
    cap = collect_target("docker://job", OPTIONS)
    assert cap.status == status and cap.error is not None and words in cap.error and "\n" not in cap.error
    assert cap.output == b""


def test_no_docker_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing at all on it
    cap = collect_target("docker://job", OPTIONS)
    assert cap.status == "unreachable"
    assert cap.error == "docker://job: the docker command is not installed here (not on PATH)"


def test_a_hung_exec_ends_at_the_deadline_and_is_killed(
    docker: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "pid"
    monkeypatch.setenv("VASTPROBE_STANDIN_DOCKER_PIDFILE", str(pidfile))
    opts = DiagnoseOptions(params=ProbeParams(sample=0), timeout=2)
    t0 = time.monotonic()
    cap = collect_target("docker://stuck", opts)
    # the script (over the pipe's 64 KiB) was written whole before the deadline's loop: a command that
    # never reads its stdin held the run until it ended itself, 300 s (a clean-clone CI at be35deb)
    assert time.monotonic() - t0 < 30
    assert cap.status == "timeout" and cap.error == "docker://stuck: the probe did not finish within 2s"
    pid = int(pidfile.read_text())
    with contextlib.suppress(FileNotFoundError):  # killed with its session and reaped: gone
        assert Path(f"/proc/{pid}/cmdline").read_bytes() != b"sleep\x00300\x00"
