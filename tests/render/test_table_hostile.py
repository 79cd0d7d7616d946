"""Remote names are hostile: a program whose name holds terminal escapes and rich markup, stopped
under a waiting shell and holding a file of the same kind open, reaches the headline, the drawn
chain, the process table and the artifact listing only escaped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import children_of, proc_state, wait_for

EVIL = "\x1b[2J[red]x\u202e"


def test_hostile_names_stay_inert_in_every_part_of_the_report(tmp_path: Path, reap) -> None:
    prog = tmp_path / EVIL
    prog.symlink_to("/bin/sleep")
    out = tmp_path / f"log{EVIL}.txt"
    p = subprocess.Popen(["sh", "-c", f"'{prog}' 1000 > '{out}' & wait"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 1, what="child started")
    child = children_of(p.pid)[0]
    # the forked shell is `sh` until it execs the program: stop it only once it is the program
    wait_for(lambda: os.path.realpath(f"/proc/{child}/exe") == os.path.realpath("/bin/sleep"), what="child exec'd")
    os.kill(child, signal.SIGSTOP)
    wait_for(lambda: proc_state(child) == "T", what="child stopped")
    env = {**os.environ, "COLUMNS": "200"}
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(p.pid), "--sample", "0.2",
                        "--artifacts", f"{tmp_path}/*", "--format", "table", "-v"],
                       capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    os.kill(child, signal.SIGCONT)
    assert r.returncode == 1, r.stderr
    text = r.stdout
    assert "\x1b" not in text and "\u202e" not in text
    shown = "\\x1b[2J[red]x\\u202e"
    lines = text.splitlines()
    assert shown in lines[0]  # the headline: `… is stopped (T); sh (N) waits on it`
    assert any("◀ blocker (stopped)" in line and shown in line for line in lines)  # the tree
    assert any(line.strip().startswith(str(child)) and shown in line for line in lines)  # the table
    assert any(f"log{shown}.txt" in line and "held open for writing by" in line for line in lines)  # artifacts
