"""Hostile hosts in a sweep: how long the healthy hosts take, and how much memory the controller
holds, when some targets send what they like (tests/hostile_servers.py: asyncssh's in-process
server on 127.0.0.1 answering with a recorded real capture, re-framed with the run's boundary).

Run by hand (not in CI):

    .venv/bin/python bench/hostile_sweep.py [--rounds 3] [--endless 64] [--vastprobe PYTHON]

1. Isolation: `vastprobe sweep` over 3 healthy hosts alone, then the same 3 with a host sending 60
   lines built to make regexes backtrack (in its kernel log and its socket table) and a host that
   streams without end; the second each NDJSON row arrived, per host, medians of --rounds.
2. Memory: `vastprobe sweep` over --endless hosts that stream without end (framed process records,
   then bytes without framing), concurrency = the host count; the controller's peak RSS (GNU time
   %M) against the budget in docs/architecture.md.

`--vastprobe` runs another checkout's vastprobe (its venv's python) against the same servers: the
"before" of a change, in the same session.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bytecode import compile_vastprobe  # noqa: E402
from tests.hostile_servers import Fleet, endless, healthy, quadratic  # noqa: E402


def sweep(python: str, targets: list[str], known_hosts: Path, d: Path, concurrency: int) -> tuple[dict, float, int]:
    """{target: (seconds to its row, status)}, wall seconds, peak RSS MiB of the controller."""
    inv = d / "hosts.txt"
    inv.write_text("\n".join(targets) + "\n")
    rss = d / "rss"
    cmd = ["/usr/bin/time", "-f", "%M", "-o", str(rss), python, "-m", "vastprobe", "sweep", str(inv),
           "--format", "ndjson", "--known-hosts", str(known_hosts), "--sample", "0", "--timeout", "60",
           "--concurrency", str(concurrency)]  # fmt: skip
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd="/")
    assert p.stdout is not None
    rows = {}
    for line in p.stdout:
        r = json.loads(line)
        if "summary" in r:  # the line that ends the stream
            continue
        rows[r["target"]] = (time.monotonic() - t0, r["status"], (r.get("timings") or {}).get("analysis"))
    p.wait()
    wall = time.monotonic() - t0
    return rows, wall, int(rss.read_text().split()[-1]) // 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--endless", type=int, default=64)
    ap.add_argument("--vastprobe", default=sys.executable, help="python of the vastprobe to measure")
    args = ap.parse_args()
    compile_vastprobe()
    py = args.vastprobe
    version = subprocess.run(
        [py, "-m", "vastprobe", "--version"], capture_output=True, text=True, cwd="/"
    ).stdout.strip()
    print(f"vastprobe: {py} ({version})")
    with tempfile.TemporaryDirectory() as td:
        d = Path(td)
        fleet = Fleet([healthy(0.2), healthy(0.2), healthy(0.2), quadratic(60), endless()]).start(d)
        try:
            kh = fleet.known_hosts
            assert kh is not None
            alone: list[dict] = []
            mixed: list[dict] = []
            walls = []
            for _ in range(args.rounds):
                alone.append(sweep(py, fleet.targets[:3], kh, d, 8)[0])
                rows, wall, rss = sweep(py, fleet.targets, kh, d, 8)
                mixed.append(rows)
                walls.append((wall, rss))
        finally:
            fleet.stop()
        names = ["healthy-1", "healthy-2", "healthy-3", "quadratic-60", "endless"]
        print(f"\nIsolation, {args.rounds} rounds, medians: seconds until each host's NDJSON row")
        print("| host | alone: s, status | mixed: s, status | mixed: analysis s |")
        print("|---|---:|---:|---:|")
        for i, (name, t) in enumerate(zip(names, fleet.targets, strict=True)):
            a = f"{statistics.median(r[t][0] for r in alone):.2f}, {alone[-1][t][1]}" if i < 3 else "-"
            m = statistics.median(r[t][0] for r in mixed)
            an = [r[t][2] for r in mixed if r[t][2] is not None]
            ana = f"{statistics.median(an):.3f}" if an else "-"
            print(f"| {name} | {a} | {m:.2f}, {mixed[-1][t][1]} | {ana} |")
        print(
            f"mixed sweep wall (median) {statistics.median(w for w, _ in walls):.2f} s, peak RSS {max(r for _, r in walls)} MiB"
        )

        for framed in (True, False):
            fleet = Fleet([endless(framed) for _ in range(args.endless)]).start(d)
            try:
                assert fleet.known_hosts is not None
                rows, wall, rss = sweep(py, fleet.targets, fleet.known_hosts, d, args.endless)
            finally:
                fleet.stop()
            statuses: dict[str, int] = {}
            for _, st, _ in rows.values():
                statuses[st] = statuses.get(st, 0) + 1
            kind = "framed process records" if framed else "bytes without framing"
            print(f"\n{args.endless} endless hosts ({kind}), concurrency {args.endless}: "
                  f"wall {wall:.1f} s, controller peak RSS {rss} MiB, rows {len(rows)} {statuses}")  # fmt: skip


if __name__ == "__main__":
    main()
