"""Both ends of one TCP connection read together across the hosts of a run. A host's report keeps the
waits on connections whose other end no process there holds (RemotePeer) and the sockets its own
processes serve on (ServedSocket). The other end of a wait is the host whose served socket is the
connection's mirror image (its local address is the wait's remote, its remote the wait's local), or,
for a connection not accepted yet, the host whose process listens on the wait's remote port at an
address that host has (hosts behind one address differ by the port they listen on). Only one such
host counts: an end that two hosts could hold is left unjoined.

The waiting host's finding then names the host and the process that hold it, at the severity what
holds it proves (a stopped holder: an error), and that host's report says who waits on it. A server's
session that holds others (a database backend idle in a transaction, holding a lock) until its client
acts is joined the other way: the client's host is told, at the severity of the finding it causes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from vastprobe.model import (
    SEVERITY_ORDER,
    Evidence,
    Finding,
    HostReport,
    RemotePeer,
    ServedSocket,
    Severity,
    split_endpoint,
)
from vastprobe.report.edits import added, swap
from vastprobe.report.hops import host_addresses

RULE, CODE = "socket-peer-wait", "VP112"  # the joined findings are socket-peer-wait's, read across hosts
_ANY = ("0.0.0.0", "::", "*", "")  # a listener's wildcard addresses, brackets stripped


def _split(endpoint: str) -> tuple[str, str]:
    """`[::1]:22` -> (`::1`, `22`): the address without brackets, lower case, and the port."""
    ip, port = split_endpoint(endpoint)
    return ip.strip("[]").lower(), port


@dataclass(frozen=True)
class _Ends:
    """The run's served sockets indexed once: by the connection they are (local, remote), listeners
    by port, and the addresses each host answers on (its served sockets' own, and its target's)."""

    mirror: dict[tuple[str, str], list[tuple[int, ServedSocket]]]
    listeners: dict[str, list[tuple[int, ServedSocket]]]
    addresses: list[set[str]]


def _ends(reports: Sequence[HostReport]) -> _Ends:
    mirror: dict[tuple[str, str], list[tuple[int, ServedSocket]]] = {}
    listeners: dict[str, list[tuple[int, ServedSocket]]] = {}
    addresses = []
    for j, r in enumerate(reports):
        for s in r.served:
            if s.remote:
                mirror.setdefault((s.local, s.remote), []).append((j, s))
            else:
                listeners.setdefault(_split(s.local)[1], []).append((j, s))
        addresses.append(host_addresses(r))
    return _Ends(mirror, listeners, addresses)


def _other_end(ends: _Ends, i: int, w: RemotePeer) -> tuple[int, ServedSocket] | None:
    exact = [(j, s) for j, s in ends.mirror.get((w.remote, w.local), []) if j != i]
    if exact:
        return exact[0] if len({j for j, _s in exact}) == 1 else None
    ip, port = _split(w.remote)
    listening = [(j, s) for j, s in ends.listeners.get(port, [])
                 if j != i and ip in ends.addresses[j] and _split(s.local)[0] in (ip, *_ANY)]  # fmt: skip
    return listening[0] if len({j for j, _s in listening}) == 1 else None


#: one join: the waiting host, its wait, the holding host, the socket there
_Hit = tuple[int, RemotePeer, int, ServedSocket]


def join_connections(reports: Sequence[HostReport]) -> list[HostReport]:
    """The reports, each wait on another host of the run joined to the process there that holds it."""
    out = list(reports)
    if not any(r.remote_waits for r in reports):
        return out
    ends = _ends(reports)
    hits = [(i, w, *hit) for i, r in enumerate(reports) for w in r.remote_waits if (hit := _other_end(ends, i, w))]
    # the joins that change a verdict first: a fact joined later ("B reads healthy") then reads the final one
    hits.sort(key=lambda h: _holder_severity(out[h[2]], h[3], h[1])[0] is None)
    for i, w, j, s in _holders_first(hits):
        path = _relayed_on(ends, out, j, s, w)
        if path:  # a relay holds it, and passes it on to what holds it further
            k, end = path[-1]
            for (h, relay), (_n, nxt) in zip(((j, s), *path[:-1]), path, strict=True):
                out[h] = _told_relays(out[h], relay, nxt, out[k], end)
            via = tuple((out[h].target, relay) for h, relay in ((j, s), *path[:-1]))
            out[i], out[k] = _joined(out[i], out[k], w, end, via)
        else:
            out[i], out[j] = _joined(out[i], out[j], w, s)
    return out


def _holders_first(hits: list[_Hit]) -> list[_Hit]:
    """The joins in an order where a host's own waits are joined before a wait on it reads its words:
    A's client quoted B's finding from before B's join to C ("no process on this host holds the other
    end") and read DEGRADED in 2 of 4 runs, where B read STALLED (found by a helper). In a cycle of
    hosts, the order given."""
    pending, order = list(hits), []
    while pending:
        waiting = {h[0] for h in pending}
        ready = [h for h in pending if h[2] not in waiting or h[2] == h[0]] or pending
        order += ready
        pending = [h for h in pending if h not in ready]
    return order


#: How many relays in a row a wait is followed through (A's client -> B's proxy -> C's proxy -> D).
MAX_RELAYS = 4


def _relayed_on(
    ends: _Ends, out: Sequence[HostReport], j: int, s: ServedSocket, w: RemotePeer
) -> list[tuple[int, ServedSocket]]:
    """Where a relay that holds a connection (and says nothing of its own about it) passes it on:
    the hosts of the run, in turn, whose served sockets are the other ends of the connections each
    relay opened, up to the first whose holder is held (stopped, not reading, named by a finding).
    Empty when it is no relay, when it worked over the window, or when no held end is found."""
    path: list[tuple[int, ServedSocket]] = []
    seen = {(j, s.pid)}
    cur_j, cur, back = j, s, w
    while len(path) < MAX_RELAYS and (hops := cur.relays_to or _read(cur)) and cur.idle is not False:
        if _holder_severity(out[cur_j], cur, back)[0] is not None:
            break
        nxt = next(((hit, peer) for local, remote in hops
                    if (hit := _other_end(ends, cur_j, peer := RemotePeer(cur.pid, cur.comm, local, remote))
                        or _local_end(ends, cur_j, peer)) is not None
                    and (hit[0], hit[1].pid) not in seen), None)  # fmt: skip
        if nxt is None:
            return []
        path.append(nxt[0])
        seen.add((nxt[0][0], nxt[0][1].pid))
        (cur_j, cur), back = nxt
    return path if path and _holder_severity(out[cur_j], cur, back)[0] is not None else []


def _local_end(ends: _Ends, i: int, w: RemotePeer) -> tuple[int, ServedSocket] | None:
    """The other end of a relay's connection on its own host: an sshd session forwarding to a local
    `ssh -L` listener that tunnels on (A's client through two chained tunnels read HEALTHY while the
    redis at their end was stopped; found by a helper)."""
    mine = [(j, s) for j, s in ends.mirror.get((w.remote, w.local), []) if j == i and s.pid != w.pid]
    return mine[0] if len(mine) == 1 else None


def _read(s: ServedSocket) -> tuple[tuple[str, str], ...]:
    return (s.waits_on,) if s.waits_on is not None else ()


def _told_relays(relay_host: HostReport, relay: ServedSocket, nxt: ServedSocket, end_host: HostReport,
                 end: ServedSocket) -> HostReport:  # fmt: skip
    """A relay's host, told that its relay waits on what holds the connection further on."""
    sev, how = _holder_severity(end_host, end)
    summary = (f"{relay.comm} ({relay.pid}) relays {relay.remote} -> {relay.local} on to {nxt.local}, whose other "
               f"end is held: {end.comm} ({end.pid}) on {end_host.target}: {how}")  # fmt: skip
    ev = Evidence("this run", f"{end_host.target}: {end.comm} ({end.pid}) holds {end.local}: {how}"[:400])
    hint = f"see {end_host.target}'s report (`vastprobe diagnose {end_host.target} --pid {end.pid}`)"
    return added(relay_host, Finding(RULE, CODE, sev or "warning", summary, (relay.pid,), (ev,), hint,
                                     remote=end_host.target))  # fmt: skip


