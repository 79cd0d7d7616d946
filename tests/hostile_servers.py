"""SSH targets that send what they like, from asyncssh's in-process server on 127.0.0.1: for the
isolation tests (tests/test_pipeline_hostile.py) and bench/hostile_sweep.py.

Each server reads the probe script from stdin, takes the run's boundary from it (`VP_B='…'`) and
answers with a recorded real capture re-framed with that boundary — as a target whose own sshd or
shell forges output would. Behaviours:

- `healthy`: the capture as recorded;
- `quadratic`: the capture with 60 lines of 8 KiB shaped to make the regexes of vastprobe's first
  kernel-log parser backtrack (`(\\S+) invoked oom-killer:` over a run of non-spaces cost 0.27 s a
  line) as its kernel log, and 60 `ss` lines that made the Unix-peer regex (two lazy groups) cost
  0.23 s each in a socket-table section;
- `endless`: the capture's head, then process records in its `s0.proc` section for as long as the
  client reads (`framed=False`: bytes without framing).

The servers run on a loop of their own in a background thread, so a client in this process or in
a child process (`vastprobe sweep`) can talk to them.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "procfs" / "host-vm-kthreads-stat-only"
RECORDED_BOUNDARY = "f1c2" * 8
_VP_B = re.compile(rb"VP_B='([0-9a-f]{16,64})'")

Handler = Callable[[asyncssh.SSHServerProcess], Awaitable[None]]


class _NoAuth(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False


def recorded() -> bytes:
    return (FIXTURE / "probe.out").read_bytes()


async def _boundary(process: asyncssh.SSHServerProcess) -> bytes:
    """The run's boundary, from the script as it arrives: the client keeps stdin open until it has
    the output (the probe's watchdog waits on it), so no end of file comes first."""
    script = b""
    while (m := _VP_B.search(script)) is None or b"\n" not in script[m.end() :]:
        chunk = await process.stdin.read(65536)
        if not chunk:
            break
        script += chunk if isinstance(chunk, bytes) else chunk.encode()
    m = _VP_B.search(script)
    return m.group(1) if m else b"0" * 32


def quadratic_lines(n: int = 60, length: int = 8192) -> list[bytes]:
    shapes = [b"a", b"x(", b"INFO: task ", b"Killed process ", b"oom-kill:constraint=", b"NVRM: Xid ("]
    return [(shapes[i % len(shapes)] * (length // len(shapes[i % len(shapes)]) + 1))[:length] for i in range(n)]


def ss_lines(n: int = 60) -> list[bytes]:
    return [b"@ss u_str ESTAB 0 0 " + b"1  " * 1300 + b"z" for _ in range(n)]


def with_net(raw: bytes, boundary: bytes, lines: list[bytes]) -> bytes:
    """A socket-table section (format 2) before the end marker."""
    end = raw.rfind(b"\n@@" + boundary + b"@@ end")
    net = b"\n@@" + boundary + b"@@ net\n" + b"\n".join(lines) + b"\n@@rc=0\n\n@@" + boundary + b"@@ /net\n"
    return raw[:end] + net + raw[end:]


def with_kmsg(raw: bytes, boundary: bytes, lines: list[bytes]) -> bytes:
    start = b"\n@@" + boundary + b"@@ kmsg\n"
    end = b"\n@@" + boundary + b"@@ /kmsg\n"
    i, j = raw.find(start), raw.find(end)
    body = b"@@source dmesg\n" + b"\n".join(lines) + b"\n@@lines " + str(len(lines)).encode() + b"\n@@rc=0\n"
    return raw[: i + len(start)] + body + raw[j:]


def healthy(delay: float = 0.0, raw: bytes | None = None) -> Handler:
    data = raw if raw is not None else recorded()

    async def handler(process: asyncssh.SSHServerProcess) -> None:
        b = await _boundary(process)
        if delay:
            await asyncio.sleep(delay)
        process.stdout.write(data.replace(RECORDED_BOUNDARY.encode(), b))
        process.exit(0)

    return handler


def quadratic(n: int = 60) -> Handler:
    b = RECORDED_BOUNDARY.encode()
    return healthy(raw=with_net(with_kmsg(recorded(), b, quadratic_lines(n)), b, ss_lines(n)))


def endless(framed: bool = True) -> Handler:
    raw = recorded()
    head = raw[: raw.find(b"@@ s0.proc\n") + len(b"@@ s0.proc\n")]
    record = b"".join(
        b"/proc/%d/stat:%d (python3) S 1 %d %d 0 -1 4194304 1 0 0 0 5 3 0 0 20 0 1 0 %d 1 1 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0\n"
        % (pid, pid, pid, pid, 1000 + pid)
        for pid in range(10_000, 10_600)
    )
    junk = bytes(range(256)) * 256

    async def handler(process: asyncssh.SSHServerProcess) -> None:
        b = await _boundary(process)
        if framed:
            process.stdout.write(head.replace(RECORDED_BOUNDARY.encode(), b))
        try:
            while True:
                process.stdout.write(record if framed else junk)
                await process.stdout.drain()
        except (asyncssh.Error, OSError, BrokenPipeError, ConnectionError):
            pass

    return handler


#: A format-2 capture (the section order of today's probe), with the parameters it ran with.
ORDERED = FIXTURE.parent / "waits-host"


def ordered_params() -> list[str]:
    """The --log and --artifacts arguments the ORDERED capture was made with."""
    p = json.loads((ORDERED / "params.json").read_text())
    return [*(a for log in p["logs"] for a in ("--log", log)), *(a for g in p["artifacts"] for a in ("--artifacts", g))]


def cut(after: str, signal: str | None = "KILL", hang: bool = False) -> Handler:
    """The ORDERED capture up to the end of section `after` (or its start, `after` being
    "s0.proc!"), then: killed by `signal` (as when a tenant kills the probe's session), or silence
    for ever (`hang`: a probe stuck on the target)."""
    raw = (ORDERED / "probe.out").read_bytes()
    b = json.loads((ORDERED / "params.json").read_text())["boundary"].encode()
    name = after.rstrip("!").encode()
    mark = b"\n@@" + b + b"@@ " + (name if after.endswith("!") else b"/" + name) + b"\n"
    head = raw[: raw.find(mark) + len(mark)]

    async def handler(process: asyncssh.SSHServerProcess) -> None:
        bnd = await _boundary(process)
        process.stdout.write(head.replace(b, bnd))
        if hang:
            await asyncio.sleep(3600)
        if signal:
            process.exit_with_signal(signal)
        else:
            process.exit(0)

    return handler


def silent(times: int, status: int | None = None) -> Handler:
    """Writes nothing and ends (killed by SIGKILL, or with `status`) on its first `times` runs;
    then answers as `healthy`. `calls` counts the runs."""
    ok = healthy()

    async def handler(process: asyncssh.SSHServerProcess) -> None:
        handler.calls += 1  # type: ignore[attr-defined]
        if handler.calls > times:  # type: ignore[attr-defined]
            await ok(process)
            return
        await _boundary(process)
        if status is None:
            process.exit_with_signal("KILL")
        else:
            process.exit(status)

    handler.calls = 0  # type: ignore[attr-defined]
    return handler


@dataclass
class Fleet:
    """In-process SSH servers, one per handler, on 127.0.0.1; `targets` in handler order."""

    handlers: list[Handler]
    targets: list[str] = field(default_factory=list)
    known_hosts: Path | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _servers: list[asyncssh.SSHAcceptor] = field(default_factory=list)
    _thread: threading.Thread | None = None

    def start(self, directory: Path) -> Fleet:
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()
        key = asyncssh.generate_private_key("ssh-ed25519")

        async def listen() -> None:
            for h in self.handlers:
                srv = await asyncssh.listen("127.0.0.1", 0, server_host_keys=[key], server_factory=_NoAuth,
                                            process_factory=h, encoding=None)  # fmt: skip
                self._servers.append(srv)
            ready.set()

        def run() -> None:
            loop.run_until_complete(listen())
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="hostile-sshd", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("the in-process SSH servers did not start")
        pub = key.export_public_key("openssh").decode().strip()
        self.targets = [f"root@127.0.0.1:{s.get_port()}" for s in self._servers]
        self.known_hosts = directory / "known_hosts"
        self.known_hosts.write_text("".join(f"[127.0.0.1]:{s.get_port()} {pub}\n" for s in self._servers))
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def close() -> None:
            for s in self._servers:
                s.close()

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
