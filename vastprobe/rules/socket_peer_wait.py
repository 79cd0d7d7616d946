"""VP112 socket-peer-wait: a watched process waits on a TCP or Unix connection whose other end is
held by a process that is not answering.

The waiter's system call (recv/read on fd N, or poll() over its only connection) names the
socket; /proc/net/tcp pairs it with its peer socket on this host (a loopback or local
connection), ss names a Unix socket's peer, and the fd tables name the peer's holder. The peer's
receive queue says whether the request was even read. A peer on another host is named, and is
only reported when other evidence says the job should be moving.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from vastprobe.analysis.endpoints import remote_peer
from vastprobe.analysis.ssh_clients import SSH_CLIENTS, SshDestination, ssh_destination
from vastprobe.analysis.stalls import StalledChain, StallEvidence
from vastprobe.analysis.waitgraph.edges import WaitEdge
from vastprobe.model import Evidence, Finding, Process, Severity, is_loopback, split_endpoint
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import (
    LOCKED_HANDLERS_READINGS,
    chain_evidence,
    locked_handlers,
    locked_handlers_hint,
    marked,
    names,
    stack_command,
    stalled,
)
from vastprobe.units import byte_size
from vastprobe.untrusted.numbers import read_int

META = RuleMeta("socket-peer-wait", "VP112", "error", "a process waits on a connection whose peer does not answer")


@dataclass(frozen=True)
class _Wait:
    """A stalled wait on a connection that is worth a finding, and what its words are made of."""

    s: StalledChain
    edge: WaitEdge
    unread: int  # bytes in the peer's receive queue: the request it has not read
    stopped: list[int]  # the holders of the other end that are stopped
    remote_ssh: SshDestination | None  # an ssh session off this host that holds the job
    alone: bool  # a peer on another host, and nothing else says the job is stalled
    quiet: bool  # poll() with nothing in flight either way, and nothing else says so
    locked: bool  # every holder a server whose handlers all wait on locks (chains.locked_handlers)
    waiter: Process
    via: str  # the process in between, when the chain's waiter waits through another
    peer: str  # the holders of the other end, named
    state: str  # their states and wait channels


def check(ctx: Context) -> Iterator[Finding]:
    for s, edge, stall, sev in stalled(ctx, "tcp", "unix-socket"):  # a peer that works is left out
        w = _reported(ctx, s, edge, stall)
        if w is None:
            continue
        if w.quiet:
            summary, hint, sev = _quiet_words(ctx, w)
        elif edge.holders:
            summary, hint, sev = _held_words(ctx, w, sev)
        else:
            summary, hint, sev = _unheld_words(w, sev)
        yield _finding(ctx, w, stall, summary, hint, sev)


def _reported(ctx: Context, s: StalledChain, edge: WaitEdge, stall: StallEvidence) -> _Wait | None:
    """The wait, when it is worth a finding: not a reader that is merely slow, not an idle
    connection or a peer off this host that nothing else says is stalled."""
    unread = edge.peer.recv_queue if edge.peer is not None and edge.peer.recv_queue else 0
    # bytes on their way to the waiter (queued in its receive buffer, or in the peer's send
    # queue): it reads slowly (curl --limit-rate), the peer is not the one holding it up
    incoming = (edge.socket.recv_queue or 0 if edge.socket is not None else 0) + (
        edge.peer.send_queue or 0 if edge.peer is not None else 0
    )
    stopped = [h for h in edge.holders if ctx.tree.by_pid[h].state in ("T", "t")]
    if incoming and (not stall or stall.logs_only) and not stopped:
        # a quiet log beside bytes on their way is no peer that does not answer: `curl --limit-rate 2k`
        # with 126 KiB unread here read STALLED, "python3 does not answer" (found by a helper)
        return None
    remote_ssh = _remote_ssh(ctx, s, edge) if not edge.holders else None
    # a peer on another host, whose side this host cannot see: only other evidence makes it a stall,
    # but a named job that did not move at all over the window is at least worth a warning
    alone = not edge.holders and not stall and remote_ssh is None
    if alone and not (ctx.options.explicit_scope and s.idle and edge.kind == "tcp" and not incoming):
        return None
    # nothing pending either way, nothing else says it is stalled, no holder stopped: an idle keep-alive
    # client, or a request the server read and never answered (a connection in an accept queue is no
    # idle keep-alive)
    still = not (unread or stall or s.proof or stopped) and remote_ssh is None and edge.listener is None
    # poll() over such a connection: only a named job, still after two samples, is worth a note (the
    # server read the request and sleeps: a common hang that is otherwise unseen)
    quiet = edge.inferred and still and not alone
    # a server whose handlers all wait on locks: its accepting loop's wakes answer nobody, and its state
    # says as much from one sample (thread-deadlock's warning)
    locked = locked_handlers(ctx, edge)
    if quiet and not (ctx.options.explicit_scope and (s.idle or locked) and edge.holders):
        return None
    if still and not locked and edge.holders and not ctx.options.explicit_scope:
        # a client blocked in recv() on a live peer with nothing in flight, on a whole host: a push it
        # waits for (a subscriber), as a poller's idle connection is; it read DEGRADED, "does not answer",
        # on a healthy busy host (found by a helper)
        return None
    waiter = ctx.tree.by_pid[s.waiter]
    via = f", through {ctx.proc_label(edge.waiter)}," if edge.waiter != s.waiter else ""
    peer = names(ctx, edge.holders)
    state = ", ".join(f"{ctx.tree.by_pid[h].state} {ctx.tree.by_pid[h].wchan}" for h in edge.holders[:2])
    return _Wait(s, edge, unread, stopped, remote_ssh, alone, quiet, locked, waiter, via, peer, state)


def _quiet_words(ctx: Context, w: _Wait) -> tuple[str, str, Severity]:
    """Nothing in flight either way: an idle connection, or a request read and never answered (a note)."""
    waiter, via, edge, peer, state = w.waiter, w.via, w.edge, w.peer, w.state
    if w.locked:
        # a deadlocked handler and a long poll read the same from /proc: a warning, not proof (the server
        # read STALLED, its long-poll clients with it, and answered at the next publish; found by a helper)
        summary = (
            f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}: its peer {peer} answers no one, every thread "
            f"of it but its accepting loop waiting on a lock with no timeout ({LOCKED_HANDLERS_READINGS})"
        )
        hint = (
            f"see where {peer}'s threads wait ({stack_command(ctx, edge.holders[0])}): "
            f"{locked_handlers_hint('restart it')}; give clients a timeout"
        )
        return summary, hint, "warning"
    summary = (
        f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what} with nothing in flight either way; "
        f"its peer {peer} ({state}) sent nothing over the window"
    )
    hint = (
        f"a connection kept open between requests idles like this; if {waiter.comm} expects an answer, {peer} "
        "read the request and is not answering: look at what it is blocked on; give clients a timeout"
    ) + _database_words(ctx, edge.holders)
    return summary, hint, "info"


def _held_words(ctx: Context, w: _Wait, sev: Severity) -> tuple[str, str, Severity]:
    """A peer on this host that does not answer: gathering others, stopped, not accepting, slow in
    another thread, or not serving the connection at all."""
    waiter, via, edge, peer, state, unread, stopped = w.waiter, w.via, w.edge, w.peer, w.state, w.unread, w.stopped
    tail = f", {byte_size(unread)} it has not read" if unread else ""
    summary = (
        f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}, whose peer {peer} ({state}) does not answer{tail}"
    )
    gathering = _gathering(ctx, edge.waiter, edge.holders)
    if gathering and not stopped and not unread:
        words, hint = gathering
        summary = f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}, whose {words}"
    elif stopped:
        sev = "error"  # stopped: it will not answer until someone resumes it
        hint = (
            f"{names(ctx, tuple(stopped))} is stopped (SIGSTOP, Ctrl-Z or a debugger) and holds the other end: "
            f"resume it with `kill -CONT {' '.join(map(str, stopped))}`, or find who stopped it; "
            "give clients a timeout"
        )
    elif edge.listener is not None:  # the kernel took the connection, the server has not
        queued = edge.listener.recv_queue or 0
        made = edge.socket is None or edge.socket.state != "SYN_SENT"
        summary = f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}: its peer {peer} ({state}) has not " + (
            f"accepted the connection ({queued} queued on {edge.listener.local})"
            if made
            else f"accepted the connections queued before it ({queued} on {edge.listener.local}): its "
            "queue is full, and this one is not even made (SYN_SENT)"
        )
        hint = (
            f"{peer} holds the listening socket {edge.listener.local} and accepts nothing (its accept loop "
            f"is blocked on something else, or it serves one client at a time and is stuck on one): see where "
            f"it waits ({stack_command(ctx, edge.holders[0])}), then restart it; give clients a connect timeout"
        )
    elif (threaded := next((a for h in edge.holders if (a := ctx.graph.acts_elsewhere(h))), None)) and not unread:
        # the main thread's wait says little: another thread may be serving this connection slowly
        first = edge.holders[0]
        hint = (
            f"{peer} holds the other end and has not answered; {threaded}: the thread serving this connection "
            f"may be waiting on something slow. Look at its threads ({stack_command(ctx, first)}, "
            f"/proc/{first}/task/*/wchan) before restarting it; give clients a timeout"
        )
    else:
        hint = (
            f"{peer} holds the other end and is not serving it"
            + (f" (it has not even read the {byte_size(unread)} sent)" if unread else "")
            + ": look at what it is blocked on, then restart it; give clients a timeout"
        )
    return summary, hint, sev


def _unheld_words(w: _Wait, sev: Severity) -> tuple[str, str, Severity]:
    """No process on this host holds the other end: a Unix socket without ss, an ssh session to
    another host, a peer off this host that did not move, or one that does not answer."""
    waiter, via, edge, remote_ssh = w.waiter, w.via, w.edge, w.remote_ssh
    if edge.kind == "unix-socket":
        summary = f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}, whose peer is unknown"
        hint = (
            "the peer of a Unix socket is named by ss, which this target lacks (iproute2): find who holds the "
            "other end, and give the client a timeout"
        )
    elif remote_ssh is not None:
        remote = edge.socket.remote if edge.socket is not None else "its peer"
        cmd = remote_ssh.command(_port_of(remote))
        summary = (
            f"{waiter.comm} ({waiter.pid}){via} waits on the ssh session to {remote_ssh.target(_port_of(remote))} "
            f"({remote}), whose other end took nothing over the window"
        )
        hint = (
            f"the other end is on another host: see what the command there is doing with `{cmd}` (a stopped or "
            "stuck remote process fills the session's window and stops this side); set ServerAliveInterval so a "
            "dead link is noticed"
        )
    elif w.alone:
        remote = edge.socket.remote if edge.socket is not None else "its peer"
        summary = (
            f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}: nothing moved either way over the window "
            f"and no process on this host holds the other end, {remote}"
        )
        hint = _off_host_hint(remote)
        sev = "warning" if sev == "info" else sev
    else:
        remote = edge.socket.remote if edge.socket is not None else "its peer"
        summary = f"{waiter.comm} ({waiter.pid}){via} waits on {edge.what}: {remote} does not answer"
        hint = (
            f"the peer {remote} is not on this host (or not visible): check that service, and give the client a timeout"
        )
    return summary, hint, sev


def _finding(ctx: Context, w: _Wait, stall: StallEvidence, summary: str, hint: str, sev: Severity) -> Finding:
    s, edge, unread, remote_ssh = w.s, w.edge, w.unread, w.remote_ssh
    ev = chain_evidence(ctx, s)
    if unread:
        exact = f" ({unread} B)" if unread >= 1024 else ""
        ev.append(Evidence("unread", f"{byte_size(unread)}{exact} wait in the peer's receive queue"))
    return META.finding(
        marked(summary, s, sev),
        (*s.chain.pids, *[h for h in edge.holders if h not in s.chain.pids]),
        [*ev, *stall.evidence],
        hint,
        sev,
        caused_by="oom-killed-child" if stall.oom else None,
        remote=remote_ssh.target(_port_of(edge.socket.remote if edge.socket else "")) if remote_ssh else None,
        # the connection, for a sweep to find its other end among its hosts (report/connection_joins.py);
        # an ssh session's too: its other end there is sshd, and the command sshd runs under it
        peer=remote_peer(ctx.tree, edge),
    )


def _remote_ssh(ctx: Context, s: StalledChain, edge: WaitEdge) -> SshDestination | None:
    """An ssh client whose connection leads off this host, where the job is held by it: a process of
    the chain blocked writing into ssh (`tar | ssh`), or a named job in which nothing moved."""
    client = ctx.tree.by_pid.get(edge.waiter)
    if edge.kind != "tcp" or client is None or client.comm not in SSH_CLIENTS or s.idle is False:
        return None
    dest = ssh_destination(client.cmdline)
    if dest is None:
        return None
    pushed = any(e.writes and not e.poll and edge.waiter in e.holders for e in s.chain.edges)
    return dest if pushed or (ctx.options.explicit_scope and s.idle is not False) else None


def _off_host_hint(remote: str) -> str:
    """What to run for the other end of a connection that leaves this host."""
    ip, port = split_endpoint(remote)
    if is_loopback(ip):
        return (
            f"{remote} is a loopback address whose holder this view cannot see (another container or PID namespace "
            f"sharing this network): diagnose the host's namespace that listens on port {port}; give the client a "
            "timeout"
        )
    return (
        f"the other end is on another host: see what the process listening on port {port} there is doing "
        f"(`vastprobe diagnose {ip}`, or sweep both hosts together so the run reads both ends of the connection "
        "as one); give the client a timeout"
    )


def _port_of(address: str) -> int | None:
    return read_int(split_endpoint(address)[1], 5)


def _gathering(ctx: Context, waiter: int, holders: tuple[int, ...]) -> tuple[str, str] | None:
    """The peer and a hint, in words, when it is a server that holds the connection and went on
    waiting for something else: a single-threaded server back in accept() for another connection
    (a rendezvous gathering ranks, or a one-at-a-time server that did not answer), or a server in
    another thread of the waiter itself (torch's TCPStore in rank 0, an embedded HTTP server)."""
    if holders == (waiter,):
        thread = ctx.graph.acts_elsewhere(waiter)
        if not thread:
            return None
        return (
            f"other end it holds itself ({thread}): a server in its own process that has not answered",
            f"a server in another thread of {waiter} has not answered: it waits for something more (in a rendezvous "
            "such as torch.distributed's TCPStore on rank 0: a rank that never joined; check every rank started with "
            f"the same world size), or its handler is stuck: look at its threads ({stack_command(ctx, waiter)}, "
            f"/proc/{waiter}/task/*/wchan); give clients a timeout",
        )
    # a server with other threads may be serving this connection in one of them: slow, not gathering
    accepting = [
        h for h in holders if ctx.graph.kind(ctx.tree.by_pid[h]) == "accept" and not ctx.graph.acts_elsewhere(h)
    ]
    if not accepting:
        return None
    return (
        f"peer {names(ctx, tuple(accepting))} waits in accept() for another connection and has not answered",
        "a single-threaded server holds this connection and went back to accept() without answering: a "
        "rendezvous or barrier that answers once every participant has joined (torch.distributed's TCPStore, a "
        "parameter server) is short of one (check that every rank or worker started, with the same world size "
        "and address), or the server serves one connection at a time and dropped this one; give clients a timeout",
    )


RULE = Rule(META, check)


#: servers whose sessions wait on each other's locks where /proc cannot see it (no process title, no
#: per-session thread name): only the server's own tables say who holds what
_ASK_THE_SERVER = {
    "mysqld": "SELECT * FROM sys.innodb_lock_waits (MySQL 8) or SHOW ENGINE INNODB STATUS",
    "mariadbd": "SELECT * FROM information_schema.INNODB_LOCK_WAITS, or SHOW ENGINE INNODB STATUS",
}


def _database_words(ctx: Context, holders: tuple[int, ...]) -> str:
    """A MySQL/MariaDB session waiting for a row lock looks, from /proc, like one waiting for a slow
    query: its thread sleeps in a futex. Name what asks the server instead of guessing."""
    for h in holders:
        p = ctx.tree.by_pid.get(h)
        ask = _ASK_THE_SERVER.get(p.comm) if p is not None else None
        if p is not None and ask:
            return (
                f"; {p.comm} is a database server: a statement waiting for another session's lock looks the same "
                f"from /proc, so ask it who holds what ({ask}; SHOW FULL PROCESSLIST shows each session's statement)"
            )
    return ""
