"""A private PostgreSQL cluster for the tests: the Debian server binaries, `initdb` in a fresh
directory under /tmp owned by the `postgres` user (run through `runuser` when the tests run as
root), listening on a Unix socket in that directory only (no TCP), stopped and removed at the end.

`start()` returns the cluster, or the reason it cannot run here (for `pytest.skip`)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

SECRET_USER = "vp_secret"
SECRET_PASSWORD = "hunter2-Zq9-secret"  # the test role with a password: never echoed by vastprobe


def _bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        d = Path(os.path.realpath(found)).parent
        if (d / "initdb").exists() and (d / "postgres").exists():
            return d
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name or 0))
    for d in reversed(dirs):
        if (Path(d) / "initdb").exists():
            return Path(d)
    return None


@dataclass
class Cluster:
    dir: Path
    bindir: Path
    as_user: list[str]

    @property
    def socket_dir(self) -> str:
        return str(self.dir)

    def url(self, db: str = "vastprobe", user: str = "postgres", password: str | None = None) -> str:
        auth = quote(user) + (f":{quote(password, safe='')}" if password else "")
        return f"postgresql://{auth}@/{db}?host={quote(self.socket_dir, safe='')}"

    def connect(self, db: str = "postgres"):  # type: ignore[no-untyped-def]
        import psycopg

        return psycopg.connect(host=self.socket_dir, user="postgres", dbname=db, autocommit=True)

    def create_database(self, name: str) -> str:
        with self.connect() as con:
            con.execute(f'DROP DATABASE IF EXISTS "{name}"')
            con.execute(f'CREATE DATABASE "{name}"')
            con.execute(f'GRANT ALL ON DATABASE "{name}" TO {SECRET_USER}')
        with self.connect(name) as con:
            con.execute(f"GRANT CREATE ON SCHEMA public TO {SECRET_USER}")
        return name

    def stop(self) -> None:
        subprocess.run([*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate",
                        "-w", "stop"], capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)


def start() -> Cluster | str:
    """A running cluster, or why there cannot be one here."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install '.[test]')"
    bindir = _bindir()
    if bindir is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl, postgres; Debian package postgresql)"
    as_user: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root without runuser (util-linux) to start the server as postgres"
        as_user = ["runuser", "-u", "postgres", "--"]
    d = Path(tempfile.mkdtemp(prefix="vp-pg-", dir="/tmp"))  # short: a socket path has ~100 bytes
    if owner is not None:
        os.chown(d, owner.pw_uid, owner.pw_gid)
    os.chmod(d, 0o700)
    data = d / "data"

    def run(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*as_user, *cmd], capture_output=True, text=True, timeout=120, cwd=d)

    r = run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C",
            "--no-sync")  # fmt: skip
    if r.returncode != 0:
        shutil.rmtree(d, ignore_errors=True)
        return f"initdb failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
    hba = f"local all {SECRET_USER} scram-sha-256\nlocal all all trust\n"
    r = run("sh", "-c", f"printf '%s' '{hba}' > {data}/pg_hba.conf")
    options = (f"-c listen_addresses='' -k {d} -c fsync=off -c synchronous_commit=off -c full_page_writes=off "
               "-c max_connections=80 -c shared_buffers=32MB -c dynamic_shared_memory_type=mmap")  # fmt: skip
    # mmap: its dynamic shared memory in the data directory, removed with it; in /dev/shm (posix), a stop in
    # immediate mode or a SIGKILL left `PostgreSQL.N` segments behind (121 of them, 64 MiB, on this host)
    r = run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(d / "server.log"), "-w", "-t", "60", "-o", options,
            "start")  # fmt: skip
    if r.returncode != 0:
        log = (
            (d / "server.log").read_text(errors="replace").strip().splitlines()[-3:]
            if (d / "server.log").exists()
            else []
        )
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(d, ignore_errors=True)
        return f"the PostgreSQL server did not start: {log or r.stderr.strip()}"
    cluster = Cluster(d, bindir, as_user)
    try:
        with cluster.connect() as con:
            con.execute(f"CREATE ROLE {SECRET_USER} LOGIN PASSWORD '{SECRET_PASSWORD}'")
    except Exception as exc:
        with contextlib.suppress(Exception):
            cluster.stop()
        return f"the PostgreSQL server did not answer: {exc}"
    return cluster
