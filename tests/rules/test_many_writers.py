"""A pipe or FIFO with several writers: its reader waits on any one of them. One writer stopped beside
another that goes on (puts an item every 2 s) proves nothing; both stopped, the reader is STALLED.
Real multiprocessing.Queue producers, and real FIFO writers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, proc_wchan, vastprobe_json, wait_for

#: argv: the FIFO, seconds between lines
FIFO_WRITER = """
import os, sys, time
f = open(sys.argv[1], "w")
while True:
    f.write(f"line {os.getpid()}\\n"); f.flush(); time.sleep(float(sys.argv[2]))
"""

#: two producers (one putting an item an hour, one every 2 s) and a consumer; prints their PIDs
QUEUE = """
import multiprocessing as mp, os, time
def producer(q, every):
    while True:
        q.put(os.getpid()); time.sleep(every)
def consumer(q):
    while True:
        q.get()
if __name__ == "__main__":
    q = mp.Queue()
    ps = [mp.Process(target=producer, args=(q, 3600)), mp.Process(target=producer, args=(q, 2)),
          mp.Process(target=consumer, args=(q,))]
    for p in ps:
        p.start()
    print(*(p.pid for p in ps), flush=True)
    for p in ps:
        p.join()
"""


def fifo_pair(reap: list, tmp_path: Path, wrapped: bool = False) -> tuple[int, int, int]:
    """A reader of a FIFO and two writers of it (an hourly one, one every 2 s): their PIDs. `wrapped`:
    the reader under `timeout` (the PID given is the wrapper's: its wait for its child comes first)."""
    fifo = tmp_path / "f.fifo"
    os.mkfifo(fifo, 0o600)
    wrapper = ["timeout", "600"] if wrapped else []
    reader = subprocess.Popen([*wrapper, sys.executable, "-c", "import sys\nfor _ in open(sys.argv[1]): pass", str(fifo)],
                              start_new_session=True)  # fmt: skip
    writers = [subprocess.Popen([sys.executable, "-c", FIFO_WRITER, str(fifo), every], start_new_session=True)
               for every in ("3600", "2")]  # fmt: skip
    reap.extend([reader, *writers])
    return reader.pid, writers[0].pid, writers[1].pid


def queue_pair(reap: list, tmp_path: Path) -> tuple[int, int, int]:
    """multiprocessing's consumer and its two producers: (consumer, hourly producer, busy producer)."""
    script = tmp_path / "queue_job.py"
    script.write_text(QUEUE)
    top = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    reap.append(top)
    assert top.stdout is not None
    hourly, busy, consumer = (int(x) for x in top.stdout.readline().split())
    return consumer, hourly, busy


@pytest.mark.parametrize("sample", ["1", "0"])
@pytest.mark.parametrize("shape", ["fifo", "queue", "wrapped"])
def test_a_reader_of_several_writers_one_stopped_is_not_stalled(reap, tmp_path: Path, shape: str, sample: str) -> None:
    """It read STALLED, exit 1, "waits on python3, which is stopped (T)", while the other writer kept it
    fed (found by a helper)."""
    reader, hourly, busy = (
        queue_pair(reap, tmp_path) if shape == "queue" else fifo_pair(reap, tmp_path, shape == "wrapped")
    )
    # (timeout's child reads; timeout itself waits for it: `timeout 60 cat < fifo`, found by a helper)
    reads = (lambda: any(proc_wchan(k).endswith("pipe_read") for k in children_of(reader))) if shape == "wrapped" else (
        lambda: proc_wchan(reader).endswith("pipe_read"))  # fmt: skip
    wait_for(lambda: reads() and proc_wchan(hourly).endswith("nanosleep"),
             what="the reader waiting, the hourly writer asleep")  # fmt: skip
    os.kill(hourly, signal.SIGSTOP)
    wait_for(lambda: proc_state(hourly) == "T", what="the hourly writer stopped")
    rc, host = vastprobe_json("--pid", str(reader), "--sample", sample)
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert host["verdict"] != "stalled" and rc == 0, said
    # the control: the other writer stopped too, nothing can feed it
    os.kill(busy, signal.SIGSTOP)
    wait_for(lambda: proc_state(busy) == "T", what="the busy writer stopped")
    rc, host = vastprobe_json("--pid", str(reader), "--sample", sample)
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert host["verdict"] == "stalled" and rc == 1, said
    for pid in (hourly, busy):
        os.kill(pid, signal.SIGCONT)
