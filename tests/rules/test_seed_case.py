"""The seed case, rebuilt for real: a PID-namespace "container" whose entrypoint (bash) runs
benchmark.sh, which starts a daemon in the background, runs a bench client that the kernel
OOM-kills inside a small memory cgroup, and then waits forever on the daemon."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cgroup_lab import MemoryCgroup
from tests.helpers import children_of, proc_wchan, vastprobe_json, wait_for


@pytest.fixture
def seed(tmp_path: Path, reap):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    cg = MemoryCgroup(40 * 1024 * 1024)
    client = tmp_path / "bench_client"
    client.symlink_to(sys.executable)  # the kernel names the victim after this file: bench_client
    (tmp_path / "benchmark.sh").write_text(
        f"""#!/bin/bash
python3 -c 'import time, socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); s.accept()' &
sh -c 'echo $$ > {cg.procs_file}; exec {client} -c "b = bytearray(200 * 1024 * 1024); print(len(b))"'
echo "client exited $?"
wait
"""
    )
    (tmp_path / "entrypoint.sh").write_text(
        f"#!/bin/bash\nbash {tmp_path}/benchmark.sh > {tmp_path}/bench.log 2>&1\necho done\n"
    )
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "bash", str(tmp_path / "entrypoint.sh")],
                         start_new_session=True)  # fmt: skip
    reap.append(p)
    wait_for(lambda: children_of(p.pid) != [], what="entrypoint started")
    entry = children_of(p.pid)[0]
    wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="the bench client OOM-killed")
    wait_for(lambda: any(proc_wchan(c).startswith(("do_wait", "sigsuspend")) for c in children_of(entry)),
             what="benchmark.sh waiting")  # fmt: skip
    yield entry, children_of(entry)[0], cg
    cg.remove()


def test_seed_case(seed) -> None:
    entry, bench, cg = seed
    rc, host = vastprobe_json("--pid", str(entry), "--sample", "1")
    # findings come worst first; earlier OOM kills on this machine may add info-level context
    rules: dict = {}
    for f in host["findings"]:
        rules.setdefault(f["rule"], f)
    assert host["status"] == "ok"
    assert host["verdict"] == "stalled" and rc == 1
    oom = rules["oom-killed-child"]
    assert oom["severity"] == "error"
    assert "bench_client" in oom["summary"] and bench in oom["pids"]
    assert any(cg.name in e["detail"] for e in oom["evidence"])
    wait = rules["do-wait-orphan"]
    assert wait["severity"] == "error"
    assert wait["pids"][:2] == [entry, bench] and len(wait["pids"]) == 3  # entrypoint -> benchmark.sh -> daemon
    assert wait["caused_by"] == "oom-killed-child"
    assert "idle-gpu" not in rules
