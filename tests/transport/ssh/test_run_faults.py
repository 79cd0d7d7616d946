"""Faults a real sshd cannot easily give, from asyncssh's in-process server on 127.0.0.1:
a connection dropped mid-output, a slow drip of bytes, a signal exit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import asyncssh
import pytest

from vastprobe.transport.ssh.run import run_ssh
from vastprobe.transport.ssh.settings import SshOptions

Handler = Callable[[asyncssh.SSHServerProcess], Awaitable[None]]


class NoAuth(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False


async def serve(handler: Handler) -> asyncssh.SSHAcceptor:
    key = asyncssh.generate_private_key("ssh-ed25519")
    return await asyncssh.listen("127.0.0.1", 0, server_host_keys=[key], server_factory=NoAuth,
                                 process_factory=handler, encoding=None)  # fmt: skip


def opts(timeout: float = 10) -> SshOptions:
    return SshOptions(
        host_key_check="off", timeout=timeout, connect_timeout=5, extra={"client_keys": None, "agent_path": None}
    )


async def run_against(handler: Handler, timeout: float = 10):
    srv = await serve(handler)
    try:
        return await run_ssh(f"root@127.0.0.1:{srv.get_port()}", "echo hi\n", 1 << 20, opts(timeout))
    finally:
        srv.close()
        await srv.wait_closed()


@pytest.mark.asyncio
async def test_disconnect_mid_output() -> None:
    async def handler(process: asyncssh.SSHServerProcess) -> None:
        process.stdout.write(b"\n@@" + b"ab" * 16 + b"@@ meta\npartial")
        await asyncio.sleep(0.1)
        process.channel.get_connection().abort()

    res = await run_against(handler)
    assert res.status == "probe-error" and "connection was lost" in (res.error or "")


@pytest.mark.asyncio
async def test_slow_drip_ends_at_the_timeout() -> None:
    async def handler(process: asyncssh.SSHServerProcess) -> None:
        for _ in range(600):
            process.stdout.write(b".")
            await asyncio.sleep(0.5)

    t0 = time.monotonic()
    res = await run_against(handler, timeout=2)
    assert res.status == "timeout" and time.monotonic() - t0 < 6


@pytest.mark.asyncio
async def test_killed_by_signal_still_returns_output() -> None:
    async def handler(process: asyncssh.SSHServerProcess) -> None:
        process.stdout.write(b"some bytes")
        process.exit_with_signal("KILL")

    res = await run_against(handler)
    assert res.status == "ok" and res.output == b"some bytes"


@pytest.mark.asyncio
async def test_auth_refused_by_server() -> None:
    class Closed(asyncssh.SSHServer):
        def begin_auth(self, username: str) -> bool:
            return True  # demands auth, accepts none

    key = asyncssh.generate_private_key("ssh-ed25519")
    srv = await asyncssh.listen("127.0.0.1", 0, server_host_keys=[key], server_factory=Closed)
    try:
        res = await run_ssh(f"root@127.0.0.1:{srv.get_port()}", "echo\n", 1 << 20, opts())
        assert res.status == "auth-failed"
    finally:
        srv.close()


@pytest.mark.asyncio
async def test_hostile_disconnect_reason_is_inert_on_the_terminal() -> None:
    import io

    from vastprobe.model import HostReport
    from vastprobe.render.table import render_reports

    evil = "\x1b]0;owned\x07[bold]x[/bold]\x1b[2J"

    class Hostile(asyncssh.SSHServer):
        def begin_auth(self, username: str) -> bool:
            return False

        def session_requested(self) -> bool:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, evil)

    key = asyncssh.generate_private_key("ssh-ed25519")
    srv = await asyncssh.listen("127.0.0.1", 0, server_host_keys=[key], server_factory=Hostile)
    try:
        res = await run_ssh(f"root@127.0.0.1:{srv.get_port()}", "echo\n", 1 << 20, opts())
    finally:
        srv.close()
    assert res.status != "ok" and res.error and "\x1b" in res.error, res  # the server's words, verbatim
    buf = io.StringIO()
    render_reports([HostReport("t", res.status, res.error, "unknown", (), None, {})], file=buf)
    assert "\x1b" not in buf.getvalue() and "\\x1b]0;owned\\x07[bold]x[/bold]" in buf.getvalue()


def test_hostile_words_reach_stderr_escaped(tmp_path) -> None:
    """A server whose refusal holds terminal escapes and a bidi override: collect prints its words
    on stderr, escaped like stdout (the `off` warning too)."""
    import subprocess
    import sys
    import threading

    evil = "\x1b]0;owned\x07\u202eevil\x1b[2J"

    class Hostile(asyncssh.SSHServer):
        def begin_auth(self, username: str) -> bool:
            return False

        def session_requested(self) -> bool:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, evil)

    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict = {}

    async def serve_forever() -> None:
        key = asyncssh.generate_private_key("ssh-ed25519")
        box["srv"] = await asyncssh.listen("127.0.0.1", 0, server_host_keys=[key], server_factory=Hostile)
        started.set()

    thread = threading.Thread(
        target=lambda: (loop.run_until_complete(serve_forever()), loop.run_forever()), daemon=True
    )
    thread.start()
    assert started.wait(10)
    try:
        port = box["srv"].get_port()
        r = subprocess.run([sys.executable, "-m", "vastprobe", "collect", f"root@127.0.0.1:{port}", "-o", "-",
                            "--host-key-check", "off", "--sample", "0"],
                           capture_output=True, text=True, timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})  # fmt: skip
        assert r.returncode == 3
        assert "\\x1b]0;owned\\x07\\u202eevil\\x1b[2J" in r.stderr, r.stderr
        assert "\x1b" not in r.stderr and "\u202e" not in r.stderr and "\x07" not in r.stderr
        assert r.stderr.count("host key checking is OFF") == 1
    finally:
        loop.call_soon_threadsafe(box["srv"].close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
