"""file-lock-wait on SQLite (the real library, through Python's sqlite3): its busy handler sleeps
and retries, so the waiter is in a timer, not in the kernel's lock wait; /proc/locks still shows
who holds SQLite's lock bytes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import children_of, proc_wchan, vastprobe_json, wait_for

HOLDER = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("create table if not exists t(x)")
c.execute(sys.argv[2])                # BEGIN EXCLUSIVE or BEGIN IMMEDIATE: the transaction left open
c.execute("insert into t values (1)")
print("holding", flush=True)
time.sleep(100000)
"""


def locks_of(pid: int) -> list[str]:
    return [line for line in Path("/proc/locks").read_text().splitlines() if f" {pid} " in line]


def hold(reap: list, db: Path, begin: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), begin], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)  # fmt: skip
    reap.append(holder)
    assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
    return holder


def test_a_writer_retrying_an_open_transactions_lock(reap, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    holder = hold(reap, db, "BEGIN EXCLUSIVE")
    writer = f"import sqlite3; c = sqlite3.connect({str(db)!r}, timeout=100000); c.execute('insert into t values (2)')"
    job = subprocess.Popen(["bash", "-c", f'{sys.executable} -c "{writer}"; echo done'], start_new_session=True)
    reap.append(job)
    wait_for(lambda: children_of(job.pid) and proc_wchan(children_of(job.pid)[0]) == "hrtimer_nanosleep",
             what="the writer in SQLite's busy handler")  # fmt: skip
    [waiter] = children_of(job.pid)
    assert locks_of(holder.pid) and not locks_of(waiter)
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    found = [f for f in host["findings"] if f["rule"] == "file-lock-wait"]
    assert len(found) == 1, [
        (p["pid"], p["wchan"], p["fds"]) for p in host["snapshot"]["processes"] if p["pid"] in (waiter, holder.pid)
    ]
    f = found[0]
    assert f["summary"].startswith(f"bash ({job.pid}), through {waiter} (python")
    assert f"SQLite's write lock on {db}" in f["summary"] and holder.pid in f["pids"] and waiter in f["pids"]
    assert f["severity"] == "warning" and rc == 0 and "transaction left open" in f["hint"]


def test_a_reader_sleeping_beside_a_reserved_lock_is_not_waiting(reap, tmp_path: Path) -> None:
    """BEGIN IMMEDIATE takes RESERVED only: readers go on reading. A reader that sleeps between its
    queries with the database open waits on nothing."""
    db = tmp_path / "runs.sqlite"
    holder = hold(reap, db, "BEGIN IMMEDIATE")
    reader = (f"import sqlite3, time; c = sqlite3.connect({str(db)!r}, timeout=100000)\n"
              "while True: c.execute('select count(*) from t').fetchall(); time.sleep(5)")  # fmt: skip
    job = subprocess.Popen([sys.executable, "-c", reader], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid) == "hrtimer_nanosleep" and any(
        str(db) == str(Path(f"/proc/{job.pid}/fd/{fd}").resolve()) for fd in (3, 4, 5)), what="the reader asleep")  # fmt: skip
    assert locks_of(holder.pid)
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    assert not [f for f in host["findings"] if f["rule"] == "file-lock-wait"], host["findings"]
    assert rc == 0
