"""The seed case as a vast.ai container runs it, for real: a PID namespace (with its own /proc) in
a 64 MiB memory cgroup. PID 1 is `entrypoint.sh`, which starts an sshd-like daemon (it forks,
starts a session of its own and is re-parented to PID 1, as OpenSSH's sshd does) and then runs
`benchmark.sh`. That script starts `cuzk-daemon` in the background, runs `cuzk-bench`, which the
kernel OOM-kills at the limit, and then `wait`s forever on the daemon, idle in accept().

The programs are Python under the names the operator saw (a symlink named `cuzk-bench` makes
the kernel name the OOM victim `cuzk-bench`), and the scripts are executed, not passed to
`bash`, so their `comm` is the script's name as in a real container.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cgroup_lab import MemoryCgroup
from tests.helpers import children_of, proc_wchan, wait_for

LIMIT = 64 * 1024 * 1024

SSHD = """import os, socket
if os.fork():
    os._exit(0)
os.setsid()
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
s.accept()
"""
DAEMON = 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print("listening", flush=True); s.accept()'
BENCH = 'print("allocating", flush=True); b = bytearray(200 * 1024 * 1024); print(len(b))'


@dataclass
class SeedContainer:
    root: Path  # the folder holding the scripts and bench.log
    entry: int  # host PIDs
    bench: int
    daemon: int
    sshd: int
    cgroup: MemoryCgroup
    proc: subprocess.Popen

    @property
    def log(self) -> Path:
        return self.root / "bench.log"

    def stop(self) -> None:
        self.cgroup.remove()  # kills everything inside
        self.proc.wait(timeout=10)


def start_seed(root: Path) -> SeedContainer:
    """Start the container and wait until the story has happened: the bench client OOM-killed,
    benchmark.sh waiting, the daemon idle in accept(), sshd in its own session."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    root.mkdir(parents=True, exist_ok=True)
    for name in ("cuzk-bench", "cuzk-daemon", "sshd"):
        (root / name).symlink_to(sys.executable)
    (root / "sshd.py").write_text(SSHD)
    bench = root / "benchmark.sh"
    bench.write_text(
        "#!/bin/bash\n"
        f"cd {root}\n"
        f"./cuzk-daemon -c '{DAEMON}' &\n"
        f"./cuzk-bench -c '{BENCH}'\n"
        'echo "cuzk-bench exited $?"\n'
        "wait\n"
    )
    entry = root / "entrypoint.sh"
    entry.write_text(f"#!/bin/bash\ncd {root}\n./sshd sshd.py\n./benchmark.sh > bench.log 2>&1\necho done\n")
    bench.chmod(0o755)
    entry.chmod(0o755)
    cg = MemoryCgroup(LIMIT)
    container = f"echo $$ > {cg.procs_file}; exec unshare --pid --fork --mount-proc {entry}"
    p = subprocess.Popen(["sh", "-c", container], start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: children_of(p.pid) != [], what="entrypoint started")
        init = children_of(p.pid)[0]  # unshare's child: the container's PID 1
        wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="cuzk-bench OOM-killed")

        def kids(pid: int, comm: str) -> list[int]:
            return [c for c in children_of(pid) if _comm(c) == comm]

        wait_for(lambda: kids(init, "benchmark.sh") != [], what="benchmark.sh started")
        bench_pid = kids(init, "benchmark.sh")[0]
        wait_for(lambda: proc_wchan(bench_pid).startswith(("do_wait", "sigsuspend")), what="benchmark.sh waiting")
        wait_for(lambda: kids(bench_pid, "cuzk-daemon") != [], what="cuzk-daemon started")
        daemon = kids(bench_pid, "cuzk-daemon")[0]
        wait_for(lambda: proc_wchan(daemon) == "inet_csk_accept", what="cuzk-daemon idle in accept()")
        wait_for(lambda: kids(init, "sshd") != [], what="sshd re-parented to PID 1")
        sshd = kids(init, "sshd")[0]
        wait_for(lambda: proc_wchan(sshd) == "inet_csk_accept", what="sshd in accept()")
        wait_for(lambda: "cuzk-bench exited 137" in (root / "bench.log").read_text(), what="the exit in the log")
    except BaseException:
        cg.remove()
        p.wait(timeout=10)
        raise
    return SeedContainer(root, init, bench_pid, daemon, sshd, cg, p)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def inside(seed: SeedContainer) -> list[str]:
    """The command prefix that runs a program inside the container's PID and mount namespaces."""
    if shutil.which("nsenter") is None:
        pytest.skip("needs nsenter (util-linux)")
    return ["nsenter", f"--target={seed.entry}", "--pid", "--mount", "--"]


@pytest.fixture
def seed_container(tmp_path: Path, oom_noise):
    """The seed container while other processes on the host are OOM-killed (oom_noise)."""
    s = start_seed(tmp_path / "seed")
    yield s
    s.stop()


def environ_without_colour() -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1"}
