"""SSH targets over asyncssh: one connection (through the jump hosts, each connected here), one
exec channel, the script on stdin, the framed output read back under a cap. Every way a run can
end is a status with a sentence (failures.py), never a hang or a traceback. A watch session
keeps its connection across runs (`kept`).

asyncssh's sharp edges handled here (its issue numbers in brackets): its timeouts do not cover
channel open [#626], so the whole host is wrapped in one deadline; `run()` buffers everything
[#754], so output is read in chunks up to the cap; ProxyJump hops from ssh_config would not get
our keys or known_hosts [#698], so jump hosts are connected here. The rest lives beside it:
config.py (resolution), keys.py (keys and agent), hostkeys.py (known_hosts and the policy),
failures.py (statuses and sentences).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vastprobe.notices import say
from vastprobe.targets import TargetError, parse_target
from vastprobe.transport.base import TransportResult
from vastprobe.transport.ssh.asyncssh_lib import asyncssh
from vastprobe.transport.ssh.config import Resolved, hop_options, resolve
from vastprobe.transport.ssh.failures import Attempt, describe
from vastprobe.transport.ssh.hostkeys import HostKeyClient, known_hosts_for, warn_if_off
from vastprobe.transport.ssh.keys import client_keys
from vastprobe.transport.ssh.settings import SshOptions

__all__ = ["run_ssh"]


async def _connect(r: Resolved, opts: SshOptions, tunnel: Any, att: Attempt, agents: list[Any]) -> Any:
    client = HostKeyClient(r, att)
    known = known_hosts_for(r)
    keys, agent = await client_keys(r, att, opts.verbose)
    if agent is not None:
        agents.append(agent)
    if opts.verbose:
        say(f"vastprobe: debug: connecting to {r.display} (host keys: {r.host_key_check}, {r.policy_source})")
    kwargs: dict[str, Any] = dict(
        port=r.port,
        username=r.user,
        known_hosts=known,
        client_factory=lambda: client,
        config=None,
        connect_timeout=r.connect_timeout,
        login_timeout=r.connect_timeout,
        gss_host=None,
        passphrase=None,
        password=None,
        kbdint_auth=False,
        password_auth=False,
        tunnel=tunnel,
        client_keys=keys or None,
        agent_path=None,  # the agent's keys were fetched above, in OpenSSH's order
        encryption_algs=CIPHERS,
        kex_algs=r.kex_algorithms or kex_algs(),
    )
    kwargs.update(opts.extra)
    return await asyncssh.connect(r.host, **kwargs)


#: asyncssh's own list with AES-GCM first: one AEAD call per packet, where its ChaCha20-Poly1305
#: builds three cipher contexts per packet (17 us against 5 us for a 2.5 KB packet here, ~1 ms a host). Both are
#: OpenSSH's defaults; a server that offers neither still gets CTR.
CIPHERS = (
    "aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
    "aes256-ctr", "aes192-ctr", "aes128-ctr",
)  # fmt: skip


#: Key exchanges offered first, where asyncssh has them: X25519 costs the client 0.2 ms of CPU a
#: connection less than the ML-KEM hybrid asyncssh offers first (1.74 against 1.97 ms a connection,
#: handshake and all, against an asyncssh server here), and a short list is cheaper to negotiate.
#: The rest of asyncssh's list follows, so a server that takes only a post-quantum hybrid (or only
#: Diffie-Hellman) still gets one. KexAlgorithms in ssh_config or -o replaces the order, as in
#: OpenSSH (docs/security.md says what the default trades).
KEX_FIRST = ("curve25519-sha256", "curve25519-sha256@libssh.org")


@functools.cache
def kex_algs() -> tuple[str, ...]:
    """KEX_FIRST, then asyncssh's defaults in its order (GSS key exchanges left out: vastprobe
    turns GSS off)."""
    from asyncssh.kex import get_default_kex_algs

    offered = [a.decode("ascii") for a in get_default_kex_algs() if not a.startswith(b"gss-")]
    return tuple([a for a in KEX_FIRST if a in offered] + [a for a in offered if a not in KEX_FIRST])


class LostMidOutput(Exception):
    pass


async def _read_capped(
    proc: asyncssh.SSHClientProcess, cap: int, buf: bytearray, take: Callable[[int], bool] | None = None
) -> bool:
    """The output into `buf` (the caller's: what arrived stays there when the deadline cuts the
    read), up to `cap` bytes; whether reading stopped early: at the cap, or when `take` (a sweep's
    budget for bytes in flight across all hosts) refused the next chunk."""
    try:
        while len(buf) < cap:
            chunk = await proc.stdout.read(min(65536, cap - len(buf)))
            if not chunk:
                return False
            if take is not None and not take(len(chunk)):
                return True
            buf += chunk if isinstance(chunk, bytes) else chunk.encode()
    except (asyncssh.Error, OSError) as exc:
        if isinstance(exc, TimeoutError):
            raise
        raise LostMidOutput(str(exc)) from exc
    return True


@dataclass
class _Run:
    """One run so far: what a failure's sentence names (where it was, whose settings, the phase,
    what the connection offered, the bytes that arrived) and what its end closes or keeps."""

    target_text: str
    opts: SshOptions
    r: Resolved
    here: str  # the target as the messages name it
    t0: float
    timings: dict[str, float]
    where: str  # here, or a jump host's words while it is connected
    hop_r: Resolved  # whose settings a failure is told with: r, or a jump host's while it is connected
    buf: bytearray = field(default_factory=bytearray)
    conns: list[Any] = field(default_factory=list)
    agents: list[Any] = field(default_factory=list)
    att: Attempt = field(default_factory=Attempt)
    phase: str = "connect"
    finished: bool = False


async def run_ssh(
    target_text: str,
    script: str | Callable[[float], str],
    cap: int,
    opts: SshOptions,
    take: Callable[[int], bool] | None = None,
    kept: list[Any] | None = None,
) -> TransportResult:
    """`script` may be a function of the seconds left once connected (the probe's own deadline
    must come before this side gives up). What arrived before a timeout or a lost connection is
    kept in the result, with the status that says how the run ended. `kept`: a session's
    connections (transport.SshTransport.session): used when alive, filled by a run that
    connects, emptied by one that fails."""
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    try:
        r = resolve(parse_target(target_text), opts)
    except (TargetError, OSError, ValueError) as exc:
        return TransportResult("probe-error", f"{target_text}: {exc}", b"", None, False, timings)
    warn_if_off(r, target_text)
    # the resolved user@host:port only where ssh_config or the defaults changed what was typed
    here = target_text if r.display == target_text else f"{target_text} ({r.display})"
    run = _Run(target_text, opts, r, here, t0, timings, where=here, hop_r=r)
    reuse = kept is not None and bool(kept) and not kept[-1].is_closed()
    try:
        async with asyncio.timeout(opts.timeout):
            conn = await _connected(run, kept[-1] if reuse and kept is not None else None)
            return await _probe(run, conn, script, cap, take)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
            raise
        return _failed(run, exc)
    finally:
        _release(run, kept, reuse)


async def _connected(run: _Run, reused: Any) -> Any:
    """The target's connection: `reused` (a session's, alive), else a new one, through each jump
    host in turn (each connected here, with the target's keys and known_hosts)."""
    r, opts = run.r, run.opts
    tunnel = None
    for hop in r.proxy_jump.split(",") if r.proxy_jump and reused is None else []:
        run.hop_r = hop_r = resolve(parse_target(hop.strip()), hop_options(opts))
        run.where = f"{run.target_text} via jump host {hop.strip()} ({hop_r.display})"
        warn_if_off(hop_r, hop.strip())
        tunnel = await _connect(hop_r, opts, tunnel, run.att, run.agents)
        run.conns.append(tunnel)
        run.att = Attempt()
    run.hop_r = r
    run.where = run.here
    conn = reused
    if reused is None:
        conn = await _connect(r, opts, tunnel, run.att, run.agents)
        run.conns.append(conn)
    for a in run.agents:
        a.close()
    run.agents.clear()
    run.timings["connect"] = round(time.monotonic() - run.t0, 4)
    return conn


async def _probe(
    run: _Run, conn: Any, script: str | Callable[[float], str], cap: int, take: Callable[[int], bool] | None
) -> TransportResult:
    """`sh -s` on one exec channel, the script on stdin, the output read up to the cap."""
    run.phase = "probe"
    where, timings, buf = run.where, run.timings, run.buf
    t1 = time.monotonic()
    text = script(run.opts.timeout - (t1 - run.t0)) if callable(script) else script
    proc = await conn.create_process("sh -s", encoding=None, stderr=asyncssh.STDOUT)
    # a --log path's own bytes, not UTF-8 ones. No EOF: the probe's watchdog waits on its stdin,
    # whose end is the client gone (script.sh); the channel closes with the probe. A remote
    # side that closed its stdin early: what it printed still counts
    with contextlib.suppress(asyncssh.Error, OSError):
        proc.stdin.write(text.encode("utf-8", "surrogateescape"))
    try:
        truncated = await _read_capped(proc, cap, buf, take)
    except LostMidOutput as lost:
        timings["probe"] = round(time.monotonic() - t1, 4)
        return TransportResult(
            "probe-error",
            f"{where}: the connection was lost before the probe finished ({len(buf)} bytes arrived: {lost})",
            bytes(buf), None, False, timings,
        )  # fmt: skip
    output = bytes(buf)
    if truncated:
        proc.close()
        exit_status = None
    else:
        await proc.wait_closed()
        exit_status = proc.exit_status
    timings["probe"] = round(time.monotonic() - t1, 4)
    signal_name = proc.exit_signal[0] if not truncated and proc.exit_signal else None
    if exit_status is None and not truncated and signal_name is None:
        return TransportResult(
            "probe-error",
            f"{where}: the connection was lost before the probe finished ({len(output)} bytes arrived)",
            output, None, False, timings,
        )  # fmt: skip
    if exit_status is not None and exit_status < 0:  # asyncssh's -1: ended by a signal
        exit_status = None
    run.finished = True
    return TransportResult("ok", None, output, exit_status, truncated, timings, signal_name)


def _failed(run: _Run, exc: BaseException) -> TransportResult:
    """How the run failed, as a status and a sentence (failures.describe); what arrived before the
    deadline is analysed, and the report says so."""
    if isinstance(exc, (TargetError, ValueError)) and run.phase == "connect" and not isinstance(exc, asyncssh.Error):
        return TransportResult("probe-error", f"{run.where}: {exc}", b"", None, False, run.timings)
    f = describe(exc, run.where, run.hop_r, run.opts, run.phase, run.att, len(run.buf))
    if run.phase == "probe" and run.buf:
        run.timings["probe"] = round(time.monotonic() - run.t0 - run.timings.get("connect", 0.0), 4)
        return TransportResult(f.status, f.message, bytes(run.buf), None, False, run.timings)
    return TransportResult(f.status, f.message, b"", None, False, run.timings)


def _release(run: _Run, kept: list[Any] | None, reuse: bool) -> None:
    """The agents closed; the run's connections kept for the session when it finished, else
    dropped with the session's (its next run connects afresh)."""
    for a in run.agents:
        a.close()
    drop = [] if kept is not None and run.finished else list(run.conns)
    if kept is not None and not run.finished:  # a session's connection failed: its next run connects afresh
        drop, kept[:] = [*kept, *drop], []
    elif kept is not None and not reuse:  # this run's connection is the session's now
        drop, kept[:] = list(kept), run.conns
    for c in reversed(drop):
        c.abort()
