"""The OOM kill behind a hang is the root: a DataLoader-style worker (multiprocessing.Queue) is
OOM-killed in the job's memory cgroup, and the trainer waits in Queue.get() for ever. The trainer
holds the queue's write end itself (it made the queue), so its read never sees EOF: a self-loop of
waits that is not a deadlock of its own. The kill is the headline; the wait follows from it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.cgroup_lab import OOM_KILLS, MemoryCgroup
from tests.helpers import proc_wchan, vastprobe_json, wait_for

TRAINER = textwrap.dedent("""
    import multiprocessing as mp
    def loader(q):
        batch = bytearray(400 << 20)       # more than the cgroup allows: OOM-killed
        q.put(len(batch))
    if __name__ == "__main__":
        q = mp.Queue()
        w = mp.Process(target=loader, args=(q,))
        w.start()
        print(q.get())                     # waits for ever: the worker is gone
""")


@OOM_KILLS
def test_a_trainer_waiting_on_a_queue_whose_worker_was_oom_killed(reap, memcg: MemoryCgroup) -> None:
    cg = MemoryCgroup(128 * 1024 * 1024)
    try:
        job = subprocess.Popen(["bash", "-c", f'echo $$ > {cg.procs_file}; exec {sys.executable} -c "$0"', TRAINER],
                               start_new_session=True, stdout=subprocess.DEVNULL)  # fmt: skip
        reap.append(job)
        wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="the loader OOM-killed")
        wait_for(lambda: proc_wchan(job.pid).endswith("pipe_read"), what="the trainer reading")
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
        assert host["verdict"] == "stalled" and rc == 1
        assert not [f for f in host["findings"] if f["severity"] == "critical"], host["findings"]
        oom = next(f for f in host["findings"] if f["rule"] == "oom-killed-child" and f["severity"] == "error")
        assert oom["pids"] == [job.pid], oom
        wait = next(f for f in host["findings"] if f["rule"] == "deadlock")
        assert wait["caused_by"] == "oom-killed-child" and "was OOM-killed" in wait["summary"], wait
        assert "read both pipes" not in wait["hint"]
        first = host["incidents"][0]
        assert first["root"]["rule"] == "oom-killed-child", first  # the kill leads; the wait follows it
        assert "OOM" in host["headline"], host["headline"]
    finally:
        cg.remove()
