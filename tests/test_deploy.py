"""deploy/: the Kubernetes CronJob, the Slurm array script and the systemd units, checked for
structure and run as far as this machine can: the CronJob's own shell script and the sbatch script
are run once per index with the environment each engine would give them (and this checkout's
vastprobe), and their shards must cover an inventory exactly once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sshd import free_port, keygen

yaml = pytest.importorskip("yaml", reason="PyYAML (the test extra) parses the manifests")

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
VASTPROBE = Path(sys.executable).parent / "vastprobe"


def manifests(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()) if d]


def cronjob() -> dict:
    (job,) = [d for d in manifests("vastprobe-sweep.yaml") if d["kind"] == "CronJob"]
    return job


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


@pytest.fixture
def inventory(tmp_path: Path) -> tuple[Path, list[str]]:
    targets = sorted({f"root@127.0.0.{i % 5 + 1}:{free_port()}" for i in range(20)})  # refused at once
    path = tmp_path / "fleet.txt"
    path.write_text("\n".join(targets) + "\n")
    keygen(tmp_path / "key")  # the Secret's files, as mounted
    (tmp_path / "kh").write_text("")
    return path, targets


def _shim(tmp_path: Path) -> Path:
    """A PATH entry whose `vastprobe` is this checkout's (the image's is on PATH the same way)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "vastprobe"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m vastprobe "$@"\n')
    shim.chmod(0o755)
    return bin_dir


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "JOB_COMPLETION", "VASTPROBE_", "PG", "PUSHGATEWAY"))}  # fmt: skip


