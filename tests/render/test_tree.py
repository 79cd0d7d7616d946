"""Chains through resources drawn on real processes: a lock's holder and a socket's peer are not
the waiter's children, so they are named on a labelled line under the waiter ("waits for lock on
PATH held by", "connected to ADDR (TCP) held by") and drawn in their own place with their parent;
a cycle of locks is drawn with every member marked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import VFORK_C, child_waiting, children_of, compiled_c, crossed_flocks, proc_wchan, wait_for


def table(*pids: int) -> list[str]:
    args = [a for p in pids for a in ("--pid", str(p))]
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", *args, "--sample", "0.3", "--format",
                        "table"], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    return r.stdout.splitlines()


def test_lock_holder_is_drawn_in_its_own_place(reap, tmp_path: Path) -> None:
    lock = tmp_path / "job.lock"
    holder = subprocess.Popen(["flock", str(lock), "sleep", "1000"], start_new_session=True)
    reap.append(holder)
    wait_for(lambda: children_of(holder.pid) != [], what="holder running")
    cron = subprocess.Popen(["bash", "-c", f"flock {lock} echo ran; echo done"], start_new_session=True)
    reap.append(cron)
    wait_for(lambda: child_waiting(cron.pid, "flock", "locks_lock") is not None, what="waiter blocked")
    waiter = child_waiting(cron.pid, "flock", "locks_lock")
    lines = table(cron.pid)
    i = next(n for n, line in enumerate(lines) if line.startswith(f"     {cron.pid} bash  S do_wait"))
    assert lines[i + 1].startswith(f"     └─ waits for child → {waiter} flock  S locks_lock")
    assert lines[i + 2] == f"        └─ waits for lock on {lock} held by {holder.pid} flock (below)"
    assert re.match(rf"     {holder.pid} flock  ◀ blocker \(idle\)  S do_wait .*\[parent \d+ ", lines[i + 3])
    assert lines[i + 4].startswith("     └─ waits for child → ") and " sleep  S " in lines[i + 4]


def test_crossed_locks_are_drawn_as_a_cycle(reap, tmp_path: Path) -> None:
    one, two = crossed_flocks(reap, tmp_path)
    a, b = tmp_path / "a.lock", tmp_path / "b.lock"
    text = "\n".join(table(one.pid, two.pid))
    assert "critical VP115 deadlock" in text.splitlines()[3]  # the cycle is the worst: it comes first
    assert text.count("◀ blocker (cycle)") == 4  # both flock parents and both blocked flocks
    assert (
        f"waits for lock on {b} held by {two.pid} flock" in text
        and f"waits for lock on {a} held by {one.pid} flock" in text
    )


def test_a_socket_peer_is_named_with_its_connection(reap, tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    server = ("import socket, sys, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
              f"open({str(port_file)!r}, 'w').write(str(s.getsockname()[1]))\nc, _ = s.accept()\ntime.sleep(1000)\n")  # fmt: skip
    srv = subprocess.Popen([sys.executable, "-c", server], start_new_session=True)
    reap.append(srv)
    wait_for(lambda: port_file.exists() and port_file.read_text() != "", what="server listening")
    port = int(port_file.read_text())
    client = f"import socket; s = socket.create_connection(('127.0.0.1', {port})); s.sendall(b'GET'); s.recv(1)"
    job = subprocess.Popen(["bash", "-c", f'{sys.executable} -c "{client}"; echo done'], start_new_session=True)
    reap.append(job)
    wait_for(lambda: any(proc_wchan(k) == "wait_woken" for k in children_of(job.pid)), what="client in recv")
    lines = table(job.pid)
    i = next(n for n, line in enumerate(lines) if line.startswith(f"     {job.pid} bash  S do_wait"))
    assert lines[i + 2].startswith(f"        └─ connected to 127.0.0.1:{port} (TCP) held by {srv.pid} ")
    assert lines[i + 2].endswith(" (below)")
    assert lines[i + 3].startswith(f"     {srv.pid} ") and "◀ blocker (idle)" in lines[i + 3]


def test_a_d_state_chain_is_drawn_like_a_stopped_one(reap, tmp_path: Path) -> None:
    """A vfork() parent sleeps uninterruptibly until its child execs or exits: a real D state."""
    exe = compiled_c(tmp_path, "vforker", VFORK_C)
    job = subprocess.Popen(["bash", "-c", f"{exe}; echo done"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: any(Path(f"/proc/{k}/stat").read_text().split(") ")[1][0] == "D" for k in children_of(job.pid)),
             what="vforker in D")  # fmt: skip
    vforker = children_of(job.pid)[0]
    lines = table(job.pid)
    assert "waits on it" in lines[0] and "uninterruptible" in lines[0]
    i = next(n for n, line in enumerate(lines) if line.startswith(f"     {job.pid} bash  S do_wait"))
    assert lines[i + 1].startswith(f"     └─ waits for child → {vforker} vforker  ◀ blocker (uninterruptible)  D ")


def test_only_the_stopped_blocker_is_marked_stopped(reap) -> None:
    """`yes | bash -c 'cat'`, cat stopped: the pipe's reader bash (in S, waiting for cat) and cat are
    both blockers of the writer's chain; bash was marked "blocker (stopped)" too (found by a helper)."""
    job = subprocess.Popen(["sh", "-c", "yes | bash -c 'cat > /dev/null; true'"], start_new_session=True)
    reap.append(job)

    def cat() -> int | None:
        for b in children_of(job.pid):
            for k in children_of(b):
                if Path(f"/proc/{k}/comm").read_text().strip() == "cat":
                    return k
        return None

    wait_for(lambda: cat() is not None, what="cat started")
    c = cat()
    assert c is not None
    os.kill(c, 19)  # SIGSTOP
    wait_for(lambda: proc_wchan(c) == "do_signal_stop", what="cat stopped")
    lines = table(job.pid)
    marked = [line for line in lines if "◀ blocker" in line]
    assert any(f"{c} cat  ◀ blocker (stopped)" in line for line in marked), lines
    assert not [line for line in marked if "(stopped)" in line and " bash " in line], marked
    assert "STALLED" in lines[0], lines[0]  # a stopped process the job waits on: the stall it is
