"""`sweep --shard auto`: K and N from a Kubernetes Indexed Job or a Slurm array, each host swept by
exactly one controller; without either engine, one usage line and exit 2 before any host is contacted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sshd import free_port
from vastprobe.history.shard import ShardError, shard_from_environment, shard_of

ENGINE_VARS = (
    "JOB_COMPLETION_INDEX",
    "VASTPROBE_SHARDS",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
)


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ENGINE_VARS}
    return subprocess.run([sys.executable, "-m", "vastprobe", *args], capture_output=True, text=True, timeout=120,
                          env={**clean, **env})  # fmt: skip


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    targets = sorted({f"root@127.0.0.{i % 7 + 1}:{free_port()}" for i in range(30)})  # refused at once: fast
    path = tmp_path_factory.mktemp("shards") / "fleet.txt"
    path.write_text("\n".join(targets) + "\n")
    return path, targets


def swept(inventory: Path, env: dict[str, str], *extra: str) -> list[str]:
    r = run(["sweep", str(inventory), "--shard", "auto", *extra, "--format", "ndjson", "--no-history"], env)
    assert r.returncode == 3, r.stderr  # every host refused: could not be probed
    return [
        row["target"] for line in r.stdout.splitlines() if "target" in (row := json.loads(line))
    ]  # (not the summary)


@pytest.mark.slow
def test_a_kubernetes_indexed_job_covers_every_host_once(inventory: tuple[Path, list[str]]) -> None:
    path, targets = inventory
    seen: list[str] = []
    for index in range(4):
        part = swept(path, {"JOB_COMPLETION_INDEX": str(index), "VASTPROBE_SHARDS": "4"})
        assert all(shard_of(t, 4) == index + 1 for t in part)  # index 0 is shard 1/4: the --shard K/N split
        seen += part
    assert sorted(seen) == targets
    # the count from --shards wins over nothing, and gives the same split
    assert sorted(swept(path, {"JOB_COMPLETION_INDEX": "1"}, "--shards", "4")) == sorted(
        t for t in targets if shard_of(t, 4) == 2
    )


@pytest.mark.slow
def test_a_slurm_array_covers_every_host_once(inventory: tuple[Path, list[str]]) -> None:
    path, targets = inventory
    seen: list[str] = []
    for task in range(10, 16, 2):  # sbatch --array=10-14:2: three tasks
        env = {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "10",
               "SLURM_ARRAY_TASK_MAX": "14", "SLURM_ARRAY_TASK_STEP": "2"}  # fmt: skip
        seen += swept(path, env)
    assert sorted(seen) == targets


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "neither a Kubernetes Indexed Job (JOB_COMPLETION_INDEX) nor a Slurm array"),
        ({"JOB_COMPLETION_INDEX": "0"}, "needs the shard count: pass --shards N or set VASTPROBE_SHARDS"),
        ({"JOB_COMPLETION_INDEX": "4", "VASTPROBE_SHARDS": "4"}, "is not below --shards 4"),
        ({"JOB_COMPLETION_INDEX": "0", "VASTPROBE_SHARDS": "many"}, "VASTPROBE_SHARDS='many' is not a shard count"),
        ({"SLURM_ARRAY_TASK_ID": "3"}, "SLURM_ARRAY_TASK_COUNT is not set"),
    ],
)
def test_without_an_engine_it_is_a_usage_error(inventory: tuple[Path, list[str]], env: dict, message: str) -> None:
    path, _ = inventory
    r = run(["sweep", str(path), "--shard", "auto", "--format", "ndjson", "--no-history"], env)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    assert message in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


def test_shards_goes_with_auto_only(inventory: tuple[Path, list[str]]) -> None:
    r = run(["sweep", str(inventory[0]), "--shard", "1/3", "--shards", "3", "--no-history"], {})
    assert r.returncode == 2 and "--shards N goes with --shard auto" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("env", "shards", "want"),
    [
        ({"JOB_COMPLETION_INDEX": "0"}, 8, (1, 8)),
        ({"JOB_COMPLETION_INDEX": "7"}, 8, (8, 8)),
        ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "0"}, None, (1, 8)),
        ({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "2"}, None, (8, 8)),
        ({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "2"}, 8, (8, 8)),
    ],
)
def test_index_and_count_from_the_environment(env: dict, shards: int | None, want: tuple[int, int]) -> None:
    assert shard_from_environment(env, shards)[:2] == want


@pytest.mark.parametrize(
    ("env", "shards", "message"),
    [
        ({"JOB_COMPLETION_INDEX": "-1"}, 4, "not a non-negative whole number"),
        ({"JOB_COMPLETION_INDEX": "0", "SLURM_ARRAY_TASK_ID": "0"}, 4, "both"),
        ({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "2"}, 4, "--shards 4"),
        # --array=1,3,7: three tasks that are not one range
        (
            {
                "SLURM_ARRAY_TASK_ID": "7",
                "SLURM_ARRAY_TASK_COUNT": "3",
                "SLURM_ARRAY_TASK_MIN": "1",
                "SLURM_ARRAY_TASK_MAX": "7",
            },
            None,
            "is not one range",
        ),
        ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "0", "SLURM_ARRAY_TASK_MIN": "1"}, None, "want 1"),
    ],
)
def test_contradictions_are_refused(env: dict, shards: int | None, message: str) -> None:
    with pytest.raises(ShardError, match=message):
        shard_from_environment(env, shards)
