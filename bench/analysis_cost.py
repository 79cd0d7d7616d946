"""What the controller spends analysing one host, in-process: `pipeline.report_or_raise` of each
recorded capture the fleet simulator serves (fixtures/reports/captures), and the kernel-log parse
alone (a recorded host's 137 OOM lines). Everything a sweep spends above bare asyncssh is this
(docs/benchmarks.md, issue 36).

    .venv/bin/python bench/analysis_cost.py [--runs 5] [--previous git:REV | --previous DIR]

With --previous, the same measurement of another tree (a `git worktree` made here for git:REV, or a
checkout), run in turn with this one (each in its own interpreter, alternating, --runs times), and
the ratio of the medians. Per run: the median over 200 analyses of each capture (process CPU time),
weighted as the simulator mixes its hosts (90% healthy, 7% stalled, 3% with an OOM kill).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIX = {"healthy": 0.90, "stopped-child": 0.035, "orphan-pipe": 0.035, "seed-inside": 0.03}

MEASURE = r"""
import json, sys, time, statistics
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from vastprobe.capture import load_captures
from vastprobe.parsers import kmsg
from vastprobe.pipeline import DiagnoseOptions, report_or_raise
from vastprobe.probe.script import ProbeParams

captures = Path(sys.argv[2])
options = DiagnoseOptions(params=ProbeParams(logs=("/tmp/vastprobe-golden/job.log",)))
out = {}
kernel = {}
real = kmsg.parse_kmsg_sections
def keep(*a, **k):
    kernel.setdefault("args", (a, k))
    return real(*a, **k)
kmsg.parse_kmsg_sections = keep
for name in json.loads(sys.argv[3]):
    c = load_captures(captures / f"{name}.json")[0]
    for _ in range(20):
        report_or_raise(c, options)
    took = []
    for _ in range(200):
        t0 = time.process_time()
        report_or_raise(c, options)
        took.append(time.process_time() - t0)
    out[name] = statistics.median(took) * 1000
kmsg.parse_kmsg_sections = real
a, k = kernel["args"]
took = []
for _ in range(300):
    t0 = time.process_time()
    real(*a, **k)
    took.append(time.process_time() - t0)
out["kernel log parse"] = statistics.median(took) * 1000
print(json.dumps(out))
"""


def tree_of(where: str, keep: tempfile.TemporaryDirectory[str]) -> Path:
    if not where.startswith("git:"):
        return Path(where).resolve()
    tree = Path(keep.name) / "tree"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), where[4:]], cwd=ROOT, check=True)
    return tree


def measure(tree: Path) -> dict[str, float]:
    r = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tree), str(ROOT / "fixtures" / "reports" / "captures"), json.dumps(list(MIX))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    got: dict[str, float] = json.loads(r.stdout)
    got["weighted host"] = sum(got[name] * share for name, share in MIX.items())
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--previous", help="git:REV or a directory holding another vastprobe tree")
    args = ap.parse_args()
    keep = tempfile.TemporaryDirectory(prefix="vp-analysis-")
    trees = {"this tree": ROOT}
    if args.previous:
        trees[f"previous ({args.previous})"] = tree_of(args.previous, keep)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for _ in range(args.runs):
            for name, tree in trees.items():
                runs[name].append(measure(tree))
    finally:
        if args.previous and args.previous.startswith("git:"):
            subprocess.run(["git", "worktree", "remove", "--force", str(Path(keep.name) / "tree")], cwd=ROOT)
        keep.cleanup()
    rows = [*MIX, "weighted host", "kernel log parse"]
    names = list(trees)
    print("| ms CPU (median of runs) | " + " | ".join(names) + (" | ratio |" if len(names) > 1 else " |"))
    print("|---|" + "---:|" * (len(names) + (1 if len(names) > 1 else 0)))
    for row in rows:
        values = [statistics.median(r[row] for r in runs[name]) for name in names]
        ratio = f" | {values[0] / values[1]:.2f}x" if len(values) > 1 else ""
        print(f"| {row} | " + " | ".join(f"{v:.2f}" for v in values) + ratio + " |")


if __name__ == "__main__":
    main()
