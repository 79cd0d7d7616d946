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
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import descendants, proc_state, proc_wchan, vastprobe_json, wait_for

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
    as_postgres(
        f"{bin_}/pg_ctl",
        "-D",
        str(d / "data"),
        "-l",
        str(d / "log"),
        "-w",
        "-o",
        f"-k {d} -c listen_addresses='' -c max_prepared_transactions=4 -c dynamic_shared_memory_type=mmap",
        "start",
    )  # fmt: skip  (mmap: no segment left in /dev/shm by the immediate stop, as pg_cluster says)
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


@pytest.mark.parametrize("step", ["sleeps", "computes"])
def test_a_transaction_whose_client_is_between_steps_is_no_proof(reap, cluster: Path, step: str) -> None:
    """The session idle in a transaction while its client works on its next step (a computation, or a
    sleep between steps: psql's `\\!` runs it and waits): the transaction ends when the step does. It was
    taken for one left open, the proof, and the waiter read STALLED, exit 1 (found by a helper, real
    PostgreSQL and a psycopg client). The client going on is no proof: a warning, DEGRADED, exit 0."""
    command = "sleep 600" if step == "sleeps" else "sh -c 'while :; do :; done'"
    holder = subprocess.Popen(["bash", "-c", f"printf '%s\\n' 'begin;' 'update t set v = 1 where id = 1;' "
                               f"{shlex.quote(chr(92) + '! ' + command)} | psql -h {cluster} -U postgres -q"],
                              start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(holder)
    wait_for(
        lambda: any(t.endswith("idle in transaction") for t in titles(cluster).values()), what="the open transaction"
    )
    client = next(d for d in descendants(holder.pid) if argv0(d).endswith("psql"))
    wait_for(lambda: bool(descendants(client)), what="the client's step")
    job = subprocess.Popen(["bash", "-c", f"psql -h {cluster} -U postgres -qc 'update t set v = 2 where id = 1;'"],
                           start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(job)
    wait_for(lambda: any(t.endswith(" waiting") for t in titles(cluster).values()), what="the update waiting")
    try:
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
        f = next((f for f in host["findings"] if f["rule"] == "db-lock-wait"), None)
        assert f is not None, [(g["rule"], g["severity"], g["summary"]) for g in host["findings"]]
        assert f["severity"] == "warning" and not [e for e in f["evidence"] if e["source"] == "proof"], f
        assert host["verdict"] == "degraded" and rc == 0, host["headline"]
    finally:
        for pid in descendants(client):  # the step outlives psql's session
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        subprocess.run(["psql", "-h", str(cluster), "-U", "postgres", "-qc",
                        "select pg_terminate_backend(pid) from pg_stat_activity where state like 'idle in%'"],
                       capture_output=True, timeout=30)  # fmt: skip


def test_a_session_level_advisory_lock_held_by_an_idle_session_is_named(reap, cluster: Path) -> None:
    """A migration tool's `pg_advisory_lock(42)`, held by a session now idle outside any transaction,
    and a job waiting for the same lock: no finding at all, HEALTHY (found by a helper): only sessions
    in a transaction or running a statement were taken for holders. The database's one idle session is
    the holder, and idle over the window, the proof. An earlier test's session left idle would make two
    (it failed once under load, with no finding): every other client session is ended first."""
    subprocess.run(["psql", "-h", str(cluster), "-U", "postgres", "-qc",
                    "select pg_terminate_backend(pid) from pg_stat_activity where pid <> pg_backend_pid() "
                    "and backend_type = 'client backend'"], capture_output=True, timeout=30)  # fmt: skip
    holder = subprocess.Popen(["bash", "-c", f"(echo 'select pg_advisory_lock(42);'; sleep 600) | "
                               f"psql -h {cluster} -U postgres -q"], start_new_session=True,
                              stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(holder)
    locked = ["psql", "-h", str(cluster), "-U", "postgres", "-Atc",
              "select count(*) from pg_locks where locktype = 'advisory' and granted"]  # fmt: skip
    wait_for(lambda: subprocess.run(locked, capture_output=True, text=True).stdout.strip() == "1", what="the lock held")
    wait_for(lambda: any(t.endswith(" idle") for t in titles(cluster).values()), what="the holder idle")
    job = subprocess.Popen(["psql", "-h", str(cluster), "-U", "postgres", "-qc", "select pg_advisory_lock(42);"],
                           start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(job)
    wait_for(lambda: any(t.endswith(" waiting") for t in titles(cluster).values()), what="the job waiting")
    idle = next(pid for pid, t in titles(cluster).items() if t.endswith(" idle"))
    try:
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
        f = next((f for f in host["findings"] if f["rule"] == "db-lock-wait"), None)
        assert f is not None, [(g["rule"], g["severity"], g["summary"]) for g in host["findings"]]
        assert f"likely held by backend {idle}" in f["summary"] and "idle, outside a transaction" in f["summary"]
        assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, f["summary"]
    finally:
        subprocess.run(["psql", "-h", str(cluster), "-U", "postgres", "-qc",
                        "select pg_terminate_backend(pid) from pg_stat_activity where pid <> pg_backend_pid() "
                        "and backend_type = 'client backend'"], capture_output=True, timeout=30)  # fmt: skip


@contextlib.contextmanager
def stopped(pid: int, what: str) -> Iterator[None]:
    """`pid` SIGSTOPped (and seen stopped) for the block, then resumed."""
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: proc_state(pid) == "T", what=f"{what} stopped")
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def end_client_sessions(cluster: Path) -> None:
    subprocess.run(["psql", "-h", str(cluster), "-U", "postgres", "-qc",
                    "select pg_terminate_backend(pid) from pg_stat_activity where pid <> pg_backend_pid() "
                    "and backend_type = 'client backend'"], capture_output=True, timeout=30)  # fmt: skip


def test_a_lock_whose_holder_is_stopped_mid_statement_is_a_stall(reap, cluster: Path) -> None:
    """A session takes a table lock and runs a long statement; its backend is SIGSTOPped. A job's query
    of the table waits for the lock: it read DEGRADED, exit 0, "likely held by backend N, running a
    statement" with that backend stopped throughout (found by a helper). Every session that could hold
    it is stopped: whichever holds it cannot finish. STALLED, exit 1."""
    end_client_sessions(cluster)
    holder = subprocess.Popen(["psql", "-h", str(cluster), "-U", "postgres", "-qc",
                               "begin; lock table t in access exclusive mode; "
                               "select count(*) from generate_series(1, 3000000000); commit;"],
                              start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(holder)
    wait_for(lambda: any(t.endswith(" SELECT") for t in titles(cluster).values()), what="the holder's statement")
    backend = next(pid for pid, t in titles(cluster).items() if t.endswith(" SELECT"))
    try:
        with stopped(backend, "the holder's backend"):
            job = subprocess.Popen(["psql", "-h", str(cluster), "-U", "postgres", "-qc", "select * from t;"],
                                   start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
            reap.append(job)
            wait_for(lambda: any(t.endswith(" waiting") for t in titles(cluster).values()), what="the job waiting")
            rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
            f = next((f for f in host["findings"] if f["rule"] == "db-lock-wait"), None)
            assert f is not None, [(g["rule"], g["severity"], g["summary"]) for g in host["findings"]]
            assert f"likely held by backend {backend}" in f["summary"], f["summary"]
            proof = [e["detail"] for e in f["evidence"] if e["source"] == "proof"]
            assert proof and "is stopped over" in proof[0], f["evidence"]
            assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, f["summary"]
    finally:
        end_client_sessions(cluster)


def test_a_lock_a_prepared_transaction_holds_is_a_dead_end(reap, cluster: Path) -> None:
    """`PREPARE TRANSACTION` keeps the row lock with no session, until COMMIT or ROLLBACK PREPARED; a
    job's update of the row waits for ever. It read HEALTHY, exit 0, no db-lock-wait finding (found by
    a helper): no session of the database could hold it, so the holder has no process. STALLED, exit 1;
    with one sample, a note."""
    end_client_sessions(cluster)
    prepare = "begin; update t set v = 5 where id = 1; prepare transaction 'vastprobe_test';"
    subprocess.run(["psql", "-h", str(cluster), "-U", "postgres", "-qc", prepare], check=True, capture_output=True,
                   timeout=30)  # fmt: skip
    try:
        job = subprocess.Popen(["psql", "-h", str(cluster), "-U", "postgres", "-qc", "update t set v = 6 where id = 1;"],
                               start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
        reap.append(job)
        # a lock waiter checks for a deadlock once, at deadlock_timeout (1 s): then it only waits
        waited = ["psql", "-h", str(cluster), "-U", "postgres", "-Atc", "select count(*) from pg_stat_activity "
                  "where wait_event_type = 'Lock' and now() - query_start > interval '2 s'"]  # fmt: skip
        wait_for(lambda: subprocess.run(waited, capture_output=True, text=True).stdout.strip() == "1",
                 what="the job waiting past its deadlock check")  # fmt: skip
        for sample in ("1", "0"):
            rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
            f = next((f for f in host["findings"] if f["rule"] == "db-lock-wait"), None)
            assert f is not None, [(g["rule"], g["severity"], g["summary"]) for g in host["findings"]]
            assert "UPDATE waiting" in f["summary"] and "pg_prepared_xacts" in f["hint"], f
            if sample == "1":
                assert any("prepared transaction" in e["detail"] for e in f["evidence"]), f["evidence"]
                assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, f["summary"]
            else:
                assert f["severity"] == "info" and host["verdict"] == "healthy" and rc == 0, f["summary"]
    finally:
        subprocess.run(["psql", "-h", str(cluster), "-U", "postgres", "-qc", "rollback prepared 'vastprobe_test';"],
                       capture_output=True, timeout=30)  # fmt: skip
        end_client_sessions(cluster)


def test_a_client_queued_at_a_stopped_postmaster_is_stalled(reap, cluster: Path) -> None:
    """psql connecting to a SIGSTOPped postmaster sits in its Unix listener's accept queue: it read
    HEALTHY, exit 0, no finding (found by a helper; the same over TCP read STALLED). STALLED, exit 1."""
    postmaster = int((cluster / "data" / "postmaster.pid").read_text().split()[0])
    with stopped(postmaster, "the postmaster"):
        job = subprocess.Popen(["psql", "-h", str(cluster), "-U", "postgres", "-qc", "select 1;"],
                               start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
        reap.append(job)
        wait_for(lambda: proc_wchan(job.pid).startswith(("poll_schedule", "do_sys_poll", "unix_stream")),
                 what="psql waiting")  # fmt: skip
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
        f = next((f for f in host["findings"] if f["rule"] == "socket-peer-wait"), None)
        assert f is not None, [(g["rule"], g["severity"], g["summary"]) for g in host["findings"]]
        assert f"{postmaster} (postgres)" in f["summary"], f["summary"]
        assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, f["summary"]


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


@pytest.mark.parametrize("script_waits_on", ["the-job", "something-else"])
def test_a_holder_fed_by_the_jobs_own_script_is_named(
    reap, cluster: Path, tmp_path: Path, script_waits_on: str
) -> None:
    """A script feeds its holding session through a process substitution (`exec 3> >(psql)`, the bash
    idiom for a session kept open), then runs the job, which inherits fd 3. The holder's psql reads
    what the script writes, and the script waits: on the job (a true ring through the lock), or on
    something else (a foreground `sleep`, the job started with setsid). The chain from the job met a cycle it was not part of, or a
    parent waiting for any child as if for the one on the chain, and was read as a deadlock no rule
    reports: HEALTHY, exit 0, no finding (found by a helper)."""
    jobpid = tmp_path / "job.pid"
    psql = f"psql -h {cluster} -U postgres"
    wait_job = (
        "wait $!" if script_waits_on == "the-job" else "sleep 600; echo done"
    )  # not a last command, which bash execs
    script = (
        f"exec 3> >({psql} -q >/dev/null 2>&1)\n"
        "echo 'begin; update t set v = 1 where id = 1;' >&3\n"
        f"until {psql} -Atc \"select 1 from pg_stat_activity where state = 'idle in transaction'\" 3>&- | grep -q 1;"
        " do sleep 0.1; done\n"
        # waiting on something else, the script starts the job as a session of its own (setsid): not a
        # child it waits for, so the cycle ran through the holder's psql alone
        f"{'' if script_waits_on == 'the-job' else 'setsid '}{psql} -qc 'update t set v = 2 where id = 1;' >/dev/null &\n"
        f"echo $! > {jobpid}\n"
        f"{wait_job}\n"
    )
    session = subprocess.Popen(["bash", "-c", script], start_new_session=True, stdout=subprocess.DEVNULL)
    reap.append(session)
    try:
        wait_for(lambda: any(t.endswith(" waiting") for t in titles(cluster).values()), what="the update waiting")
        wait_for(lambda: jobpid.exists() and jobpid.read_text().strip().isdigit(), what="the job's pid")
        job = int(jobpid.read_text())
        idle = next(pid for pid, t in titles(cluster).items() if t.endswith("idle in transaction"))
        rc, host = vastprobe_json("--pid", str(job), "--sample", "1")
        found = [f for f in host["findings"] if f["rule"] == "db-lock-wait"]
        assert found, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        assert f"likely held by backend {idle}" in found[0]["summary"], found[0]["summary"]
        assert found[0]["severity"] == "error" and host["verdict"] == "stalled" and rc == 1
    finally:
        subprocess.run(["psql", "-h", str(cluster), "-U", "postgres", "-qc",
                        "select pg_terminate_backend(pid) from pg_stat_activity where state like 'idle in%'"],
                       capture_output=True, timeout=30)  # fmt: skip