def test_the_cronjob_starts_an_indexed_job_whose_env_reaches_shard_auto() -> None:
    job = cronjob()
    assert job["apiVersion"] == "batch/v1" and job["spec"]["concurrencyPolicy"] == "Forbid"
    spec = job["spec"]["jobTemplate"]["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    env = env_of(container)
    assert int(env["VASTPROBE_SHARDS"]["value"]) == spec["completions"]  # the count --shard auto takes
    script = container["args"][0]
    assert container["command"] == ["/bin/sh", "-c"] and "--shard auto" in script
    # the history URL from a Secret the example defines, never in the manifest itself
    ref = env["VASTPROBE_HISTORY"]["valueFrom"]["secretKeyRef"]
    secrets = {d["metadata"]["name"]: d for d in manifests("secrets.example.yaml") if d["kind"] == "Secret"}
    assert ref["key"] in secrets[ref["name"]]["stringData"]
    assert not any("postgresql://" in str(e.get("value", "")) for e in container["env"])
    # the SSH key and known_hosts come from a Secret volume, readable by the pod's group only
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    ssh = volumes[mounts["ssh"]["name"]]["secret"]
    assert ssh["secretName"] in secrets and ssh["defaultMode"] & 0o077 == 0o040
    paths = {i["path"] for i in ssh["items"]}
    for var in ("VASTPROBE_SSH_KEY", "VASTPROBE_KNOWN_HOSTS"):
        assert env[var]["value"].startswith(mounts["ssh"]["mountPath"] + "/")
        assert env[var]["value"].rsplit("/", 1)[1] in paths
    assert "$VASTPROBE_SSH_KEY" in script and "$VASTPROBE_KNOWN_HOSTS" in script
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    # exit 2 (a usage or configuration error) is not retried; 1 and 3 are findings, not failures
    (rule,) = spec["podFailurePolicy"]["rules"]
    assert rule["onExitCodes"]["values"] == [2] and rule["action"] in ("FailJob", "FailIndex")
    assert re.search(r"case \$rc in 0\|1\|3\) exit 0", script)
    # metrics: one Pushgateway group per shard, so shards never overwrite each other's series
    assert "/shard/$shard" in script and "vastprobe-shard-$shard.prom" in script


@pytest.mark.slow
def test_the_cronjob_script_sweeps_every_host_once(tmp_path: Path, inventory: tuple[Path, list[str]]) -> None:
    container = cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    spec = cronjob()["spec"]["jobTemplate"]["spec"]
    env = {k: v["value"] for k, v in env_of(container).items() if "value" in v}
    path, targets = inventory
    seen: list[str] = []
    for index in range(spec["completions"]):  # what Kubernetes gives each pod of the Indexed Job
        out = tmp_path / f"out{index}"
        out.mkdir()
        run_env = {**_clean_env(), **env, "JOB_COMPLETION_INDEX": str(index), "VASTPROBE_FLEET": str(path),
                   "VASTPROBE_SSH_KEY": str(tmp_path / "key"), "VASTPROBE_KNOWN_HOSTS": str(tmp_path / "kh"),
                   "VASTPROBE_OUT": str(out), "PUSHGATEWAY_URL": "", "HOME": str(tmp_path),
                   "VASTPROBE_HISTORY": str(tmp_path / "history.sqlite"),
                   "PATH": f"{_shim(tmp_path)}:{os.environ['PATH']}"}  # fmt: skip
        r = subprocess.run([*container["command"], container["args"][0]], env=run_env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr  # 3 (all refused) is mapped to success
        rows = [json.loads(line) for line in (out / "last.ndjson").read_text().splitlines()]
        seen += [row["target"] for row in rows if "target" in row]  # (the last line is the summary)
        prom = (out / f"vastprobe-shard-{index + 1}.prom").read_text()
        assert f'vastprobe_sweep_shard_info{{shard="{index + 1}",shards="{spec["completions"]}"}} 1' in prom
    assert sorted(seen) == targets


@pytest.mark.slow
def test_the_slurm_array_sweeps_every_host_once(tmp_path: Path, inventory: tuple[Path, list[str]]) -> None:
    script = DEPLOY / "slurm" / "vastprobe-sweep.sbatch"
    text = script.read_text()
    m = re.search(r"^#SBATCH --array=(\d+)-(\d+)$", text, re.M)
    assert m and '"$VASTPROBE" sweep "$VASTPROBE_FLEET" --shard auto' in text
    low, high = int(m.group(1)), int(m.group(2))
    path, targets = inventory
    seen: list[str] = []
    for task in range(low, high + 1):  # what sbatch --array gives each task
        run_env = {**_clean_env(), "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_MIN": str(low),
                   "SLURM_ARRAY_TASK_MAX": str(high), "SLURM_ARRAY_TASK_COUNT": str(high - low + 1),
                   "SLURM_ARRAY_TASK_STEP": "1", "VASTPROBE": str(_shim(tmp_path) / "vastprobe"),
                   "VASTPROBE_FLEET": str(path), "VASTPROBE_SSH_KEY": str(tmp_path / "key"),
                   "VASTPROBE_KNOWN_HOSTS": str(tmp_path / "kh"), "VASTPROBE_OUT": str(tmp_path), "HOME": str(tmp_path),
                   "VASTPROBE_ENV_FILE": str(tmp_path / "env")}  # fmt: skip
        (tmp_path / "env").write_text(f"VASTPROBE_HISTORY={tmp_path / 'history.sqlite'}\n")
        r = subprocess.run(["sh", str(script)], env=run_env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        shard = task - low + 1
        seen += [
            row["target"]
            for line in (tmp_path / f"vastprobe-shard-{shard}.ndjson").read_text().splitlines()
            if "target" in (row := json.loads(line))  # (the last line is the summary)
        ]
    assert sorted(seen) == targets
    import sqlite3

    with sqlite3.connect(tmp_path / "history.sqlite") as con:  # the env file's history: every shard wrote it
        assert con.execute("SELECT count(*) FROM hosts").fetchone()[0] == len(targets)
        assert con.execute("SELECT count(*) FROM sweeps").fetchone()[0] == high - low + 1


def _units(tmp_path: Path) -> tuple[Path, Path]:
    service = (DEPLOY / "systemd" / "vastprobe-sweep.service").read_text()
    assert "/opt/vastprobe/.venv/bin/vastprobe sweep" in service
    s = tmp_path / "vastprobe-sweep.service"
    s.write_text(service.replace("/opt/vastprobe/.venv/bin/vastprobe", str(VASTPROBE)))  # what verify can find here
    t = tmp_path / "vastprobe-sweep.timer"
    t.write_text((DEPLOY / "systemd" / "vastprobe-sweep.timer").read_text())
    return s, t


def test_the_systemd_units_hold_together(tmp_path: Path) -> None:
    service, timer = _units(tmp_path)
    text = service.read_text()
    assert re.search(r"^Type=oneshot$", text, re.M) and re.search(r"^SuccessExitStatus=1 3$", text, re.M)
    assert re.search(r"^Unit=vastprobe-sweep\.service$", timer.read_text(), re.M)
    assert re.search(r"^OnCalendar=\*:0/5$", timer.read_text(), re.M)
    args = re.search(r"^ExecStart=(.*?)(?<!\\)$", text, re.M | re.S)
    assert args and "--prom" in args.group(1)


def test_the_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze on this machine")
    service, timer = _units(tmp_path)
    r = subprocess.run(["systemd-analyze", "verify", str(service), str(timer)], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0 and "vastprobe-sweep" not in r.stderr, r.stderr
    # and verify does fail a unit that is wrong (so the pass above means something)
    service.write_text(service.read_text().replace("Type=oneshot", "Type=oneshot\nExecStart=relative/path"))
    bad = subprocess.run(["systemd-analyze", "verify", str(service), str(timer)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert bad.returncode != 0 or "vastprobe-sweep.service" in bad.stderr, bad.stderr