def _about(host: HostReport, s: ServedSocket, back: RemotePeer | None = None) -> list[Finding]:
    """The findings of `host` about what serves the socket: its holder, or, while the holder did
    nothing over the window, a process under it (an ssh session's command: sshd holds the connection,
    the stopped `cat` it runs is what the finding names). A holder that works is not held by a child
    of its own: a busy server's stopped helper was blamed for its client's wait. Not a finding about
    its wait back on the same connection (`back`, seen from its side): a relay reading its client,
    and the client waiting on the relay, each quoted the other, and the stop beyond the relay went
    unsaid (`ssh -J B C`; found by a helper)."""
    mine = {s.pid, *(s.below if s.idle is not False else ())}
    return [f for f in host.findings if mine.intersection(f.pids) and not _mirrors(f, back)]


def _mirrors(f: Finding, w: RemotePeer | None) -> bool:
    """`f` is about a wait on the connection `w` waits on, from its other end."""
    return w is not None and f.peer is not None and (f.peer.local, f.peer.remote) == (w.remote, w.local)


def _holder_severity(
    holder_host: HostReport, s: ServedSocket, back: RemotePeer | None = None
) -> tuple[Severity | None, str]:
    """How badly what holds the other end holds it, in words: stopped, in D state, or named by a
    finding of its own host (its worst)."""
    if s.state in ("T", "t"):
        return "error", f"stopped ({s.state})"
    # a holder asleep on a timer moves again by itself: its stillness proves nothing, as on one host (a
    # slow server whose handler sleeps 2 s made four hosts STALLED; found by a helper)
    if not s.remote and s.queued and s.idle and not s.timer:  # the proof of docs/evidence.md's listener
        return "error", (
            f"not accepting: {s.queued} connection(s) wait in the accept queue of {s.local}, and it accepted none "
            "and did nothing over the window"
        )
    # docs/evidence.md's idle server, its client's bytes unread; not one blocked reading another host's
    # client meanwhile (a parameter server waiting on a slow worker): the wait goes on there (_relayed_on)
    if s.remote and s.queued and s.idle and not s.timer and s.waits_on is None:
        return "error", f"not reading: the {s.queued} B sent to it sit unread, and it did nothing over the window"
    theirs = _about(holder_host, s, back)
    if theirs:
        worst = max(theirs, key=lambda f: SEVERITY_ORDER[f.severity])
        if SEVERITY_ORDER[worst.severity] >= SEVERITY_ORDER["warning"]:
            return worst.severity, f"its host says: {worst.summary}"
    if s.state == "D":
        return "warning", "in uninterruptible sleep (D)"
    return None, f"in state {s.state}; {holder_host.target} reads {holder_host.verdict}"


