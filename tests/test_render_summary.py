"""The sweep summary: host sets folded into ranges (ClusterShell's NodeSet), the vast.ai instance
and the headline of each stalled host, failures folded, hanging indents; the progress line.

Once through the real renderer over 40 hosts made from recorded captures (exact text, a golden),
once as a real sweep of 40 vast.ai instances on loopback sshd targets, and the progress line in
a real terminal."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.golden.record import SWEEP_GOLDEN as GOLDEN
from tests.golden.record import fleet_of_forty, summary
from tests.helpers import stopped_child, wait_for
from tests.sshd import dead_port, keygen, start_sshd
from vastprobe.render.summary import fold_hosts


def test_forty_hosts_fold_into_ranges_with_their_instances() -> None:
    text = summary(fleet_of_forty())
    assert text == GOLDEN.read_text(), "differs from tests/golden/sweep-40.100.txt (record.py --render-only)"
    lines = text.splitlines()
    assert lines[0] == "40 hosts: 36 ok, 2 skipped, 2 unreachable"
    assert "STALLED (5): gpu[03,09,17,22,31]" in lines
    assert "HEALTHY (31): gpu[01-02,04-08,10-11,14-16,18-21,23-30,32-37,40]" in lines
    stalled = [line for line in lines if line.startswith("  gpu")]
    assert len(stalled) == 5
    assert re.match(r"  gpu03 #8812303 llm-train-3 +cuzk-bench was OOM-killed at", stalled[0])
    assert any(line.startswith("  gpu31 #8812331 llm-train-31  trainer (4) is stopped (T)") for line in lines)
    # every host's why starts in one column, and its wrapped lines hang under it
    column = stalled[0].index("cuzk-bench")
    assert all(line[column - 2 : column] == "  " and line[column] != " " for line in stalled)
    i = lines.index(stalled[0])
    assert lines[i + 1].startswith(" " * column) and lines[i + 1][column] != " "
    assert "  skipped: vast.ai instance N is exited, not running  [2: gpu[12-13]]" in text
    # two texts differing in the host name fold to one, numbers kept when they are the same
    assert "  unreachable: HOST: connection refused on port 22; is sshd running there?  [2: gpu[38-39]]" in text
    assert "vast.ai instance 8812312" not in text
    assert all(len(line) <= 100 for line in lines)


def test_the_same_text_is_never_folded_and_marks_show() -> None:
    reports = fleet_of_forty()
    same = [replace(r, error="the probe timed out", status="timeout", verdict="unknown") for r in reports[:2]]
    text = summary(same, marks={"gpu01": "new"})
    assert "  timeout (new): the probe timed out  [2: gpu[01-02]]" in text and "HOST" not in text
    text = summary(reports, marks={"gpu03": "still"})
    assert "  still gpu03 #8812303 llm-train-3  " in text


def test_fold_hosts() -> None:
    assert fold_hosts(["gpu10", "gpu2", "gpu1", "gpu3"]) == "gpu[1-3,10]"
    assert fold_hosts([f"root@127.0.0.{i}:2222" for i in (1, 2, 3, 7)]) == "root@127.0.0.[1-3,7]:2222"
    assert fold_hosts(["[::1]:22", "a,b", "gpu01"]) == "gpu01, [::1]:22, a,b"  # not foldable: as they are
    # a terminal wraps between hosts: top-level commas carry a space, those inside a range do not
    assert fold_hosts(["gpu1", "gpu2", "gpu7", "node3"]) == "gpu[1-2,7], node3"
    assert fold_hosts(["x\x1b[2J"]) == "x\\x1b[2J"


@pytest.mark.slow
def test_a_real_sweep_of_forty_vast_instances(tmp_path: Path, reap) -> None:
    """40 vast.ai instances: 30 running on loopback sshd addresses (a stopped child makes each
    stalled), 6 exited, 4 on ports where nothing listens."""
    key = keygen(tmp_path / "user")
    a = start_sshd(tmp_path / "a", user_key=key, addresses=[f"127.0.0.{i}" for i in range(1, 17)])
    b = start_sshd(tmp_path / "b", user_key=key, addresses=[f"127.0.0.{i}" for i in range(17, 31)])
    try:
        p, child = stopped_child(reap)
        kh = tmp_path / "known_hosts"
        kh.write_text(a.known_hosts.read_text() + b.known_hosts.read_text())
        dead = dead_port()
        data = []
        for i in range(1, 41):
            port = a.port if i <= 16 else b.port if i <= 30 else dead
            status = "exited" if 31 <= i <= 36 else "running"
            data.append({"id": 7700 + i, "label": f"train-{i}", "actual_status": status,
                         "ssh_host": f"127.0.0.{i}", "ssh_port": port})  # fmt: skip
        r = subprocess.run([sys.executable, "-m", "vastprobe", "sweep", "-", "--format", "table", "-i", str(key),
                            "--known-hosts", str(kh), "--sample", "0.2", "--pid", str(p.pid), "--no-history"],
                           input=json.dumps(data), capture_output=True, text=True, timeout=300,
                           env={**os.environ, "COLUMNS": "120"})  # fmt: skip
        out = r.stdout
        assert r.returncode == 1, r.stderr
        assert out.startswith("40 hosts: 30 ok, 6 skipped, 4 unreachable (")
        assert f"STALLED (30): root@127.0.0.[1-16]:{a.port}, root@127.0.0.[17-30]:{b.port}" in out
        # each stalled host on its own line with its instance (what heads its why is checked on the
        # recorded fleet: here a neighbour's OOM kill, logged without its cgroup, may come first)
        for i in range(1, 31):
            assert re.search(
                rf"^  root@127\.0\.0\.{i}:{a.port if i <= 16 else b.port} #{7700 + i} train-{i} +\S", out, re.M
            )
        flat = re.sub(r"\s+", " ", out)
        assert f"VP105 stopped-child: sleep ({child}) is stopped (T) [30: root@127.0.0.[1-16]:{a.port}," in flat
        assert "skipped: vast.ai instance N is exited, not running  [6: root@127.0.0.[31-36]:" in out
        assert "unreachable: " in out and f"[4: root@127.0.0.[37-40]:{dead}]" in flat
        # what vast.ai says rides with the refused connection, and the surprise (running) comes first
        assert "? (vast.ai: running) [4:" in flat and out.index("unreachable: ") < out.index("skipped: ")
        assert all(len(line) <= 120 for line in out.splitlines())
        os.kill(child, signal.SIGCONT)
    finally:
        a.stop()
        b.stop()


def test_progress_line_is_there_at_once_with_time_and_hosts_in_flight(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux (apt-get install tmux)")
    hang = start_sshd(tmp_path / "hang", force_command="sleep 600", addresses=["127.0.0.1", "127.0.0.2"])
    sock = tmp_path / "tmux.sock"
    targets = f"root@127.0.0.1:{hang.port},root@127.0.0.2:{hang.port}"
    cmd = (f"{sys.executable} -m vastprobe sweep -w {targets} -i {hang.user_key} --known-hosts {hang.known_hosts} "
           f"--timeout 120 --format table --no-history; sleep 60")  # fmt: skip
    subprocess.run(["tmux", "-S", str(sock), "new-session", "-d", "-x", "120", "-y", "20", "-s", "vp", cmd], check=True)
    try:

        def pane() -> str:
            return subprocess.run(["tmux", "-S", str(sock), "capture-pane", "-p", "-t", "vp"],
                                  capture_output=True, text=True).stdout  # fmt: skip

        wait_for(lambda: "0/2 hosts, 2 in flight, 0 not probed, 1s" in pane(), timeout=30, what="the progress line")
        wait_for(lambda: "0/2 hosts, 2 in flight, 0 not probed, 2s" in pane(), timeout=30, what="the clock to move")
        subprocess.run(["tmux", "-S", str(sock), "send-keys", "-t", "vp", "C-c"], check=True)
        wait_for(lambda: "interrupted" in pane(), timeout=30, what="the sweep to stop")
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)
        hang.stop()
