"""The controller at scale: `vastprobe sweep` over a simulated fleet (bench/fleet_sim.py, in its own
process) of 1,000 / 5,000 / 20,000 hosts, one controller and N shards at once (`--shard auto` from a
Slurm-style array environment), every controller writing one PostgreSQL history (a private cluster
started here as tests/pg_cluster.py does, or `--pg-url`).

Per run: wall seconds until the last controller exits; controller CPU (user+sys of each sweep
process, from wait4) per host; the peak RSS of the largest controller; rows by status; the history's
hosts and observations afterwards (every host once). After each one-controller run, the peer: a bare
asyncssh fan-out over the same hosts with the same hosts in flight (bench/peers/bare_asyncssh.py),
and the ratio on a line of its own: `controller CPU = N.NNx bare asyncssh`.

    .venv/bin/python bench/fleet_scale.py --hosts 1000,5000,20000 --shards 1,4,8
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bytecode import compile_vastprobe  # noqa: E402


def start_sim(n: int, d: Path, extra: list[str]) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fleet_sim.py"), "--hosts", str(n), "--dir", str(d),
                          *extra], stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.startswith("ready"):
        p.kill()
        raise SystemExit(f"fleet_sim did not start: {line!r}")
    print(f"  fleet_sim: {line.strip()}", flush=True)
    return p


def sim_cpu(sim: subprocess.Popen[str]) -> float:
    """CPU seconds the simulator's processes have used so far (its SSH server side of every host)."""
    import psutil

    procs = [psutil.Process(sim.pid), *psutil.Process(sim.pid).children()]
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def sweep(d: Path, shards: int, url: str, concurrency: int, timeout: float, connect_timeout: float) -> dict:
    procs = []
    t0 = time.monotonic()
    for k in range(shards):
        env = {k2: v for k2, v in os.environ.items() if not k2.startswith(("SLURM_", "JOB_COMPLETION", "VASTPROBE_"))}
        if shards > 1:
            env.update(SLURM_ARRAY_TASK_ID=str(k), SLURM_ARRAY_TASK_MIN="0", SLURM_ARRAY_TASK_COUNT=str(shards))
        cmd = [
            sys.executable,
            "-m",
            "vastprobe",
            "sweep",
            str(d / "fleet.txt"),
            "--known-hosts",
            str(d / "known_hosts"),
            "--format",
            "ndjson",
            "--brief",
            "--concurrency",
            str(concurrency),
            "--timeout",
            str(timeout),
            "--connect-timeout",
            str(connect_timeout),
            "--history",
            url,
            "--log",
            "/tmp/vastprobe-golden/job.log",
        ]  # fmt: skip  (the captures hold one log's section)
        if shards > 1:
            cmd += ["--shard", "auto"]
        out = open(d / f"out{k}.ndjson", "w")  # noqa: SIM115
        procs.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True, env=env, cwd="/"), out))
    cpu, rss, codes, errs = 0.0, 0, [], []
    ends = []
    for p, out in procs:
        _, status, ru = os.wait4(p.pid, 0)
        ends.append(time.monotonic() - t0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.close()
        cpu += ru.ru_utime + ru.ru_stime
        rss = max(rss, ru.ru_maxrss)
        codes.append(p.returncode)
        assert p.stderr is not None
        errs += [line.strip() for line in p.stderr.read().splitlines() if line.strip()][:3]
    wall = max(ends)
    lines = [json.loads(line) for k in range(shards) for line in (d / f"out{k}.ndjson").read_text().splitlines()]
    rows = [r for r in lines if "target" in r]  # each shard's stream ends with its summary line
    return {"wall": wall, "cpu": cpu, "rss_mib": rss / 1024, "codes": sorted(set(codes)), "rows": len(rows),
            "status": dict(collections.Counter(r["status"] for r in rows)),
            "verdict": dict(collections.Counter(r["verdict"] for r in rows)), "errors": errs[:3],
            "targets": [r["target"] for r in rows]}  # fmt: skip


def bare(d: Path, concurrency: int, timeout: float) -> tuple[float, str]:
    """The same fan-out with bare asyncssh (bench/peers/bare_asyncssh.py): its CPU seconds (wait4) and
    its own line."""
    cmd = [sys.executable, str(ROOT / "bench" / "peers" / "bare_asyncssh.py"), str(d / "fleet.txt"),
           str(d / "known_hosts"), "--concurrency", str(concurrency), "--timeout", str(timeout),
           "--log", "/tmp/vastprobe-golden/job.log"]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd="/")
    assert p.stdout is not None
    line = p.stdout.read().strip()
    _, _status, ru = os.wait4(p.pid, 0)
    return ru.ru_utime + ru.ru_stime, line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="1000,5000,20000")
    ap.add_argument("--shards", default="1,4,8")
    ap.add_argument(
        "--concurrency",
        type=int,
        default=256,
        help="hosts in flight in all, split between the controllers (the simulator's load stays the same)",
    )
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--connect-timeout", type=float, default=30)
    ap.add_argument("--pg-url", help="a PostgreSQL database to write (default: a private cluster started here)")
    ap.add_argument("--sim", default="--workers 2", help="fleet_sim options, e.g. '--workers 2 --latency 50'")
    ap.add_argument("--no-peer", action="store_true", help="skip the bare asyncssh fan-out after each 1-controller run")
    args = ap.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    compile_vastprobe()
    cluster = None
    if args.pg_url is None:
        from tests import pg_cluster

        started = pg_cluster.start()
        if isinstance(started, str):
            raise SystemExit(f"no PostgreSQL: {started}")
        cluster = started
    try:
        print(
            f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        )
        print(
            "| hosts | controllers x --concurrency | wall s | controller CPU s | CPU ms/host | peak RSS MiB (largest) | rows by status | history hosts / observations |"
        )
        print("|---:|---:|---:|---:|---:|---:|---|---|")
        for n in (int(x) for x in args.hosts.split(",")):
            with tempfile.TemporaryDirectory(prefix="vp-fleet-") as td:
                d = Path(td)
                sim = start_sim(n, d, args.sim.split())
                try:
                    for shards in (int(x) for x in args.shards.split(",")):
                        if cluster is not None:
                            url = cluster.url(cluster.create_database(f"scale_{n}_{shards}"))
                        else:
                            url = args.pg_url
                        per = max(16, args.concurrency // shards)
                        before = sim_cpu(sim)
                        r = sweep(d, shards, url, per, args.timeout, args.connect_timeout)
                        r["sim_cpu"] = sim_cpu(sim) - before
                        dup = len(r["targets"]) - len(set(r["targets"]))
                        hist = "-"
                        if cluster is not None:
                            with cluster.connect(f"scale_{n}_{shards}") as con:
                                h = con.execute("SELECT count(*) FROM vastprobe.hosts").fetchone()[0]
                                o = con.execute("SELECT count(*) FROM vastprobe.observations").fetchone()[0]
                            hist = f"{h} / {o}"
                        print(f"| {n} | {shards} x {per} | {r['wall']:.1f} | {r['cpu']:.1f} | {1000 * r['cpu'] / n:.1f} | "
                              f"{r['rss_mib']:.0f} | {r['status']} {r['verdict']}{' DUPLICATES ' + str(dup) if dup else ''} | {hist} |",
                              flush=True)  # fmt: skip
                        print(f"  simulator CPU {r['sim_cpu']:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)
                        if shards == 1 and not args.no_peer:  # the peer: the same hosts, the same hosts in flight
                            peer_cpu, said = bare(d, per, args.timeout)
                            print(f"  bare asyncssh: {peer_cpu:.1f} s CPU ({1000 * peer_cpu / n:.1f} ms/host; {said})",
                                  flush=True)  # fmt: skip
                            print(f"  controller CPU = {r['cpu'] / peer_cpu:.2f}x bare asyncssh", flush=True)
                        if r["errors"]:
                            print(f"  stderr: {r['errors']}", flush=True)
                finally:
                    sim.terminate()
                    sim.wait(60)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
