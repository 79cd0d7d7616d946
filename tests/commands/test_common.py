"""Ctrl-C: exit 130 after printing what finished and naming what did not; nothing half-written.
Once in a real terminal (tmux sends the keystroke), and by SIGINT for diagnose and collect."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import interruptible, stat_fields, wait_for
from tests.paths import REPO
from tests.sshd import Sshd, dead_port, start_sshd


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        fields = stat_fields(pid)
        if fields is None:
            break
        pid = int(fields[1])
        out.append(pid)
    return out


def remote_probe_running(sshd: Sshd) -> bool:
    """The hanging ForceCommand (`sleep 600`) has started under this sshd: the probe is in flight."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if cmd == b"sleep\x00600\x00" and sshd.proc.pid in _ancestors(int(d)):
                return True
    return False


@pytest.fixture
def hang(tmp_path: Path):
    s = start_sshd(tmp_path / "hang", force_command="sleep 600")
    yield s
    s.stop()


def test_ctrl_c_in_a_terminal_sweep_exits_130(hang: Sshd, tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux (apt-get install tmux)")
    sock = tmp_path / "tmux.sock"
    dead = f"root@127.0.0.1:{dead_port()}"
    status = tmp_path / "status"
    cmd = (f"{sys.executable} -m vastprobe sweep -w {dead},{hang.target} -i {hang.user_key} "
           f"--known-hosts {hang.known_hosts} --timeout 120 --format table; echo EXIT=$? > {status}; sleep 60")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(["tmux", "-S", str(sock), "new-session", "-d", "-x", "200", "-y", "50", "-s", "vp", cmd],
                   check=True, env=env)  # fmt: skip
    try:

        def pane() -> str:
            return subprocess.run(["tmux", "-S", str(sock), "capture-pane", "-p", "-t", "vp"],
                                  capture_output=True, text=True).stdout  # fmt: skip

        wait_for(lambda: "1/2 hosts" in pane() and remote_probe_running(hang), timeout=30, what="progress bar")
        subprocess.run(["tmux", "-S", str(sock), "send-keys", "-t", "vp", "C-c"], check=True)
        wait_for(status.exists, timeout=30, what="the sweep to exit")
        text = pane()
        assert status.read_text().strip() == "EXIT=130", text
        assert f"interrupted: 1 of 2 hosts finished; 1 did not: {hang.target}" in text
        assert "1 hosts: 1 unreachable" in text  # the summary of what finished
        assert "Traceback" not in text
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)


def test_ctrl_c_in_diagnose_prints_what_finished(hang: Sshd) -> None:
    dead = f"root@127.0.0.1:{dead_port()}"
    p = subprocess.Popen([sys.executable, "-m", "vastprobe", "diagnose", hang.target, dead, "--json",
                          "-i", str(hang.user_key), "--known-hosts", str(hang.known_hosts), "--timeout", "120"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=interruptible)  # fmt: skip
    try:
        wait_for(lambda: remote_probe_running(hang), timeout=30, what="the probe on the hanging host")
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        assert time.monotonic() - t0 < 10
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert [h["target"] for h in json.loads(out)["hosts"]] == [dead]
    assert f"interrupted: 1 of 2 targets finished; 1 did not: {hang.target}" in err
    assert "Traceback" not in err


def test_ctrl_c_in_collect_writes_nothing(hang: Sshd, tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    p = subprocess.Popen([sys.executable, "-m", "vastprobe", "collect", hang.target, "-o", str(out),
                          "-i", str(hang.user_key), "--known-hosts", str(hang.known_hosts), "--timeout", "120"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=interruptible)  # fmt: skip
    try:
        wait_for(lambda: remote_probe_running(hang), timeout=30, what="the probe on the hanging host")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 130 and "interrupted: nothing was collected or written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hang"]  # the sshd's own directory only
