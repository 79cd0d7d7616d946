"""Two launchers side by side in one memory cgroup (two job scripts of one container), one of whose
children the OOM killer takes: nothing in /proc says whose child it was once it is gone, so the kill
is reported once, for the cgroup, and no launcher is blamed for it (the one started last was, before).
When the snapshot still holds the victim (a zombie its launcher has not reaped yet), its parent is
named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.cgroup_lab import OOM_KILLS, MemoryCgroup
from tests.helpers import children_of, proc_state, vastprobe_json, wait_for

ALLOC = "import time; b = bytearray(400 << 20); time.sleep(600)"


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


@OOM_KILLS
def test_a_kill_beside_two_launchers_is_the_cgroups_not_the_newest_launchers(reap, memcg: MemoryCgroup,
                                                                              tmp_path: Path) -> None:  # fmt: skip
    cg = MemoryCgroup(128 * 1024 * 1024)
    go = tmp_path / "go"
    alloc = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n{ALLOC}"
    try:
        # A (the older) runs the child that will be killed, then sleeps on; B (the newer) only sleeps:
        # both are alive at the kill and both wait on children afterwards
        a = subprocess.Popen(["bash", "-c", f'echo $$ > {cg.procs_file}; {sys.executable} -c "$0"; sleep 600; true',
                              alloc], start_new_session=True)  # fmt: skip
        reap.append(a)
        wait_for(lambda: any(comm(k).startswith("python") for k in children_of(a.pid)), what="A's child started")
        b = subprocess.Popen(["bash", "-c", f"echo $$ > {cg.procs_file}; sleep 600; true"], start_new_session=True)
        reap.append(b)
        wait_for(lambda: any(comm(k) == "sleep" for k in children_of(b.pid)), what="B waiting")
        go.write_text("")
        wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="A's child OOM-killed")
        wait_for(lambda: any(comm(k) == "sleep" for k in children_of(a.pid)), what="A waiting again")
        _rc, host = vastprobe_json("--pid", str(a.pid), "--pid", str(b.pid), "--sample", "1")
        ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child" and f["severity"] != "info"]
        assert len(ooms) == 1, [(f["severity"], f["summary"], f["pids"]) for f in ooms]
        f = ooms[0]
        assert b.pid not in f["pids"] and a.pid not in f["pids"], f  # nothing shows whose child it was
        assert "with no watched parent to name" in f["summary"]
        details = [e["detail"] for e in f["evidence"]]
        assert len(details) == len(set(details)), details  # no evidence line twice
        # the memory cgroup by name: "that memory cgroup" named none (found by a helper)
        assert cg.name in f["hint"] and any(cg.name in d for d in details), (f["hint"], details)
    finally:
        cg.remove()


@OOM_KILLS
def test_a_victim_still_a_zombie_names_its_launcher(reap, memcg: MemoryCgroup) -> None:
    """The launcher is stopped before it reaps the killed child: the zombie's parent is the loser,
    however many other launchers share the cgroup."""
    cg = MemoryCgroup(128 * 1024 * 1024)
    try:
        b = subprocess.Popen(["bash", "-c", f"echo $$ > {cg.procs_file}; sleep 600; true"], start_new_session=True)
        reap.append(b)
        launcher = f"import os, time\nopen({str(cg.procs_file)!r}, 'w').write(str(os.getpid()))\n"
        launcher += (
            f"os.spawnv(os.P_NOWAIT, {sys.executable!r}, [{sys.executable!r}, '-c', {ALLOC!r}])\ntime.sleep(600)\n"
        )
        a = subprocess.Popen([sys.executable, "-c", launcher], start_new_session=True)
        reap.append(a)
        wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="A's child OOM-killed")
        wait_for(lambda: any(proc_state(k) == "Z" for k in children_of(a.pid)), what="the victim a zombie")
        _rc, host = vastprobe_json("--pid", str(a.pid), "--pid", str(b.pid), "--sample", "1")
        ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child" and cg.name in str(f["evidence"])]
        assert len(ooms) == 1 and ooms[0]["pids"] == [a.pid], [(f["summary"], f["pids"]) for f in ooms]
    finally:
        cg.remove()


@OOM_KILLS
def test_two_kills_beside_two_launchers_are_both_the_cgroups(reap, memcg: MemoryCgroup, tmp_path: Path) -> None:
    """Each launcher's child is OOM-killed (two kills, one per launcher): both were blamed on the
    first launcher. Nothing shows whose child each was once it is gone: the cgroup is named with
    both kills, neither launcher; the launchers go on (a warning, DEGRADED, exit 0)."""
    cg = MemoryCgroup(128 * 1024 * 1024)
    go = tmp_path / "go"
    alloc = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n{ALLOC}"
    try:
        launchers = []
        for _ in range(2):
            p = subprocess.Popen(["bash", "-c", f'echo $$ > {cg.procs_file}; {sys.executable} -c "$0"; sleep 600; true',
                                  alloc], start_new_session=True)  # fmt: skip
            reap.append(p)
            wait_for(lambda p=p: any(comm(k).startswith("python") for k in children_of(p.pid)), what="a child")
            launchers.append(p)
        go.write_text("")
        wait_for(lambda: cg.oom_kills() >= 2, timeout=30, what="both children OOM-killed")
        for p in launchers:
            wait_for(lambda p=p: any(comm(k) == "sleep" for k in children_of(p.pid)), what="the launcher going on")
        rc, host = vastprobe_json(*(a for p in launchers for a in ("--pid", str(p.pid))), "--sample", "1")
        ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child" and f["severity"] != "info"]
        assert len(ooms) == 1, [(f["severity"], f["summary"], f["pids"]) for f in ooms]
        f = ooms[0]
        assert f["summary"].startswith("2 OOM kill(s)") and not {p.pid for p in launchers} & set(f["pids"]), f
        assert f["severity"] == "warning" and host["verdict"] == "degraded" and rc == 0, host["headline"]
    finally:
        cg.remove()
