"""The controller's floor at scale: a bare asyncssh fan-out, the least any Python controller on asyncssh
does for a sweep. It connects to every host of an inventory (known_hosts checked, options built once),
runs the same probe script with `sh -s` (the same parameters as the sweep it is compared with), reads
the output and discards it, with the same number of hosts in flight. No parsing, no rules, no report,
no history: what vastprobe's controller spends beyond it is the price of everything else.

    python bench/peers/bare_asyncssh.py FLEET_TXT KNOWN_HOSTS --concurrency 256 --log /tmp/x.log

Prints one line `hosts N ok K failed F bytes B`; its CPU is measured by the caller (wait4), as the
sweep's is (bench/fleet_scale.py).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
from pathlib import Path

import asyncssh

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vastprobe.probe.script import ProbeParams, render_script  # noqa: E402


def split(target: str) -> tuple[str, str, int]:
    user, _, hostport = target.rpartition("@")
    host, _, port = hostport.rpartition(":")
    return user or "root", host, int(port)


async def fan_out(targets: list[str], known: Path, script: bytes, concurrency: int, timeout: float) -> tuple[int, int]:
    options = asyncssh.SSHClientConnectionOptions(
        known_hosts=asyncssh.read_known_hosts(str(known)), client_keys=None, agent_path=None,
        connect_timeout=timeout, keepalive_interval=0,
    )  # fmt: skip
    sem = asyncio.Semaphore(concurrency)
    ok = size = 0

    async def one(target: str) -> None:
        nonlocal ok, size
        user, host, port = split(target)
        async with sem:
            try:
                async with asyncssh.connect(host, port, username=user, options=options) as conn:
                    r = await asyncio.wait_for(conn.run("sh -s", input=script, encoding=None), timeout)
                    size += len(r.stdout or b"")
                    ok += 1
            except (TimeoutError, OSError, asyncssh.Error):
                pass

    await asyncio.gather(*(one(t) for t in targets))
    return ok, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fleet", type=Path)
    ap.add_argument("known_hosts", type=Path)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--log", action="append", default=[])
    args = ap.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    targets = [t.strip() for t in args.fleet.read_text().splitlines() if t.strip()]
    script = render_script(ProbeParams(logs=tuple(args.log))).encode()
    ok, size = asyncio.run(fan_out(targets, args.known_hosts, script, args.concurrency, args.timeout))
    print(f"hosts {len(targets)} ok {ok} failed {len(targets) - ok} bytes {size}")


if __name__ == "__main__":
    main()