def _answered(
    own: Finding, w: RemotePeer, s: ServedSocket, b: HostReport, conn: str, end: str, ev: Evidence
) -> Finding:
    """A warning that rested on nothing moving over the window with the other end out of sight, now
    that the other end's host shows it working or asleep on a timer: as on one host that sees both
    ends (a blocker that works holds nobody), a note. A queue worker's BLPOP, a subscriber, `ssh B
    'sleep 600'` wait like this."""
    summary = (
        f"{w.comm} ({w.pid}) waits on {conn}, whose other end is {end}, where {s.moving}; {b.target} reads {b.verdict}"
    )
    hint = (
        f"nothing holds it on {b.target}: a client that waits for work (a queue worker, a subscriber, a remote "
        f"command) idles like this; if it expects an answer, see `vastprobe diagnose {b.target} --pid {s.pid}`"
    )
    return replace(own, severity="info", summary=summary, hint=hint, evidence=(ev, *own.evidence), remote=b.target)


def _joined(
    a: HostReport, b: HostReport, w: RemotePeer, s: ServedSocket, via: tuple[tuple[str, ServedSocket], ...] = ()
) -> tuple[HostReport, HostReport]:
    """`via`: the relays on the way from `a`'s wait to `b`'s end, (their host, their socket)."""
    if w.client_holds:
        return _held_by_client(a, b, w, s)
    sev, how = _holder_severity(b, s, w)
    end = "".join(f"{r.comm} ({r.pid}) on {t}, relaying to " for t, r in via) + f"{s.comm} ({s.pid}) on {b.target}"
    conn = f"TCP {w.local} -> {w.remote}"
    held = "accepted it" if s.remote else f"listens on {s.local}, the connection in its queue"
    ev = Evidence("this run", f"{b.target}: {s.comm} ({s.pid}) {held}: {how}"[:400])
    own = next((f for f in a.findings if f.peer is not None and f.peer.pid == w.pid), None)
    if sev is None:  # the other end is there and nothing says it is stuck: a fact, not a verdict
        if own is not None and own.severity == "warning" and s.moving:
            a = swap(a, own, _answered(own, w, s, b, conn, end, ev))
        elif own is not None:
            a = swap(a, own, replace(own, evidence=(*own.evidence, ev), remote=b.target))
        return a, b
    summary = f"{w.comm} ({w.pid}) waits on {conn}, whose other end is {end}: {how}"
    hint = (
        f"the other end is on {b.target}: "
        + (
            f"resume {s.comm} there with `kill -CONT {s.pid}`, or find who stopped it"
            if s.state in ("T", "t")
            else f"see its report (`vastprobe diagnose {b.target} --pid {s.pid}`)"
        )
        + "; give the client a timeout"
    )
    if own is not None and SEVERITY_ORDER[own.severity] > SEVERITY_ORDER[sev]:
        sev = own.severity
    pids = (*own.pids, *((w.pid,) if w.pid not in own.pids else ())) if own is not None else (w.pid,)
    joined = Finding(RULE, CODE, sev, summary, pids, (ev, *(own.evidence if own else ())), hint,
                     remote=b.target, peer=w)  # fmt: skip
    a = swap(a, own, joined) if own is not None else added(a, joined)
    line = f"{a.target}: {w.comm} ({w.pid}) waits on {s.comm} ({s.pid}) here over {conn}"
    theirs = next(iter(sorted(_about(b, s, w), key=lambda f: -SEVERITY_ORDER[f.severity])), None)
    if theirs is not None:
        return a, swap(b, theirs, replace(theirs, evidence=(*theirs.evidence, Evidence("this run", line[:400]))))
    told = Finding(
        RULE, CODE, sev, f"{s.comm} ({s.pid}) is {how} and {w.comm} ({w.pid}) on {a.target} waits on it over {conn}",
        (s.pid,), (Evidence("this run", line[:400]),),
        f"resume it with `kill -CONT {s.pid}`, or find who stopped it" if s.state in ("T", "t")
        else f"look at what {s.comm} ({s.pid}) waits on", remote=a.target,
    )  # fmt: skip
    return a, added(b, told)


