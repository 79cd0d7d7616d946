"""do-wait-orphan on real process trees, and the waits it must leave alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import children_of, proc_wchan, vastprobe_json, wait_for


def test_tee_held_open_by_orphaned_sleep(tmp_path: Path, reap) -> None:
    out = tmp_path / "out.log"
    p = subprocess.Popen(["bash", "-c", f"sh -c 'sleep 1000 & echo x' | tee {out}"], start_new_session=True,
                         stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(p)
    wait_for(lambda: out.exists() and out.read_text() == "x\n", what="tee wrote x")
    wait_for(lambda: any(proc_wchan(c).endswith("pipe_read") for c in children_of(p.pid)), what="tee blocked")
    tee = next(c for c in children_of(p.pid) if proc_wchan(c).endswith("pipe_read"))
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5")
    f = next(f for f in host["findings"] if f["rule"] == "do-wait-orphan")
    assert f["severity"] == "error" and rc == 1
    assert f["pids"][:2] == [p.pid, tee]
    orphan = f["pids"][2]
    cmd = Path(f"/proc/{orphan}/cmdline").read_bytes().split(b"\0")
    assert cmd[:2] == [b"sleep", b"1000"]
    assert "orphan" in f["summary"] and "sleep" in f["summary"]
    assert any("pipe:[" in e["detail"] for e in f["evidence"])


def test_shell_waiting_on_busy_command_is_healthy(tmp_path: Path, reap) -> None:
    log = tmp_path / "work.log"
    busy = f"import time\nwhile True:\n    open({str(log)!r}, 'a').write('tick\\n'); sum(range(200000))\n"
    p = subprocess.Popen(["bash", "-c", f'{sys.executable} -c "{busy}"; echo end'], start_new_session=True)
    reap.append(p)
    wait_for(lambda: log.exists() and log.stat().st_size > 100, what="worker writing")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5", "--log", str(log))
    assert host["verdict"] == "healthy", host["findings"]
    assert rc == 0


def test_server_waiting_on_idle_workers_is_not_an_alarm(reap) -> None:
    """A parent waiting on workers that sleep (no progress) with nothing saying they should be busy."""
    p = subprocess.Popen(["bash", "-c", "for i in 1 2 3; do sleep 1000 & done; wait"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 3, what="workers started")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5")
    assert not [f for f in host["findings"] if f["severity"] in ("error", "critical")], host["findings"]
    assert rc == 0


def test_idle_wait_with_a_stale_log_is_a_stall(tmp_path: Path, reap) -> None:
    """The same idle wait becomes a stall when the job's log says it should be moving."""
    log = tmp_path / "job.log"
    log.write_text("started\n")
    import os

    os.utime(log, (1, 1))  # last written in 1970
    p = subprocess.Popen(["bash", "-c", "sleep 1000 & wait"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 1, what="worker started")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5", "--log", str(log), "--stale-after", "60")
    rules = {f["rule"] for f in host["findings"]}
    assert {"do-wait-orphan", "missing-logs"} <= rules and rc == 1


def test_command_substitution_held_open_by_an_orphan(reap) -> None:
    """`x=$(sh -c 'sleep 1000 & echo hi')`: bash reads the substitution to EOF, which never comes."""
    p = subprocess.Popen(["bash", "-c", "x=$(sh -c 'sleep 1000 & echo hi'); echo done"], start_new_session=True,
                         stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(p)
    wait_for(lambda: proc_wchan(p.pid).endswith("pipe_read"), what="bash reading the substitution")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    f = next(f for f in host["findings"] if f["rule"] == "do-wait-orphan")
    assert f["severity"] == "error" and f["pids"][0] == p.pid and rc == 1
    orphan = f["pids"][1]
    assert Path(f"/proc/{orphan}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"1000"]
    assert "waits for EOF" in f["summary"]


def test_live_producer_pipeline_is_not_an_orphan_trap(tmp_path: Path, reap) -> None:
    """`producer | consumer` where the producer keeps writing: no finding."""
    prod = "import time\nwhile True:\n    print('x', flush=True); time.sleep(0.02)\n"
    script = tmp_path / "producer.py"
    script.write_text(prod)
    p = subprocess.Popen(["bash", "-c", f"{sys.executable} {script} | cat > /dev/null"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 2, what="pipeline started")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    assert rc == 0
    assert not [f for f in host["findings"] if f["severity"] in ("error", "critical")], host["findings"]
