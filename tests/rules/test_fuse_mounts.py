"""Two FUSE mounts on the real kernel interface (tests/fuse_server.py), the server of one stopped as
a hung sshfs would be: the reader of that mount is blamed on that mount's server, never on the
other's, and the finding names the mount point. Found from /proc alone, no --log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import descendants, mount_fuse, proc_wchan, vastprobe_json, wait_for


@pytest.fixture
def two_mounts(reap, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, subprocess.Popen, Path]]:
    a, b = tmp_path / "datasets", tmp_path / "checkpoints"
    server_a = mount_fuse(reap, a)
    server_b = mount_fuse(reap, b)
    yield server_a, a, server_b, b
    for server in (server_a, server_b):
        os.kill(server.pid, signal.SIGCONT)
    for m in (a, b):
        subprocess.run(["umount", "-l", str(m)], check=False)


@pytest.mark.parametrize("sample", ["1", "0"])
def test_a_reader_of_one_mount_is_blamed_on_that_mounts_server(reap, two_mounts, sample: str) -> None:
    server_a, a, server_b, b = two_mounts
    os.kill(server_a.pid, signal.SIGSTOP)
    job = subprocess.Popen(["bash", "-c", f"cat {a}/shard-00001.tar > /dev/null; echo done"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: any(proc_wchan(d) == "request_wait_answer" for d in descendants(job.pid)),
             what="cat waiting on the mount")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
    found = [f for f in host["findings"] if f["rule"] == "fuse-no-answer"]
    assert found, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    f = found[0]
    assert server_a.pid in f["pids"] and server_b.pid not in f["pids"], f["pids"]
    assert str(a) in f["summary"] and str(b) not in f["summary"] + (f["hint"] or "")
    assert f"kill -CONT {server_a.pid}" in f["hint"] and f"fusermount -uz {a}" in f["hint"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1  # stopped: a dead end


def test_a_reader_of_the_other_mount_is_blamed_on_its_own_server(reap, two_mounts) -> None:
    server_a, _a, server_b, b = two_mounts
    os.kill(server_a.pid, signal.SIGSTOP)
    job = subprocess.Popen(["bash", "-c", f"cat {b}/step-1000.pt > /dev/null; echo done"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: any(proc_wchan(d) == "request_wait_answer" for d in descendants(job.pid)),
             what="cat waiting on the mount")  # fmt: skip
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    f = next(f for f in host["findings"] if f["rule"] == "fuse-no-answer")
    assert server_b.pid in f["pids"] and server_a.pid not in f["pids"] and str(b) in f["summary"], f
    # its own server answers nothing either (the test server never does): back waiting for requests
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1


def test_a_loader_given_its_shard_as_an_options_value_is_blamed_on_that_mounts_server(reap, two_mounts) -> None:
    """`--data=/mnt/ds/x`: the path a waiter in open() is on is an option's value, not an argument
    of its own. Both servers answer nothing; each is back waiting for the next request (a proof)."""
    server_a, _a, server_b, b = two_mounts
    loader = "import sys\nopen(sys.argv[1].partition('=')[2]).read()\n"
    job = subprocess.Popen([sys.executable, "-c", loader, f"--data={b}/train-00001.arrow"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid) == "request_wait_answer", what="the loader waiting on the mount")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    f = next(f for f in host["findings"] if f["rule"] == "fuse-no-answer")
    assert server_b.pid in f["pids"] and server_a.pid not in f["pids"] and str(b) in f["summary"], f
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1
