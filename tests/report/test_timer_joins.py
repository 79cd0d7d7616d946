"""Asleep on a timer is no proof across hosts either (docs/evidence.md): a slow but working server on
B, whose handler sleeps (here 5 s) while clients on A wait in its accept queue, did nothing over B's window.
Read on one host that sees both ends it is a warning at most; across two hosts the join took the full
accept queue and the stillness for the listener's proof, and every host read STALLED, exit 1 (found by
a helper: four hosts, three of three sweeps)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.helpers import proc_wchan, wait_for
from tests.report.test_joins import Fleet, fleet  # noqa: F401  (the fixture)
from tests.rules.test_socket_peer_wait import SLOW_SERVER
from tests.sshd import free_ports


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("curl") is None, reason="needs unshare and curl")
def test_clients_of_a_slow_server_on_another_host_are_not_stalled(fleet: Fleet, tmp_path) -> None:  # noqa: F811
    port = free_ports(1)[0]
    server = tmp_path / "slow.py"
    server.write_text(SLOW_SERVER.replace('("127.0.0.1", 0)', f'("127.0.0.1", {port})').replace("sleep(2)", "sleep(5)"))
    b = fleet.host(f"{sys.executable} {server}")
    up = ["curl", "-s", "-m", "10", f"http://127.0.0.1:{port}/"]
    wait_for(lambda: subprocess.run(up, capture_output=True).returncode == 0, timeout=30, what="the server answering")
    loop = f"while true; do curl -s -m 60 -o /dev/null http://127.0.0.1:{port}/ && echo >> {tmp_path}/done; done"
    a = fleet.host(f"sh -c '({loop}) & ({loop}) & wait'")
    wait_for(lambda: (tmp_path / "done").exists(), timeout=30, what="a request served")
    py = fleet.find(b, "python3") or fleet.find(b, "python")
    assert py is not None
    wait_for(lambda: proc_wchan(py) == "hrtimer_nanosleep", what="the server in a handler")
    rc, got = fleet.sweep(a.target, b.target)
    for h in (a, b):
        host = got[h.target]
        bad = [f for f in host["findings"] if f["severity"] in ("error", "critical")]
        assert not bad and host["verdict"] in ("healthy", "degraded"), (h.target, host["findings"])
    assert rc == 0
