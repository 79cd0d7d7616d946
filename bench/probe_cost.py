"""Cost of one probe run on this machine, at 100, 500 and 2000 extra processes.

Run by hand (not in CI), as root, with strace installed:

    .venv/bin/python bench/probe_cost.py [--runs 5] [--sizes 100,500,2000]

For each size it spawns that many extra `sleep` processes, then measures the vastprobe probe
(`dash -s`, --sample 0 so no sample sleep is counted) and, as the named peer, the loop people
type by hand: `for p in /proc/[0-9]*; do cat $p/stat $p/status $p/wchan; ls -la $p/fd; done`.
Reported per tool: forks (strace -ff), CPU seconds of the whole process tree (RUSAGE_CHILDREN),
wall seconds and output bytes; medians over --runs runs, alternating the two tools.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vastprobe.probe.render import ProbeParams, render_script

PEER = "for p in /proc/[0-9]*; do cat $p/stat $p/status $p/wchan 2>/dev/null; ls -la $p/fd 2>/dev/null; done\n"
FORK = re.compile(r"^(clone3?|fork|vfork)\(.*= (\d+)$")


def measure(script: str) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(["dash", "-s"], input=script.encode(), capture_output=True, start_new_session=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, len(out)


def forks(script: str) -> int:
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(
            ["strace", "-ff", "-qq", "-o", f"{d}/t", "-e", "trace=clone,clone3,fork,vfork", "dash", "-s"],
            input=script.encode(),
            capture_output=True,
            start_new_session=True,
        )
        n = 0
        for f in Path(d).iterdir():
            n += sum(1 for line in f.read_text().splitlines() if (m := FORK.search(line)) and int(m.group(2)) > 0)
        return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="100,500,2000")
    args = ap.parse_args()
    if shutil.which("strace") is None:
        sys.exit("needs strace")
    probe = render_script(ProbeParams(sample=0))
    tools = {"vastprobe probe": probe, "peer: per-PID cat/ls loop": PEER}
    print("| extra processes | tool | forks | CPU s (median) | wall s (median) | output bytes | CPU ratio vs peer |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(size)]
        try:
            results: dict[str, list[tuple[float, float, int]]] = {t: [] for t in tools}
            for _ in range(args.runs):
                for name, script in tools.items():
                    results[name].append(measure(script))
            fork_counts = {name: forks(script) for name, script in tools.items()}
        finally:
            for p in sleepers:
                p.kill()
            for p in sleepers:
                p.wait()
        med = {n: (statistics.median(c for c, _, _ in r), statistics.median(w for _, w, _ in r),
                   int(statistics.median(b for _, _, b in r))) for n, r in results.items()}  # fmt: skip
        peer_cpu = med["peer: per-PID cat/ls loop"][0]
        for name in tools:
            cpu, wall, size_b = med[name]
            ratio = f"{cpu / peer_cpu:.2f}x" if peer_cpu else "-"
            print(f"| {size} | {name} | {fork_counts[name]} | {cpu:.3f} | {wall:.3f} | {size_b} | {ratio} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
