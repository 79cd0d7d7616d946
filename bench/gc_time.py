"""vastprobe with the garbage collector's time counted: runs the CLI in this process (the arguments
are vastprobe's) and prints to stderr, as it exits, how long the collector ran (gc.callbacks, this
thread's CPU time), in how many collections of each generation, and the process's CPU. Issue 36
found a sweep's collector at a tenth of its CPU this way: each host's analysis left its snapshot in a
reference cycle (tests/test_pipeline_garbage.py).

    .venv/bin/python bench/gc_time.py sweep FLEET --known-hosts FILE --format ndjson --no-history ...

Run it over bench/fleet_sim.py's fleet (its docstring says how), alternating with the tree to compare.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

spent = [0.0]
collections = [0, 0, 0]
started: dict[str, float] = {}


def _count(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        started["t"] = time.thread_time()
        return
    spent[0] += time.thread_time() - started.get("t", time.thread_time())
    collections[info["generation"]] += 1


def _report() -> None:
    cpu = os.times()
    print(f"gc {spent[0]:.2f} s in collections of generation 0/1/2: {collections}; process CPU "
          f"{cpu.user + cpu.system:.2f} s", file=sys.stderr, flush=True)  # fmt: skip


def main() -> None:
    gc.callbacks.append(_count)
    real_exit = os._exit

    def exit_after_report(code: int) -> None:  # the CLI may leave by os._exit, past atexit
        _report()
        real_exit(code)

    os._exit = exit_after_report  # type: ignore[assignment]
    sys.argv = ["vastprobe", *sys.argv[1:]]
    from vastprobe.cli import main as vastprobe_main

    try:
        vastprobe_main()
    finally:
        _report()


if __name__ == "__main__":
    main()
