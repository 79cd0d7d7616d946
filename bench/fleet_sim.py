"""A fleet of simulated SSH hosts in one process, on loopback only: a load generator for the
controller (`vastprobe sweep` at 1,000-20,000 hosts), not a stand-in for the product's tests.

Each host is an asyncssh in-process server on its own address and port in 127.0.0.0/8 (127.1.0.1
and up, `--per-address` ports each). It reads the probe script the controller sends, takes the
run's boundary from it (`VP_B='…'`), and answers with a recorded capture of a real host re-framed
with that boundary: the probe's output as the real host gave it. The captures are
fixtures/reports/captures/*.json (recorded by fixtures/reports/record.py on real process trees on the
development VM, 2026-12-03; see fixtures/reports/NOTE.md): `healthy` (a worker computing and writing its
log), `stalled` (`stopped-child`: a trainer stopped with SIGSTOP, or `orphan-pipe`: a server holding
tee's pipe), `oom` (`seed-inside`: a benchmark OOM-killed in a 64 MiB memory cgroup, its parent
waiting forever). There is no recorded capture of a GPU host here, so none is busy on a GPU.

Faults, each a share of the hosts (chosen by a seeded shuffle, so a fleet is the same every run):
`--slow` hosts answer after `--slow-delay` seconds, `--dead` hosts are in the inventory but nobody
listens there (connection refused), `--wrong-key` hosts present a host key known_hosts does not
hold. Every host answers after `--latency` ms (plus up to `--jitter` ms).

    python bench/fleet_sim.py --hosts 20000 --dir /tmp/fleet      # writes fleet.txt and known_hosts
    vastprobe sweep /tmp/fleet/fleet.txt --known-hosts /tmp/fleet/known_hosts --format ndjson \
        --log /tmp/vastprobe-golden/job.log

The captures were recorded with one `--log` each, and the probe's output holds that log's section:
sweep with one `--log` (any path), or every host reads as forged output (a section the probe was
not asked for) and is not diagnosed.

It prints `ready N` on stdout when every host listens, and runs until SIGINT or SIGTERM. One
process serves as many hosts as its open-file limit allows (one listening socket a host, and room
for the connections in flight); a larger fleet is split between forked workers of the same kind.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import multiprocessing
import os
import random
import re
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import asyncssh

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "fixtures" / "reports" / "captures"
KINDS = {"healthy": ["healthy"], "stalled": ["stopped-child", "orphan-pipe"], "oom": ["seed-inside"]}
_VP_B = re.compile(rb"VP_B='([0-9a-f]{16,64})'")
MAX_SCRIPT = 1 << 20  # the probe script is ~60 KB; read no more than this before answering


@dataclass(frozen=True)
class Capture:
    name: str
    raw: bytes
    boundary: bytes


def load_captures() -> dict[str, Capture]:
    out = {}
    for names in KINDS.values():
        for name in names:
            doc = json.loads((CAPTURES / f"{name}.json").read_text())
            out[name] = Capture(name, base64.b64decode(doc["raw_b64"]), doc["params"]["boundary"].encode())
    return out


class _NoAuth(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False  # any user, no credentials: the simulator checks the controller's load, not its keys


@dataclass(frozen=True)
class Host:
    address: str
    port: int
    kind: str  # healthy | stalled | oom
    capture: str
    fault: str  # "" | slow | dead | wrong-key

    @property
    def target(self) -> str:
        return f"root@{self.address}:{self.port}"


def plan(args: argparse.Namespace) -> list[Host]:
    rng = random.Random(args.seed)
    mix = {k: float(v) for k, v in (part.split("=") for part in args.mix.split(","))}
    total = sum(mix.values())
    hosts = []
    n = args.hosts
    order = list(range(n))
    rng.shuffle(order)
    faults = [""] * n
    cut = 0
    for fault, share in (("dead", args.dead), ("wrong-key", args.wrong_key), ("slow", args.slow)):
        k = round(share * n)
        for i in order[cut : cut + k]:
            faults[i] = fault
        cut += k
    for i in range(n):
        a, p = divmod(i, args.per_address)
        address = f"127.{1 + a // 62500}.{(a // 250) % 250}.{a % 250 + 1}"
        x = rng.random() * total
        kind = next(k for k, share in mix.items() if (x := x - share) < 0) if total else "healthy"
        capture = rng.choice(KINDS[kind])
        hosts.append(Host(address, args.port + p, kind, capture, faults[i]))
    return hosts


def handler(capture: Capture, delay: float, jitter: float, rng: random.Random):  # type: ignore[no-untyped-def]
    async def answer(process: asyncssh.SSHServerProcess) -> None:
        script = b""
        try:
            while len(script) < MAX_SCRIPT:
                chunk = await process.stdin.read(65536)
                if not chunk:
                    break
                script += chunk if isinstance(chunk, bytes) else chunk.encode()
                if _VP_B.search(script) and b"\n" in script[_VP_B.search(script).end() :]:  # type: ignore[union-attr]
                    break
            m = _VP_B.search(script)
            boundary = m.group(1) if m else b"0" * 32
            wait = delay + rng.random() * jitter
            if wait:
                await asyncio.sleep(wait)
            process.stdout.write(capture.raw.replace(capture.boundary, boundary))
            process.exit(0)
        except (asyncssh.Error, OSError, BrokenPipeError, ConnectionError):
            pass

    return answer


async def serve(args: argparse.Namespace, hosts: list[Host], keys: tuple[str, str], ready: object) -> None:
    captures = load_captures()
    good, wrong = (asyncssh.import_private_key(k) for k in keys)
    rng = random.Random(args.seed + 1 + os.getpid())
    handlers = {
        (name, slow): handler(c, args.latency / 1000 + (args.slow_delay if slow else 0), args.jitter / 1000, rng)
        for name, c in captures.items()
        for slow in (False, True)
    }
    servers = []
    t0 = time.monotonic()
    for h in hosts:
        if h.fault == "dead":
            continue
        key = wrong if h.fault == "wrong-key" else good
        server = await asyncssh.listen(h.address, h.port, server_host_keys=[key], server_factory=_NoAuth,
                                       process_factory=handlers[(h.capture, h.fault == "slow")], encoding=None,
                                       backlog=1024, reuse_address=True)  # fmt: skip
        servers.append(server)
    ready.put((len(servers), time.monotonic() - t0))  # type: ignore[attr-defined]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--dir", type=Path, required=True, help="where fleet.txt, fleet.json and known_hosts go")
    ap.add_argument("--port", type=int, default=20022, help="the first port of each address")
    ap.add_argument("--per-address", type=int, default=50, help="hosts (ports) on each 127.x.y.z address")
    ap.add_argument("--mix", default="healthy=0.9,stalled=0.07,oom=0.03", help="kinds of hosts and their shares")
    ap.add_argument("--latency", type=float, default=20.0, help="ms before each host answers")
    ap.add_argument("--jitter", type=float, default=10.0, help="up to this many ms more, at random")
    ap.add_argument("--slow", type=float, default=0.01, help="share of hosts that answer late")
    ap.add_argument("--slow-delay", type=float, default=5.0, help="seconds a slow host adds")
    ap.add_argument("--dead", type=float, default=0.005, help="share of hosts nobody listens for")
    ap.add_argument("--wrong-key", type=float, default=0.005, help="share of hosts with a host key not in known_hosts")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--workers", type=int, default=1, help="processes serving the hosts (more: more CPUs)")
    args = ap.parse_args()
    if args.hosts < 1 or args.per_address < 1 or args.port + args.per_address > 65536:
        sys.exit("fleet_sim: --hosts, --per-address and --port must leave every port in 1-65535")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    room = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 2048  # connections in flight, the loop, the log
    if room < 100:
        sys.exit(f"fleet_sim: the open-file limit ({soft}) leaves no room for hosts (ulimit -n)")
    args.dir.mkdir(parents=True, exist_ok=True)
    hosts = plan(args)
    good = asyncssh.generate_private_key("ssh-ed25519")
    wrong = asyncssh.generate_private_key("ssh-ed25519")
    pub = good.export_public_key("openssh").decode().strip()
    (args.dir / "known_hosts").write_text("".join(f"[{h.address}]:{h.port} {pub}\n" for h in hosts))
    (args.dir / "fleet.txt").write_text("".join(h.target + "\n" for h in hosts))
    (args.dir / "fleet.json").write_text(
        json.dumps([{"target": h.target, "kind": h.kind, "capture": h.capture, "fault": h.fault} for h in hosts])
    )
    keys = (good.export_private_key().decode(), wrong.export_private_key().decode())
    workers = max(args.workers, math.ceil(len(hosts) / room))
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Queue()
    step = math.ceil(len(hosts) / workers)
    procs = [
        ctx.Process(target=lambda part=hosts[i : i + step]: asyncio.run(serve(args, part, keys, ready)), daemon=True)
        for i in range(0, len(hosts), step)
    ]
    for p in procs:
        p.start()
    listening, took = 0, 0.0
    for _ in procs:
        n, t = ready.get(timeout=600)
        listening, took = listening + n, max(took, t)
    print(f"ready {len(hosts)} ({listening} listening, {len(procs)} process(es), {took:.1f} s)", flush=True)
    stop = [False]

    def on_signal(*_: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop[0] and all(p.is_alive() for p in procs):
        time.sleep(0.5)  # a worker that died ends the fleet: a load generator that lies is worse than none
    for p in procs:
        if p.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGTERM)
    for p in procs:
        p.join(30)


if __name__ == "__main__":
    main()
