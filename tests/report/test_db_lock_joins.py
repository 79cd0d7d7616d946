"""A PostgreSQL row lock across three hosts of one sweep: the server on B (TCP on loopback), a psql
session on C that updated a row in an open transaction and idles, and a psql on A updating the same
row, its backend on B `UPDATE waiting`. Each "host" is a real sshd in a PID namespace of its own
(test_joins.Fleet), so C's psql is seen only from C, and B sees only the address of its client.

Found by a helper: A and B read STALLED, while C, whose session keeps the lock, read HEALTHY and
nothing named it; the operator had to run the SQL in the hint to find it."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.helpers import wait_for
from tests.report.test_joins import RECORDED, Fleet, fleet, recorded  # noqa: F401  (the fixture)
from tests.sshd import Sshd, free_ports

BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def _postgres_user() -> bool:
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return True


#: the live scene's needs (the recorded one's test needs none of them)
LIVE = [
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
    pytest.mark.skipif(not BIN or shutil.which("psql") is None, reason="needs PostgreSQL (Debian package postgresql)"),
    pytest.mark.skipif(not _postgres_user() or os.geteuid() != 0, reason="needs root and the postgres user"),
]


@contextlib.contextmanager
def pg_data() -> Iterator[Path]:
    """An initdb'd cluster directory the postgres user owns (not started: host B runs the server)."""
    d = Path(tempfile.mkdtemp(prefix="vp-pgj-", dir="/tmp"))
    shutil.chown(d, "postgres")
    subprocess.run(["runuser", "-u", "postgres", "--", f"{BIN[-1]}/initdb", "-D", str(d / "data"), "-U", "postgres",
                    "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"],
                   check=True, capture_output=True, timeout=120, cwd=d)  # fmt: skip
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with pg_data() as d:
        yield d


def _titles(h: Sshd) -> dict[int, str]:
    """The processes of host `h` by their pid in its namespace (what its report names), with their titles."""
    out = {}
    for c in psutil.Process(h.proc.pid).children(recursive=True):
        try:
            status = Path(f"/proc/{c.pid}/status").read_text()
            ns = next(line.split()[-1] for line in status.splitlines() if line.startswith("NSpid:"))
            out[int(ns)] = " ".join(c.cmdline())
        except (psutil.Error, OSError, StopIteration, ValueError):
            continue
    return out


@dataclass(frozen=True)
class RowLock:
    a: Sshd  # psql waiting on the row
    b: Sshd  # the server
    c: Sshd  # psql holding the row in an open transaction
    holder: int  # the backend idle in the transaction, its pid in B's namespace
    client: int  # C's psql, its pid in C's namespace


def row_lock(fleet: Fleet, data: Path) -> RowLock:  # noqa: F811
    """The three hosts, once A's update waits (also fixtures/joins/record.py's scene)."""
    port = free_ports(1)[0]
    b = fleet.host(f"runuser -u postgres -- {BIN[-1]}/postgres -D {data}/data -c listen_addresses=127.0.0.1 "
                   f"-p {port} -k {data} -c fsync=off -c shared_buffers=16MB -c dynamic_shared_memory_type=mmap")  # fmt: skip
    psql = f"psql -h 127.0.0.1 -p {port} -U postgres -X -q"
    up = [*psql.split(), "-c", "select 1"]
    wait_for(lambda: subprocess.run(up, capture_output=True).returncode == 0, timeout=60, what="postgres answering")
    subprocess.run([*psql.split(), "-c", "create table t (id int primary key, v int); insert into t values (1, 0)"],
                   check=True, capture_output=True)  # fmt: skip
    c = fleet.host(f"sh -c '(echo \"BEGIN; UPDATE t SET v = v + 1 WHERE id = 1;\"; sleep 100000) | {psql}'")
    wait_for(lambda: any("idle in transaction" in t for t in _titles(b).values()), what="C's open transaction")
    a = fleet.host(f'{psql} -c "UPDATE t SET v = v + 10 WHERE id = 1"')
    wait_for(lambda: any("UPDATE waiting" in t for t in _titles(b).values()), what="A's update waiting")
    holder = next(p for p, t in _titles(b).items() if "idle in transaction" in t)
    client = next(p for p, t in _titles(c).items() if t.split(" ")[0].endswith("psql"))
    return RowLock(a, b, c, holder, client)


