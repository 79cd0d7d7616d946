"""`sweep --group-by` across shards: with one history, a group spans the whole fleet. Nine hosts of
one job (in-process SSH servers answering with real captures, fixtures/reports/captures: eight
`healthy`, one `stopped-child`) are split by `--shard K/2`; the stuck host is the odd one out of all
nine, whichever shard swept it, once the other shard has recorded its hosts."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg_cluster
from tests.hostile_servers import RECORDED_BOUNDARY, Fleet, healthy
from tests.paths import REPO
from vastprobe.history.shard import shard_of

pytestmark = pytest.mark.slow  # sweeps of in-process SSH hosts, four per test
CAPTURES = REPO / "fixtures" / "reports" / "captures"
# the recordings were made with one --log each: a probe given none that sends a log section is forged
LOG = ("--log", "/tmp/vastprobe-golden/job.log")


def reframed(name: str) -> bytes:
    doc = json.loads((CAPTURES / f"{name}.json").read_text())
    return base64.b64decode(doc["raw_b64"]).replace(doc["params"]["boundary"].encode(), RECORDED_BOUNDARY.encode())


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    # the ports are the kernel's choice, and the shards a hash of the targets: 9 hosts all in one
    # shard (1 run in 256) is started again, until both shards have hosts of the job
    for _ in range(20):
        handlers = [healthy(raw=reframed("healthy")) for _ in range(8)] + [healthy(raw=reframed("stopped-child"))]
        fleet = Fleet(handlers).start(tmp_path_factory.mktemp("job"))
        if {shard_of(t, 2) for t in fleet.targets} == {1, 2}:
            break
        fleet.stop()
    try:
        assert {shard_of(t, 2) for t in fleet.targets} == {1, 2}  # both shards have hosts of the job
        yield fleet
    finally:
        fleet.stop()


def sweep(fleet: Fleet, shard: str, history: str, *extra: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "VASTPROBE_"))}
    r = subprocess.run(
        [sys.executable, "-m", "vastprobe", "sweep", ",".join(fleet.targets), "--known-hosts", str(fleet.known_hosts),
         "--shard", shard, "--group-by", "^root@(127)", "--history", history, "--format", "ndjson", *LOG, *extra],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert r.returncode in (0, 1) and "warning" not in r.stderr, r.stderr
    return [row for line in r.stdout.splitlines() if "summary" not in (row := json.loads(line))]  # (the last line)


def check_the_job_across_shards(job: Fleet, history: str) -> None:
    stuck = job.targets[-1]
    for _ in range(2):  # the second round sees every host of the first in the history
        rows = sweep(job, "1/2", history) + sweep(job, "2/2", history)
    assert sorted(r["target"] for r in rows) == sorted(job.targets)
    odd = {r["target"]: r["outlier_of"] for r in rows if r.get("outlier_of")}
    assert list(odd) == [stuck], odd
    assert odd[stuck]["group_size"] == 9 and odd[stuck]["majority_size"] == 8, odd
    # without a history each shard sees its own hosts only: the group is smaller than the job
    alone = [r for k in ("1/2", "2/2") for r in sweep(job, k, history, "--no-history")]
    sizes = {r["outlier_of"]["group_size"] for r in alone if r.get("outlier_of")}
    assert sizes <= set(range(1, 9))


def test_a_group_spans_the_shards_in_one_sqlite_history(job: Fleet, tmp_path: Path) -> None:
    check_the_job_across_shards(job, str(tmp_path / "h.sqlite"))


def test_a_group_spans_the_shards_in_one_postgresql_history(job: Fleet) -> None:
    cluster = pg_cluster.start()
    if isinstance(cluster, str):
        pytest.skip(f"no private PostgreSQL cluster: {cluster}")
    try:
        check_the_job_across_shards(job, cluster.url(cluster.create_database("groups")))
    finally:
        cluster.stop()
