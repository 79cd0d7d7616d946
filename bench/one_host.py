"""One host, three ways, against the same loopback sshd and the same probe script.

Run by hand (not in CI), as root, with openssh-server and openssh-client installed:

    .venv/bin/python bench/one_host.py [--runs 11]

1. OpenSSH one-shot:   ssh -p PORT root@127.0.0.1 sh -s < script
2. bare asyncssh:      python -c 'import asyncssh; connect; run("sh -s", input=script); print bytes'
3. vastprobe:          vastprobe diagnose root@127.0.0.1:PORT --sample 0 --format json

The three alternate within each round; reported are the medians of wall time and of the client's
CPU (user+sys of the client process tree, RUSAGE_CHILDREN; sshd's side is not counted), and the
ratios the issue asks for.
"""

from __future__ import annotations

import argparse
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
from tests.sshd import start_sshd  # noqa: E402

BARE = """
import asyncio, sys, asyncssh
async def main():
    script = open(sys.argv[4], "rb").read()
    async with asyncssh.connect("127.0.0.1", port=int(sys.argv[1]), username="root", client_keys=[sys.argv[2]],
                                known_hosts=sys.argv[3], config=None, agent_path=None, gss_host=None) as c:
        r = await c.run("sh -s", input=script, encoding=None)
        sys.stdout.buffer.write(r.stdout)
asyncio.run(main())
"""


def measure(cmd: list[str], stdin: bytes | None = None) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, input=stdin, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), len(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=11)
    args = ap.parse_args()
    compile_vastprobe()
    with tempfile.TemporaryDirectory() as d:
        s = start_sshd(Path(d) / "sshd")
        try:
            script_path = Path(d) / "probe.sh"
            py = sys.executable
            script = subprocess.run(
                [py, "-m", "vastprobe", "probe-script", "--sample", "0"], capture_output=True
            ).stdout
            script_path.write_bytes(script)
            ways = {
                "OpenSSH ssh sh -s": (
                    [
                        "ssh",
                        "-q",
                        "-i",
                        str(s.user_key),
                        "-o",
                        f"UserKnownHostsFile={s.known_hosts}",
                        "-o",
                        "BatchMode=yes",
                        "-o",
                        "GSSAPIAuthentication=no",
                        "-p",
                        str(s.port),
                        "root@127.0.0.1",
                        "sh",
                        "-s",
                    ],
                    script,
                ),
                "bare asyncssh one-shot": (
                    [py, "-c", BARE, str(s.port), str(s.user_key), str(s.known_hosts), str(script_path)],
                    None,
                ),
                "vastprobe diagnose --format json": (
                    [
                        py,
                        "-m",
                        "vastprobe",
                        "diagnose",
                        s.target,
                        "-i",
                        str(s.user_key),
                        "--known-hosts",
                        str(s.known_hosts),
                        "--sample",
                        "0",
                        "--format",
                        "json",
                    ],
                    None,
                ),
            }
            results: dict[str, list[tuple[float, float, int]]] = {k: [] for k in ways}
            for cmd, stdin in ways.values():  # warm caches once
                measure(cmd, stdin)
            for _ in range(args.runs):
                for name, (cmd, stdin) in ways.items():
                    results[name].append(measure(cmd, stdin))
        finally:
            s.stop()
    med = {k: (statistics.median(w for w, _, _ in v), statistics.median(c for _, c, _ in v), int(statistics.median(b for _, _, b in v)))
           for k, v in results.items()}  # fmt: skip
    print(f"runs: {args.runs} each, alternating; python {sys.version.split()[0]}")
    print("| way | wall s (median) | client CPU s (median) | stdout bytes |")
    print("|---|---:|---:|---:|")
    for k, (w, c, b) in med.items():
        print(f"| {k} | {w:.3f} | {c:.3f} | {b} |")
    vp, bare, ossh = med["vastprobe diagnose --format json"], med["bare asyncssh one-shot"], med["OpenSSH ssh sh -s"]
    print()
    print(f"vastprobe / bare asyncssh: wall {vp[0] / bare[0]:.2f}x, CPU {vp[1] / bare[1]:.2f}x (target: wall <= 1.1x)")
    print(f"vastprobe / OpenSSH:       wall {vp[0] / ossh[0]:.2f}x, CPU {vp[1] / ossh[1]:.2f}x")


if __name__ == "__main__":
    main()