def _held_by_client(a: HostReport, b: HostReport, w: RemotePeer, s: ServedSocket) -> tuple[HostReport, HostReport]:
    """`a`'s finding names a server's session (w) that holds others until its client acts; `s`, the
    client's end on `b`, is that client: `a`'s finding names it, and `b` is told at that finding's
    severity (the client is what to act on). Found by a helper: the psql on a third host that kept a
    row lock in an open transaction read HEALTHY, and nothing named it."""
    own = next((f for f in a.findings if f.peer == w), None)
    if own is None:
        return a, b
    conn = f"TCP {w.remote} -> {w.local}"
    line = f"{b.target}: {s.comm} ({s.pid}) is the client of {w.comm} ({w.pid}) over {conn}"
    a = swap(a, own, replace(own, evidence=(*own.evidence, Evidence("this run", line[:400])), remote=b.target))
    if SEVERITY_ORDER[own.severity] < SEVERITY_ORDER["warning"]:
        return a, b
    summary = (
        f"{s.comm} ({s.pid}) is the client of {w.comm} ({w.pid}) on {a.target}, which others wait behind: {own.summary}"
    )
    told = Finding(
        own.rule, own.code, own.severity, summary[:600], (s.pid,),
        (Evidence("this run", f"{a.target}: {w.comm} ({w.pid}) serves {s.comm} ({s.pid}) here over {conn}"[:400]),),
        f"{s.comm} ({s.pid}) keeps that session's transaction open: commit or roll back in it, or end it; "
        f"see {a.target}'s report (`vastprobe diagnose {a.target}`)", remote=a.target,
    )  # fmt: skip
    return a, added(b, told)
