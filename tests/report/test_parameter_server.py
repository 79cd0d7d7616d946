"""A single-threaded parameter server on A reads each worker's gradient in turn; workers on B and C.
While it reads C's connection, B's gradient sits unread and it does nothing: across hosts that was the
"not reading" proof, and a slow worker on C made A and B STALLED (found by a helper). The server's wait
goes on to C: a straggler there holds nobody, a stopped worker there holds them all."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import proc_state, proc_wchan, wait_for
from tests.paths import TESTS
from tests.report import test_joins
from tests.report.test_joins import Fleet
from tests.sshd import Sshd, free_ports

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")

LAB = TESTS / "param_server_lab.py"
fleet = test_joins.fleet  # the fixture: sshd hosts in PID namespaces


def lab_pid(h: Sshd) -> int | None:
    for p in psutil.Process(h.proc.pid).children(recursive=True):
        try:
            if any(a.endswith("param_server_lab.py") for a in p.cmdline()):
                return p.pid
        except psutil.NoSuchProcess:
            continue
    return None


def _accepted(port: int) -> list[int]:
    """The bytes unread in each established connection accepted on `port`."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return [int(f[4].split(":")[1], 16) for f in rows if int(f[1].split(":")[1], 16) == port and f[3] == "01"]


def connections_on(port: int) -> int:
    return len(_accepted(port))


def unread_on(port: int) -> bool:
    return any(_accepted(port))


@pytest.mark.parametrize("fault", ["slowsleep", "stop"])
def test_a_parameter_server_waiting_on_one_worker_is_judged_by_that_worker(fleet: Fleet, fault: str) -> None:
    port = free_ports(1)[0]
    a = fleet.host(f"{sys.executable} {LAB} server {port} 2")
    # C connects first, so the server reads C's gradient first, and B's waits unread meanwhile
    c = fleet.host(f"{sys.executable} {LAB} worker {port} {fault} 20")
    wait_for(lambda: connections_on(port) >= 1, what="C connected")
    b = fleet.host(f"{sys.executable} {LAB} worker {port}")
    wait_for(lambda: all(lab_pid(h) for h in (a, b, c)), what="the server and its workers")
    server, worker = lab_pid(a), lab_pid(c)
    assert server is not None and worker is not None
    if fault == "stop":
        wait_for(lambda: proc_state(worker) == "T", timeout=30, what="C's worker stopped")
    else:  # the server reads C's connection, B's gradient unread: as it is most of each 3 s step
        wait_for(lambda: proc_wchan(server) == "wait_woken" and proc_wchan(worker) == "hrtimer_nanosleep",
                 what="the server reading C while C sleeps")  # fmt: skip
        wait_for(lambda: unread_on(port), what="B's gradient unread")  # what the "proof" was made of
    rc, got = fleet.sweep(a.target, b.target, c.target)
    said = {
        t: (h["verdict"], [(f["rule"], f["severity"], f["summary"][:160]) for f in h["findings"]])
        for t, h in got.items()
    }
    if fault == "stop":
        assert rc == 1 and all(v == "stalled" for v, _f in said.values()), said
    else:
        assert rc == 0 and all(v != "stalled" for v, _f in said.values()), said
        assert not any("not reading" in s for _v, fs in said.values() for _r, _sev, s in fs), said
