"""The sweep table at fleet size (issue 26): 5,000 simulated hosts (bench/fleet_sim.py, loopback
only) with three causes of stall, swept twice into one history, the second table counted and its
rendering timed; beside it, ClusterShell's `clubak -b` (the peer: it gathers nodes with the same
output into node sets) folding the same hosts' headlines.

    python bench/fleet_table.py --hosts 5000 --runs 5

It prints the table's line count, the render's median time (render_summary alone, timed in the
process that swept), clubak's median over the same `host: headline` lines, and the table itself.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def start_fleet(n: int, directory: Path) -> subprocess.Popen[str]:
    # three causes: a stopped child, a pipe an orphan holds, an OOM kill; faults on a few hosts
    cmd = [sys.executable, str(ROOT / "bench" / "fleet_sim.py"), "--hosts", str(n), "--dir", str(directory),
           "--mix", "healthy=0.94,stalled=0.04,oom=0.02", "--slow", "0", "--workers", "2"]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.startswith("ready"):
        p.kill()
        raise SystemExit(f"fleet_sim did not start: {line!r}")
    print(f"fleet: {line.strip()}", file=sys.stderr)
    return p


def sweep_in_process(args: list[str], render_times: list[float]) -> tuple[int, str]:
    """`vastprobe sweep ARGS` in this process, its table's render timed."""
    import vastprobe.render.summary as summary
    from vastprobe.cli import run  # (main() ends the process with os._exit)

    original = summary.render_summary

    def timed(*a, **k):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        original(*a, **k)
        render_times.append(time.perf_counter() - t)

    summary.render_summary = timed  # type: ignore[assignment]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            code = run(["sweep", *args], False)
    finally:
        summary.render_summary = original  # type: ignore[assignment]
    return code, out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=5, help="renders (and clubak runs) to take the median of")
    ap.add_argument("--columns", type=int, default=120)
    a = ap.parse_args()
    os.environ["COLUMNS"] = str(a.columns)
    with tempfile.TemporaryDirectory(prefix="vp-table-") as tmp:
        d = Path(tmp)
        fleet = start_fleet(a.hosts, d)
        try:
            # the captures were recorded with one --log each: a sweep given none reads their log section as forged
            base = [str(d / "fleet.txt"), "--known-hosts", str(d / "known_hosts"), "--history", str(d / "h.sqlite"),
                    "--concurrency", "256", "--timeout", "120", "--log", "/tmp/vastprobe-golden/job.log"]  # fmt: skip
            t0 = time.monotonic()
            code, _ = sweep_in_process([*base, "--format", "ndjson"], [])
            first = time.monotonic() - t0
            renders: list[float] = []
            code, table = "", ""
            for _ in range(a.runs):  # each a sweep of its own: the history grows, the table is the same shape
                code, table = sweep_in_process([*base, "--format", "table"], renders)
            _, nd = sweep_in_process([*base, "--format", "ndjson"], [])
        finally:
            os.killpg(fleet.pid, signal.SIGTERM)
            fleet.wait(timeout=60)
    rows = [json.loads(x) for x in nd.splitlines() if x.strip()]
    hosts = [r for r in rows if "target" in r]
    groups = rows[-1]["summary"]["groups"]
    lines = [f"{r['target']}: {r['headline'] or r['error'] or r['verdict']}" for r in hosts]
    clubak = str(Path(sys.executable).with_name("clubak"))
    peer = []
    for _ in range(a.runs):
        t = time.perf_counter()
        out = subprocess.run([clubak, "-b"], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
        peer.append(time.perf_counter() - t)
    table_lines = table.rstrip("\n").splitlines()
    print(f"hosts {len(hosts)}; first sweep {first:.0f} s; exit {code}")
    print(f"vastprobe table: {len(table_lines)} lines at {a.columns} columns; render median "
          f"{statistics.median(renders) * 1000:.0f} ms (n={len(renders)}, max {max(renders) * 1000:.0f} ms)")  # fmt: skip
    print(f"clubak -b (peer): {len(out.stdout.splitlines())} lines; median {statistics.median(peer) * 1000:.0f} ms")
    print(f"NDJSON summary groups: {len(groups)}")
    print()
    print(table)


if __name__ == "__main__":
    main()
