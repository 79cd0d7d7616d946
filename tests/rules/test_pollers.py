"""An event loop waits on the fds it watches, not on every fd it holds: for epoll, the interest list
in /proc/PID/fdinfo (`tfd:` lines) says which. A server that watches one pipe while it also holds a
pipe from a process that is stopped (an inherited end it never reads) is not waiting on that
stopped process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import proc_state, proc_wchan, vastprobe_json, wait_for

LOOP = textwrap.dedent("""
    import os, selectors, sys, time
    watched_r, watched_w = os.pipe()
    held_r, held_w = os.pipe()
    if os.fork() == 0:                     # the watched pipe's writer: idle, alive
        os.close(watched_r); os.close(held_r); os.close(held_w)
        time.sleep(3600); os._exit(0)
    if os.fork() == 0:                     # the held pipe's writer, orphaned (outside --pid's scope)
        if os.fork() == 0:
            os.close(watched_r); os.close(watched_w); os.close(held_r)
            with open(sys.argv[1] + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(sys.argv[1] + ".tmp", sys.argv[1])
            time.sleep(3600)
        os._exit(0)
    os.wait()
    os.close(watched_w); os.close(held_w)
    sel = selectors.EpollSelector()
    sel.register(watched_r, selectors.EVENT_READ)   # only this one: held_r is never read
    while True:
        sel.select()
""")


def test_an_epoll_loop_waits_on_what_it_watches_not_on_every_fd_it_holds(reap, tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    pidfile = tmp_path / "orphan.pid"
    # nothing else to poll: stdio from /dev/null
    loop = subprocess.Popen([sys.executable, str(script), str(pidfile)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    reap.append(loop)
    wait_for(pidfile.exists, what="the orphan started")
    orphan = int(pidfile.read_text())
    os.kill(orphan, signal.SIGSTOP)
    try:
        wait_for(lambda: proc_state(orphan) == "T" and proc_wchan(loop.pid).endswith("epoll_wait"),
                 what="the loop waiting, the orphan stopped")  # fmt: skip
        held = Path(f"/proc/{loop.pid}/fdinfo")
        assert any("tfd:" in (held / fd).read_text() for fd in os.listdir(held))
        rc, host = vastprobe_json("--pid", str(loop.pid), "--sample", "1")
        blamed = [f for f in host["findings"] if orphan in f["pids"]]
        assert not blamed, [(f["rule"], f["severity"], f["summary"]) for f in blamed]
        assert host["verdict"] == "healthy" and rc == 0
        loop_json = next(p for p in host["snapshot"]["processes"] if p["pid"] == loop.pid)
        assert loop_json["epoll"] and all(w["events"] & 1 for w in loop_json["epoll"])  # EPOLLIN
    finally:
        os.kill(orphan, signal.SIGKILL)