def live(test: Callable[..., None]) -> Callable[..., None]:
    for mark in LIVE:
        test = mark(test)
    return test


@live
def test_the_client_holding_a_row_lock_from_a_third_host_is_named_there(fleet: Fleet, data_dir: Path) -> None:  # noqa: F811
    lock = row_lock(fleet, data_dir)
    a, b, c, holder, client = lock.a, lock.b, lock.c, lock.holder, lock.client
    rc, got = fleet.sweep(a.target, b.target, c.target)
    on_b = next(f for f in got[b.target]["findings"] if f["rule"] == "db-lock-wait")
    assert on_b["severity"] == "error" and got[b.target]["verdict"] == "stalled", on_b
    assert f"likely held by backend {holder} (its client: 127.0.0.1:" in on_b["summary"], on_b["summary"]
    assert on_b["remote"] == c.target and on_b["peer"]["pid"] == holder, on_b
    line = next(e["detail"] for e in on_b["evidence"] if e["source"] == "this run" and e["detail"].startswith(c.target))
    assert line.startswith(f"{c.target}: psql ({client}) is the client of postgres ({holder})"), line

    told = [f for f in got[c.target]["findings"] if f["rule"] == "db-lock-wait"]
    assert told, got[c.target]["findings"]
    f = told[0]
    assert f["summary"].startswith(f"psql ({client}) is the client of postgres ({holder}) on {b.target}, which "
                                   "others wait behind: "), f["summary"]  # fmt: skip
    assert f["severity"] == "error" and f["remote"] == b.target and f["pids"] == [client]
    assert "commit or roll back" in f["hint"]
    assert got[c.target]["verdict"] == "stalled" and got[c.target]["headline"].startswith(f"psql ({client})")
    assert got[a.target]["verdict"] == "stalled" and rc == 1

    # without B, nothing says C's idle psql holds anyone: C reads healthy
    rc, got = fleet.sweep(a.target, c.target)
    assert got[c.target]["verdict"] == "healthy", got[c.target]["findings"]
    assert not any(f["rule"] == "db-lock-wait" for f in got[c.target]["findings"])


def _analyze(tmp_path: Path, *hosts: str) -> tuple[int, dict[str, dict]]:
    files = recorded(tmp_path, "pg-row-lock", "".join(hosts))
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", *files, "--format", "json"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.stdout, r.stderr
    return r.returncode, {f"{i}-{h['target']}": h for i, h in enumerate(json.loads(r.stdout)["hosts"])}


def test_captures_of_the_three_hosts_analysed_together_name_the_client(tmp_path: Path) -> None:
    """The same scene recorded (fixtures/joins/record.py): `analyze A B C` reads the hosts as a sweep
    does; each capture alone reads as its host alone."""
    pids = json.loads((RECORDED / "pg-row-lock.json").read_text())
    rc, got = _analyze(tmp_path, "A", "B", "C")
    a, b, c = got.values()
    told = [f for f in c["findings"] if f["rule"] == "db-lock-wait"]
    assert told and told[0]["severity"] == "error", c["findings"]
    assert told[0]["summary"].startswith(f"psql ({pids['client']}) is the client of postgres ({pids['holder']}) on "
                                         f"{b['target']}, which others wait behind: "), told[0]["summary"]  # fmt: skip
    assert c["verdict"] == "stalled" and b["verdict"] == "stalled" and a["verdict"] == "stalled" and rc == 1
    assert any(f["rule"] == "socket-peer-wait" and f["remote"] == b["target"] for f in a["findings"]), a["findings"]

    rc, got = _analyze(tmp_path, "C")
    (c,) = got.values()
    assert c["verdict"] == "healthy" and rc == 0, c["findings"]
    rc, got = _analyze(tmp_path, "A")  # its other end out of sight: no proof
    (a,) = got.values()
    assert a["verdict"] != "stalled" and rc == 0, a["findings"]
    # one host's captures of two moments are not one run: read each alone
    rc, got = _analyze(tmp_path, "C", "C")
    assert [h["verdict"] for h in got.values()] == ["healthy", "healthy"] and rc == 0
