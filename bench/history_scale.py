"""History at fleet scale: 1000 hosts x 288 sweeps a day x 30 days of synthetic reports through the
real writer (`HistoryStore.record`), against two peers written from the same reports in the same run.

Run by hand (not in CI); it writes ~2.5 GB under --dir and takes ~15 minutes on a 2-vCPU VM:

    .venv/bin/python bench/history_scale.py [--hosts 1000] [--per-day 288] [--days 30] [--dir /tmp]

- **vastprobe**: the real store, `--keep 30d`, one transaction per sweep, pruning as it writes.
  One day more than it keeps is written, so the last day runs at the steady state (a full file,
  each sweep pruning the oldest one).
- **peer: JSON lines**: one line per host per sweep appended to a log (status, verdict, findings,
  timings: what the store records), flushed each sweep; the obvious "just log it" design. Queries
  scan the file (a line is skipped on its raw timestamp or target text before it is parsed).
- **peer: plain SQLite**: one table, one row per host per sweep, no index, no per-host state; the
  obvious "just put it in SQLite" design. Not pruned (a DELETE by time scans the whole table).

Queries answer what `vastprobe history` shows: the current verdict and since when (which may be
older than the window), the last time healthy, and the transitions in the last 24 h; for one host
and for all. vastprobe's are timed in-process and as the real command (`vastprobe history`, a new
Python process each time, median of 5).

The fleet: each sweep a healthy host stalls with p=0.0005 (a stall lasts ~50 sweeps), 10 hosts
flap (p=0.5 per sweep), a host is unreachable with p=0.002, and 30% of healthy hosts carry an info
finding. Stalled hosts carry an error and a warning finding with PIDs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vastprobe.history.queries import host_histories  # noqa: E402
from vastprobe.history.store import HistoryStore, open_history  # noqa: E402
from vastprobe.model import Finding, HostReport  # noqa: E402

HEALTHY, INFO, STALLED, DOWN = range(4)
DAY = 86400.0


def variants(target: str, i: int) -> list[HostReport]:
    t = {"connect": 0.05 + (i % 17) / 100, "probe": 0.2 + (i % 29) / 100, "analysis": 0.01}
    info = Finding("oom-killed-child", "VP102", "info", "6 OOM kill(s) before the watched processes started", (), (),
                   None)  # fmt: skip
    stop = Finding("stopped-child", "VP105", "error", f"python ({1000 + i}) is stopped (T)", (1000 + i,), (), None)
    zomb = Finding("zombie-child", "VP106", "warning", f"bash ({900 + i}) does not reap 1 exited process(es)",
                   (900 + i, 2000 + i), (), None)  # fmt: skip
    return [
        HostReport(target, "ok", None, "healthy", (), None, t),
        HostReport(target, "ok", None, "healthy", (info,), None, t),
        HostReport(target, "ok", None, "stalled", (stop, zomb, info), None, t),
        HostReport(target, "unreachable", f"{target}: connection refused", "unknown", (), None, {"connect": 0.01}),
    ]


def fleet_states(hosts: int, sweeps: int, seed: int = 14):
    """Each sweep: the list of per-host states (HEALTHY/INFO/STALLED/DOWN)."""
    rng = random.Random(seed)
    flappers = set(rng.sample(range(hosts), min(10, hosts)))
    stalled = [False] * hosts
    info = [rng.random() < 0.3 for _ in range(hosts)]
    for _ in range(sweeps):
        out = []
        for h in range(hosts):
            r = rng.random()
            if h in flappers:
                stalled[h] = r < 0.5
            elif stalled[h]:
                stalled[h] = r >= 0.02
            else:
                stalled[h] = r < 0.0005
            if rng.random() < 0.002:
                out.append(DOWN)
            else:
                out.append(STALLED if stalled[h] else INFO if info[h] else HEALTHY)
        yield out


def jsonl_line(t: float, r: HostReport) -> str:
    findings = [{"rule": f.rule, "code": f.code, "severity": f.severity, "summary": f.summary, "pids": list(f.pids)}
                for f in r.findings]  # fmt: skip
    return json.dumps({"t": t, "target": r.target, "status": r.status, "verdict": r.verdict, "error": r.error,
                       "findings": findings, "timings": r.timings}, separators=(",", ":")) + "\n"  # fmt: skip


NAIVE_DDL = """CREATE TABLE obs (t REAL, target TEXT, status TEXT, verdict TEXT, rules TEXT, details TEXT,
connect_ms INTEGER, probe_ms INTEGER, analysis_ms INTEGER)"""


def naive_rows(t: float, reports: list[HostReport]) -> list[tuple]:
    rows = []
    for r in reports:
        rules = ",".join(sorted({f.rule for f in r.findings if f.severity != "info"}))
        details = None
        if r.findings or r.error:
            details = json.dumps({"error": r.error, "findings": [[f.rule, f.code, f.severity, f.summary, list(f.pids)]
                                                                 for f in r.findings]})  # fmt: skip
        tm = r.timings
        rows.append((t, r.target, r.status, r.verdict, rules, details, round(tm.get("connect", 0) * 1000),
                     round(tm.get("probe", 0) * 1000), round(tm.get("analysis", 0) * 1000)))  # fmt: skip
    return rows


def summarise(rows) -> dict[str, dict]:
    """(target, t, verdict, state-key) rows in time order per target -> since, last healthy, transitions."""
    out: dict[str, dict] = {}
    for target, group in itertools.groupby(rows, key=lambda x: x[0]):
        since = last_healthy = None
        verdict = key = None
        transitions = []
        for _, t, v, k in group:
            if v != verdict:
                since = t
            if key is not None and k != key:
                transitions.append(t)
            verdict, key = v, k
            if v == "healthy":
                last_healthy = t
        out[target] = {"verdict": verdict, "since": since, "last_healthy": last_healthy, "transitions": transitions}
    return out


def jsonl_query(path: Path, target: str | None, window: float) -> dict[str, dict]:
    needle = None if target is None else f'"target":{json.dumps(target)},'
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if needle is not None and needle not in line:
                continue
            d = json.loads(line)
            key = (
                d["status"],
                d["verdict"],
                ",".join(sorted({x["rule"] for x in d["findings"] if x["severity"] != "info"})),
            )
            rows.append((d["target"], d["t"], d["verdict"], key))
    rows.sort(key=lambda x: (x[0], x[1]))
    out = summarise(rows)
    for v in out.values():
        v["transitions"] = [t for t in v["transitions"] if t >= window]
    return out


def naive_query(con: sqlite3.Connection, target: str | None, window: float) -> dict[str, dict]:
    if target is None:
        cur = con.execute("SELECT target, t, verdict, status || verdict || rules FROM obs ORDER BY target, t")
    else:
        cur = con.execute("SELECT target, t, verdict, status || verdict || rules FROM obs WHERE target = ? ORDER BY t",
                          (target,))  # fmt: skip
    out = summarise(cur)
    for v in out.values():
        v["transitions"] = [t for t in v["transitions"] if t >= window]
    return out


def timed(fn, *args):
    t0 = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t0, result


def cli_seconds(path: Path, *args: str, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "vastprobe", "history", *args, "--history", str(path), "--format",
                            "json"], capture_output=True, check=False)  # fmt: skip
        times.append(time.perf_counter() - t0)
        assert r.returncode == 0, r.stderr[-500:]
    return statistics.median(times)


def size_mb(*paths: Path) -> float:
    return sum(p.stat().st_size for p in paths if p.exists()) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--per-day", type=int, default=288)
    ap.add_argument("--days", type=int, default=30, help="days kept (--keep); one more day is written")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--keep-files", action="store_true", help="leave the files under --dir for a look")
    args = ap.parse_args()
    step = DAY / args.per_day
    sweeps = (args.days + 1) * args.per_day
    keep = args.days * DAY
    hosts = [f"root@10.{i // 250}.{i % 250}.1:22" for i in range(args.hosts)]
    pool = [variants(t, i) for i, t in enumerate(hosts)]
    t0 = time.time() - sweeps * step
    td = tempfile.mkdtemp(dir=args.dir, prefix="vp-history-bench-")
    try:
        d = Path(td)
        db, log, naive_db = d / "history.sqlite", d / "history.jsonl", d / "naive.sqlite"
        ours: list[float] = []
        peer_log: list[float] = []
        peer_naive: list[float] = []
        store = HistoryStore(db)
        log_f = open(log, "a", encoding="utf-8")  # noqa: SIM115
        naive = sqlite3.connect(naive_db, isolation_level=None)
        naive.execute("PRAGMA journal_mode=WAL")
        naive.execute("PRAGMA synchronous=NORMAL")
        naive.execute(NAIVE_DDL)
        wall0 = time.perf_counter()
        for i, states in enumerate(fleet_states(args.hosts, sweeps)):
            t = t0 + i * step
            reports = [pool[h][s] for h, s in enumerate(states)]
            a = time.perf_counter()
            store.record(reports, started_at=t, finished_at=t + 30, keep=keep)
            b = time.perf_counter()
            ours.append(b - a)
            if not args.no_peers:
                log_f.write("".join(jsonl_line(t, r) for r in reports))
                log_f.flush()
                c = time.perf_counter()
                peer_log.append(c - b)
                naive.execute("BEGIN")
                naive.executemany("INSERT INTO obs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", naive_rows(t, reports))
                naive.execute("COMMIT")
                peer_naive.append(time.perf_counter() - c)
            if i % args.per_day == args.per_day - 1:
                print(f"day {(i + 1) // args.per_day}: {time.perf_counter() - wall0:.0f} s, vastprobe "
                      f"{statistics.median(ours[-args.per_day:]) * 1000:.1f} ms/sweep, {size_mb(db):.0f} MB",
                      file=sys.stderr, flush=True)  # fmt: skip
        store.close()
        log_f.close()
        naive.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        naive.close()
        now = t0 + sweeps * step
        window = now - DAY
        one = hosts[7]
        con = open_history(db, readonly=True)
        q_one, hist_one = timed(host_histories, con, [one], window)
        q_all, hist_all = timed(host_histories, con, [], window)
        q_all30, _ = timed(host_histories, con, [], now - keep)
        obs = con.execute("SELECT count(*) FROM observations").fetchone()[0]
        episodes = con.execute("SELECT count(*) FROM episodes").fetchone()[0]
        con.close()
        cli_one = cli_seconds(db, one)
        cli_all = cli_seconds(db)
        cli_all30 = cli_seconds(db, "--since", f"{args.days}d")

        def ms(xs: list[float], q: float) -> str:
            return f"{statistics.quantiles(xs, n=100)[q - 1] * 1000:.1f}" if len(xs) >= 2 else "-"

        last_day = ours[-args.per_day :]
        print(f"\n{args.hosts} hosts x {args.per_day} sweeps/day, {args.days + 1} days written, {args.days} kept; "
              f"{obs} observations and {episodes} episodes kept; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")  # fmt: skip
        print(
            "| store | file MB | write ms/sweep: median | p99 | max | last day median | `history` one host s | all hosts, 24 h s | all hosts, all kept s |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| vastprobe (in-process query) | {size_mb(db, Path(str(db) + '-wal')):.1f} | "
              f"{statistics.median(ours) * 1000:.1f} | {ms(ours, 99)} | {max(ours) * 1000:.1f} | "
              f"{statistics.median(last_day) * 1000:.1f} | {q_one:.3f} | {q_all:.3f} | {q_all30:.3f} |")  # fmt: skip
        print(f"| vastprobe (`vastprobe history`, new process, median of 5) | | | | | | {cli_one:.3f} | {cli_all:.3f} | "
              f"{cli_all30:.3f} |")  # fmt: skip
        if not args.no_peers:
            l_one, _ = timed(jsonl_query, log, one, window)
            l_all, _ = timed(jsonl_query, log, None, window)
            n = sqlite3.connect(naive_db)
            n_one, naive_one = timed(naive_query, n, one, window)
            n_all, _ = timed(naive_query, n, None, window)
            n.close()
            print(f"| peer: JSON lines (not pruned) | {size_mb(log):.1f} | {statistics.median(peer_log) * 1000:.1f} | "
                  f"{ms(peer_log, 99)} | {max(peer_log) * 1000:.1f} | - | {l_one:.2f} | {l_all:.2f} | - |")  # fmt: skip
            print(f"| peer: plain SQLite, no index (not pruned) | {size_mb(naive_db):.1f} | "
                  f"{statistics.median(peer_naive) * 1000:.1f} | {ms(peer_naive, 99)} | {max(peer_naive) * 1000:.1f} | "
                  f"- | {n_one:.2f} | {n_all:.2f} | - |")  # fmt: skip
            mine = hist_one[0][0]
            theirs = naive_one[one]
            assert mine.state.verdict == theirs["verdict"], (mine, theirs)
            if theirs["verdict"] != "unknown":
                assert abs(mine.since - theirs["since"]) < 1, (mine.since, theirs["since"])
        flapping = sum(h.flapping for h in hist_all[0])
        print(f"\nchecks: {one} is {hist_one[0][0].state.verdict} since {hist_one[0][0].since:.0f}; "
              f"{flapping} hosts flapping in the last 24 h; files under {d} " + ("kept" if args.keep_files else "removed"))  # fmt: skip
    finally:
        if not args.keep_files:
            shutil.rmtree(td, ignore_errors=True)


if __name__ == "__main__":
    main()
