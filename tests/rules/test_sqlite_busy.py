"""file-lock-wait on SQLite (the real library, through Python's sqlite3): its busy handler sleeps
and retries, so the waiter is in a timer, not in the kernel's lock wait; /proc/locks still shows
who holds SQLite's lock bytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, proc_wchan, vastprobe_json, wait_for

HOLDER = """
import signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("create table if not exists t(x)")
c.execute(sys.argv[2])                # BEGIN EXCLUSIVE or BEGIN IMMEDIATE: the transaction left open
c.execute("insert into t values (1)")
print("holding", flush=True)
signal.pause()                        # stuck elsewhere (asleep on a timer it would wake by itself: no proof)
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
    assert f"keeps retrying a lock on {db} (SQLite's write lock keeps it out)" in f["summary"], f["summary"]
    assert holder.pid in f["pids"] and waiter in f["pids"]
    assert f["severity"] == "error" and rc == 1 and "transaction left open" in f["hint"]
    assert host["verdict"] == "stalled" and any(e["source"] == "proof" for e in f["evidence"])


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


READER_WITH_AN_OPEN_CURSOR = """
import signal, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
cur = con.execute("select x from t")   # half-read: SHARED stays held
next(cur)
print("reading", flush=True)
signal.pause()
"""


def test_a_writer_waiting_for_a_reader_names_the_reader(reap, tmp_path: Path) -> None:
    """A reader keeps a SELECT cursor half-read (SHARED); a writer commits with a long timeout: it takes
    PENDING and waits for SHARED to go. The writer waits, the reader blocks (a precision review found
    them the other way round)."""
    db = tmp_path / "runs.sqlite"
    subprocess.run([sys.executable, "-c", f"import sqlite3; c = sqlite3.connect({str(db)!r}); "
                    "c.execute('create table t(x)'); c.executemany('insert into t values (?)', [(1,), (2,), (3,)]); "
                    "c.commit()"], check=True)  # fmt: skip
    reader = subprocess.Popen([sys.executable, "-c", READER_WITH_AN_OPEN_CURSOR, str(db)], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    reap.append(reader)
    assert reader.stdout is not None and reader.stdout.readline() == "reading\n"
    writer = f"import sqlite3; c = sqlite3.connect({str(db)!r}, timeout=100000); c.execute('insert into t values (4)'); c.commit()"
    job = subprocess.Popen(["bash", "-c", f'{sys.executable} -c "{writer}"; echo done'], start_new_session=True)
    reap.append(job)
    wait_for(lambda: children_of(job.pid) and any("1073741824" in line for line in locks_of(children_of(job.pid)[0]))
             and proc_wchan(children_of(job.pid)[0]) == "hrtimer_nanosleep", what="the writer holding PENDING, asleep")  # fmt: skip
    [waiter] = children_of(job.pid)
    for pid in (reader.pid, job.pid):
        rc, host = vastprobe_json("--pid", str(pid), "--sample", "0.5")
        found = [f for f in host["findings"] if f["rule"] == "file-lock-wait"]
        if pid == reader.pid:
            assert not found, found  # the reader waits on nothing
            continue
        assert len(found) == 1, host["findings"]
        f = found[0]
        assert f"keeps retrying to write {db}: {reader.pid} (python" in f["summary"] and waiter in f["pids"]
        assert reader.pid in f["pids"] and "read transaction open" in f["hint"]
        assert f["severity"] == "error" and rc == 1 and host["verdict"] == "stalled"  # the reader idles: proof


def test_a_lock_on_another_database_keeps_nobody_out(reap, tmp_path: Path) -> None:
    """An app holds main.db in exclusive locking mode for its life and also has cache.db open; a
    reader of cache.db sleeping between polls waits on nothing (a precision review found it blamed)."""
    main, cache = tmp_path / "main.db", tmp_path / "cache.db"
    app = textwrap.dedent(f"""
        import sqlite3, time
        c = sqlite3.connect({str(cache)!r}); c.execute("create table c(x)"); c.commit()
        m = sqlite3.connect({str(main)!r}); m.execute("pragma locking_mode=exclusive")
        m.execute("create table t(x)"); m.execute("insert into t values (1)"); m.commit()
        print(c.execute("select count(*) from c").fetchone()[0], flush=True)
        time.sleep(100000)
    """)
    owner = subprocess.Popen([sys.executable, "-c", app], stdout=subprocess.PIPE, text=True, start_new_session=True)
    reap.append(owner)
    assert owner.stdout is not None and owner.stdout.readline() == "0\n"
    reader = (f"import sqlite3, time; c = sqlite3.connect({str(cache)!r})\n"
              "while True: c.execute('select count(*) from c').fetchone(); time.sleep(100000)")  # fmt: skip
    job = subprocess.Popen([sys.executable, "-c", reader], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid) == "hrtimer_nanosleep", what="the reader asleep")
    assert locks_of(owner.pid)
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    assert not [f for f in host["findings"] if f["rule"] == "file-lock-wait"], host["findings"]
    assert rc == 0


