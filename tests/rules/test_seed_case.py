"""The seed case, rebuilt for real: a PID-namespace "container" with a memory limit (a memory
cgroup around it all) whose entrypoint (bash) runs benchmark.sh, which starts a daemon in the
background, runs a bench client that the kernel OOM-kills at the limit, and then waits forever on
the daemon. Other processes on the host are OOM-killed meanwhile (oom_noise)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cgroup_lab import OOM_KILLS, MemoryCgroup
from tests.helpers import children_of, proc_wchan, vastprobe_json, wait_for


@pytest.fixture
def seed(tmp_path: Path, reap, oom_noise):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    cg = MemoryCgroup(40 * 1024 * 1024)
    client = tmp_path / "bench_client"
    client.symlink_to(sys.executable)  # the kernel names the victim after this file: bench_client
    (tmp_path / "benchmark.sh").write_text(
        f"""#!/bin/bash
python3 -c 'import time, socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); s.accept()' &
{client} -c "b = bytearray(200 * 1024 * 1024); print(len(b))"
echo "client exited $?"
wait
"""
    )
    (tmp_path / "entrypoint.sh").write_text(
        f"#!/bin/bash\nbash {tmp_path}/benchmark.sh > {tmp_path}/bench.log 2>&1\necho done\n"
    )
    container = f"echo $$ > {cg.procs_file}; exec unshare --pid --fork --mount-proc bash {tmp_path / 'entrypoint.sh'}"
    p = subprocess.Popen(["sh", "-c", container], start_new_session=True)
    reap.append(p)
    wait_for(lambda: children_of(p.pid) != [], what="entrypoint started")
    entry = children_of(p.pid)[0]
    wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="the bench client OOM-killed")
    wait_for(lambda: any(proc_wchan(c).startswith(("do_wait", "sigsuspend")) for c in children_of(entry)),
             what="benchmark.sh waiting")  # fmt: skip
    bench = children_of(entry)[0]
    wait_for(
        lambda: any(proc_wchan(c) == "inet_csk_accept" for c in children_of(bench)), what="daemon idle in accept()"
    )
    yield entry, children_of(entry)[0], cg
    cg.remove()


@OOM_KILLS
def test_seed_case(seed) -> None:
    entry, bench, cg = seed
    rc, host = vastprobe_json("--pid", str(entry), "--sample", "1")
    # findings come worst first; earlier OOM kills on this machine may add info-level context
    rules: dict = {}
    for f in host["findings"]:
        rules.setdefault(f["rule"], f)
    # the neighbours' OOM kills (oom_noise) are context: info, blamed on nobody, not in the chain
    others = [f for f in host["findings"] if f["rule"] == "oom-killed-child" and f is not rules["oom-killed-child"]]
    assert all(f["severity"] == "info" and not f["pids"] for f in others), others
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
    assert not any(e["detail"].startswith("python was OOM-killed") for e in wait["evidence"])  # the noise
    assert "idle-gpu" not in rules


@OOM_KILLS
def test_seed_case_seen_from_inside_the_container(seed) -> None:
    """How an operator sees it on vast.ai: the probe runs inside the container's PID namespace,
    with no --pid at all. No kernel threads are visible, so the scope is the job."""
    import shutil

    from tests.helpers import run_probe_raw
    from vastprobe.analysis.scope import compute_scope
    from vastprobe.model import verdict
    from vastprobe.parsers.snapshot import build_snapshot
    from vastprobe.probe.script import ProbeParams
    from vastprobe.probe.sections import split_sections
    from vastprobe.rules.base import RuleOptions
    from vastprobe.rules.engine import run_rules

    if shutil.which("nsenter") is None:
        pytest.skip("needs nsenter (util-linux)")
    entry, _bench, _cg = seed
    params = ProbeParams(sample=1)
    raw = run_probe_raw(params, ["nsenter", f"--target={entry}", "--pid", "--mount", "--", "sh"])
    snap = build_snapshot(split_sections(raw, params.boundary), params, "container", "local", len(raw))
    init = snap.process(1)
    assert init is not None and "entrypoint.sh" in " ".join(init.cmdline)  # we really are inside
    assert not any(p.kernel_thread for p in snap.processes)
    findings = run_rules(snap, compute_scope(snap), RuleOptions())
    errors = {f.rule for f in findings if f.severity == "error"}
    assert {"oom-killed-child", "do-wait-orphan"} <= errors
    assert verdict(findings) == "stalled"


@OOM_KILLS
def test_default_scope_on_a_host_does_not_blame_idle_shells(reap, memcg: MemoryCgroup) -> None:
    """On a whole host (kernel threads visible), an OOM kill tied to no watched process by cgroup
    or name must not turn every idle waiting shell into a stall."""
    p = subprocess.Popen(["bash", "-c", "sleep 1000 & wait"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 1, what="idle shell")
    cg = memcg
    r = subprocess.run(["sh", "-c", f"echo $$ > {cg.procs_file}; exec {sys.executable} -c 'b = bytearray(200 << 20)'"])
    assert r.returncode == -9
    _rc, host = vastprobe_json("--sample", "0.3")
    blamed = [f for f in host["findings"] if f["severity"] in ("error", "critical") and p.pid in f["pids"]]
    assert not blamed, blamed
    ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child"]
    assert ooms and all(f["severity"] in ("info", "warning") for f in ooms)
