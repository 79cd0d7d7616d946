"""A PostgreSQL row lock, with the Debian package's server run as a private cluster (initdb and
pg_ctl in a temp dir, a Unix socket there, no TCP): one psql session updates a row in an open
transaction and idles; the job's psql updates the same row and waits. The job's client polls its
connection and the backend sleeps in its latch: only the backend's process title (`UPDATE
waiting`) says it waits for a lock. Found from /proc alone, no --log."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import descendants, vastprobe_json, wait_for

BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def _postgres_user() -> str | None:
    try:
        return pwd.getpwnam("postgres").pw_name
    except KeyError:
        return None


pytestmark = [
    pytest.mark.skipif(not BIN or shutil.which("psql") is None, reason="needs PostgreSQL (Debian package postgresql)"),
    pytest.mark.skipif(_postgres_user() is None or os.geteuid() != 0, reason="needs root and the postgres user"),
]


def titles(cluster: Path) -> dict[int, str]:
    """The titles of this cluster's backends (another PostgreSQL on the machine is not ours)."""
    postmaster = int((cluster / "data" / "postmaster.pid").read_text().split()[0])
    out = {}
    for pid in descendants(postmaster):
        with contextlib.suppress(OSError):
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    return out


def argv0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("pg")
    shutil.chown(d, "postgres")
    os.chmod(d, 0o755)
    for parent in d.parents:  # postgres must be able to reach its own directory
        if parent == Path("/"):
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o011)
    bin_ = BIN[-1]

    def as_postgres(*cmd: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True, capture_output=True, timeout=120)

    as_postgres(f"{bin_}/initdb", "-D", str(d / "data"), "-A", "trust")
    as_postgres(f"{bin_}/pg_ctl", "-D", str(d / "data"), "-l", str(d / "log"), "-w",
                "-o", f"-k {d} -c listen_addresses=''", "start")  # fmt: skip
    subprocess.run(["psql", "-h", str(d), "-U", "postgres", "-qc",
                    "create table t(id int primary key, v int); insert into t values (1, 0);"], check=True)  # fmt: skip
    yield d
    subprocess.run(["runuser", "-u", "postgres", "--", f"{bin_}/pg_ctl", "-D", str(d / "data"), "-m", "immediate",
                    "stop"], capture_output=True, timeout=60)  # fmt: skip


@pytest.mark.parametrize("sample", ["1", "0"])
def test_a_client_behind_a_session_idle_in_transaction_names_it(reap, cluster: Path, sample: str) -> None:
    holder = subprocess.Popen(["bash", "-c", f"(echo 'begin; update t set v = 1 where id = 1;'; sleep 600) | "
                               f"psql -h {cluster} -U postgres -q"], start_new_session=True,
                              stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(holder)
    wait_for(
        lambda: any(t.endswith("idle in transaction") for t in titles(cluster).values()), what="the open transaction"
    )
    job = subprocess.Popen(["bash", "-c", f"psql -h {cluster} -U postgres -qc 'update t set v = 2 where id = 1;'"],
                           start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(job)
    wait_for(lambda: any(t.endswith(" waiting") for t in titles(cluster).values()), what="the update waiting")
    idle = next(pid for pid, t in titles(cluster).items() if t.endswith("idle in transaction"))
    client = next(d for d in descendants(holder.pid) if argv0(d).endswith("psql"))
    try:
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
        found = [f for f in host["findings"] if f["rule"] == "db-lock-wait"]
        assert found, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        f = found[0]
        assert "UPDATE waiting" in f["summary"] and f"likely held by backend {idle}" in f["summary"], f["summary"]
        assert f"({client})" in f["summary"] or f"{client} (psql)" in f["summary"], f["summary"]
        assert f"pg_terminate_backend({idle})" in f["hint"] and "pg_blocking_pids" in f["hint"]
        if sample == "1":  # the holding session stayed idle in its transaction over the window: proven
            assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1
            proof = next(e["detail"] for e in f["evidence"] if e["source"] == "proof")
            assert proof.startswith(f"session {idle} is idle in a transaction"), proof
        else:
            assert f["severity"] == "info" and f["summary"].endswith("(seen in one sample)")
            assert host["verdict"] == "healthy" and rc == 0
    finally:
        subprocess.run(["psql", "-h", str(cluster), "-U", "postgres", "-qc",
                        "select pg_terminate_backend(pid) from pg_stat_activity where state like 'idle in%'"],
                       capture_output=True, timeout=30)  # fmt: skip


def test_a_running_query_is_healthy(reap, cluster: Path) -> None:
    """The control: a client whose backend works (pg_sleep in a loop stays busy) is no finding."""
    job = subprocess.Popen(["psql", "-h", str(cluster), "-U", "postgres", "-qc",
                            "select count(*) from generate_series(1, 300000000);"], start_new_session=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(job)
    wait_for(lambda: any(t.endswith("SELECT") for t in titles(cluster).values()), what="the query running")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]