WAL_HOLDER = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("pragma journal_mode=wal")
c.execute("create table if not exists t(x)")
c.execute("BEGIN IMMEDIATE")          # WAL's write lock: byte 120 of the -shm file
c.execute("insert into t values (1)")
print("holding", flush=True)
time.sleep(100000)
"""


def wal_hold(reap: list, db: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", WAL_HOLDER, str(db)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)  # fmt: skip
    reap.append(holder)
    assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
    return holder


def test_a_wal_writer_retrying_an_open_transactions_write_lock_is_named(reap, tmp_path: Path) -> None:
    """WAL mode: every open connection holds the database's SHARED range and the -shm's DMS byte, so
    the writer in its busy handler held a lock, was taken for a reader, and read HEALTHY with no
    finding (found by a helper). It is named now, as a warning: a WAL reader asleep between its
    queries holds the same locks, so nothing proves this one waits."""
    db = tmp_path / "runs.sqlite"
    holder = wal_hold(reap, db)
    writer = f"import sqlite3; c = sqlite3.connect({str(db)!r}, timeout=100000); c.execute('insert into t values (2)')"
    job = subprocess.Popen([sys.executable, "-c", writer], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid) == "hrtimer_nanosleep" and any(
        " 120 120" in line for line in locks_of(holder.pid)), what="the writer in SQLite's busy handler")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    found = [f for f in host["findings"] if f["rule"] == "file-lock-wait"]
    assert found, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    f = found[0]
    assert f"keeps retrying SQLite's WAL write lock on {db}, held by {holder.pid}" in f["summary"], f["summary"]
    assert f["severity"] == "warning" and host["verdict"] == "degraded" and rc == 0
    assert "only reads" in f["hint"] and not any(e["source"] == "proof" for e in f["evidence"])


@pytest.mark.parametrize("holder_state", ["asleep", "stopped"])
def test_a_wal_reader_between_its_queries_beside_an_open_write_is_never_stalled(
    reap, tmp_path: Path, holder_state: str
) -> None:
    """The control: WAL readers never wait for the writer. One asleep between its queries holds the
    same locks as a waiting writer; it may get the warning above, never a stall, whatever the writer
    does: with the writer stopped, the reader read STALLED, exit 1 (found by a helper)."""
    db = tmp_path / "runs.sqlite"
    holder = wal_hold(reap, db)
    if holder_state == "stopped":
        os.kill(holder.pid, signal.SIGSTOP)
        wait_for(lambda: proc_state(holder.pid) == "T", what="the writer stopped")
    reader = (f"import sqlite3, time; c = sqlite3.connect({str(db)!r}, timeout=100000)\n"
              "while True: c.execute('select count(*) from t').fetchall(); time.sleep(5)")  # fmt: skip
    job = subprocess.Popen([sys.executable, "-c", reader], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid) == "hrtimer_nanosleep" and len(locks_of(job.pid)) >= 2,
             what="the reader asleep, its connection open")  # fmt: skip
    assert locks_of(holder.pid)
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5")
    assert host["verdict"] != "stalled" and rc == 0, host["findings"]
    if holder_state == "stopped":  # a writer behind it reads the same: the hint names the holder's state
        f = next(f for f in host["findings"] if f["rule"] == "file-lock-wait")
        assert "which holds the write lock, is stopped: if" in f["hint"], f["hint"]
