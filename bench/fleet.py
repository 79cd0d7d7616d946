"""The controller's cost of sweeping a loopback fleet: vastprobe sweep vs parallel-ssh (pssh).

Run by hand (not in CI), as root, with openssh-server and pssh installed (Debian: apt-get install pssh):

    .venv/bin/python bench/fleet.py [--live 32] [--rounds 7] [--big 1000]

Both run the same probe script (`vastprobe probe-script --sample 0`) on the same live hosts (one
sshd listens on up to 16 loopback addresses, so two sshd processes serve 32 hosts) at the same
concurrency (32), alternating, --rounds times. Reported: the controller's CPU (user+sys of its
whole process tree, RUSAGE_CHILDREN: pssh's ssh children included; sshd's side is not), wall time
and peak RSS of its largest process (GNU time's %M, per run). Then one vastprobe sweep of --big targets (the
live hosts plus dead loopback ports) for its time, its bound and peak RSS.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bytecode import compile_vastprobe  # noqa: E402
from tests.sshd import dead_port, keygen, start_sshd  # noqa: E402

CONCURRENCY = 32
TIMEOUT = 60


def run(cmd: list[str], stdin: bytes | None = None, out: Path | None = None) -> tuple[float, float, float, int]:
    """(wall s, CPU s of the process tree, peak RSS MiB of its largest process, exit code).
    GNU time's %M is the largest ru_maxrss of the command and the children it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.NamedTemporaryFile("r") as rss_file:
        t0 = time.perf_counter()
        with open(out or "/dev/null", "wb") as f:
            r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file.name, *cmd], input=stdin, stdout=f,
                               stderr=subprocess.DEVNULL)  # fmt: skip
        wall = time.perf_counter() - t0
        rss_kb = int(rss_file.read().split()[-1])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rss_kb / 1024, r.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--live", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--big", type=int, default=1000)
    args = ap.parse_args()
    compile_vastprobe()
    py = sys.executable
    with tempfile.TemporaryDirectory() as td:
        d = Path(td)
        key = keygen(d / "user")
        groups = [list(range(i, min(i + 16, args.live + 1))) for i in range(1, args.live + 1, 16)]
        servers = [
            start_sshd(d / f"s{n}", user_key=key, addresses=[f"127.0.0.{i}" for i in g]) for n, g in enumerate(groups)
        ]
        try:
            kh = d / "known_hosts"
            kh.write_text("".join(s.known_hosts.read_text() for s in servers))
            live = [f"root@127.0.0.{i}:{s.port}" for s, g in zip(servers, groups, strict=True) for i in g]
            hosts = d / "hosts.txt"
            hosts.write_text("\n".join(live) + "\n")
            script = subprocess.run(
                [py, "-m", "vastprobe", "probe-script", "--sample", "0"], capture_output=True, check=True
            ).stdout
            pssh = ["parallel-ssh", "-h", str(hosts), "-p", str(CONCURRENCY), "-t", str(TIMEOUT), "-I",
                    "-o", str(d / "pssh-out"),
                    "-x", f"-i {key} -o UserKnownHostsFile={kh} -o BatchMode=yes -o GSSAPIAuthentication=no",
                    "sh", "-s"]  # fmt: skip
            vp = [py, "-m", "vastprobe", "sweep", str(hosts), "--concurrency", str(CONCURRENCY), "--timeout", str(TIMEOUT),
                  "--sample", "0", "--format", "ndjson", "-i", str(key), "--known-hosts", str(kh)]  # fmt: skip
            results: dict[str, list[tuple[float, float, float, int]]] = {"parallel-ssh": [], "vastprobe sweep": []}
            for _ in range(args.rounds):
                results["parallel-ssh"].append(run(pssh, stdin=script))
                results["vastprobe sweep"].append(run(vp, out=d / "vp.ndjson"))
            ok = sum(1 for line in (d / "vp.ndjson").read_text().splitlines() if '"status":"ok"' in line)
            print(
                f"live hosts: {len(live)}; vastprobe rows ok in the last round: {ok}; concurrency {CONCURRENCY}; rounds {args.rounds}"
            )
            print("| controller | CPU s (median) | wall s (median) | peak RSS MiB (largest process) | exit codes |")
            print("|---|---:|---:|---:|---|")
            med = {}
            for name, rs in results.items():
                med[name] = (statistics.median(c for _, c, _, _ in rs), statistics.median(w for w, _, _, _ in rs))
                rss = max(m for _, _, m, _ in rs)
                print(
                    f"| {name} | {med[name][0]:.2f} | {med[name][1]:.2f} | {rss:.0f} | {sorted({c for *_, c in rs})} |"
                )
            v, p = med["vastprobe sweep"], med["parallel-ssh"]
            print(
                f"\nvastprobe / parallel-ssh: CPU {v[0] / p[0]:.2f}x (target <= 0.5x), wall {v[1] / p[1]:.2f}x (target <= 1.0x)"
            )
            if args.big:
                dead = [f"root@127.0.0.1:{dead_port()}" for _ in range(args.big - len(live))]
                big = d / "big.txt"
                big.write_text("\n".join(live + dead) + "\n")
                cmd = [*vp[:4], str(big), *vp[5:]]
                wall, cpu, rss, rc = run(cmd, out=d / "big.ndjson")
                rows = (d / "big.ndjson").read_text().splitlines()
                bound = math.ceil(len(rows) / CONCURRENCY) * TIMEOUT
                print(f"\n{args.big}-target sweep ({len(live)} live, {len(dead)} dead ports): {len(rows)} rows, wall {wall:.1f}s "
                      f"(bound {bound}s), controller CPU {cpu:.1f}s, peak RSS {rss:.0f} MiB, exit {rc}")  # fmt: skip
        finally:
            for s in servers:
                s.stop()


if __name__ == "__main__":
    main()
