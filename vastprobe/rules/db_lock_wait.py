"""VP118 db-lock-wait: a watched process waits on a PostgreSQL backend that waits for a lock, and
the session that likely holds it is idle in a transaction (or running a statement).

The client polls its connection (psql, psycopg) and the backend sleeps in its latch; neither wait
names the lock. The backend's process title does: PostgreSQL appends ` waiting` while a backend
waits for a heavyweight lock (`postgres: app db [local] UPDATE waiting`). Which session holds the
lock only `pg_locks` says, so the holder is worded as likely: the server's backends idle in a
transaction (they keep their locks until they commit), else the ones running a statement, each
with its title and its own client across the socket.
"""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.endpoints import client_peer
from vastprobe.analysis.waitgraph.locks import process_title
from vastprobe.model import Evidence, Finding
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.chains import chain_evidence, marked, stalled

META = RuleMeta(
    "db-lock-wait", "VP118", "error", "a process waits on a database session that waits for another session's lock"
)


def check(ctx: Context) -> Iterator[Finding]:
    for s, edge, stall, sev in stalled(ctx, "db-lock"):  # a holder that works is left out
        waiter = ctx.tree.by_pid[s.waiter]
        backend = ctx.tree.by_pid.get(edge.waiter)
        if backend is None:
            continue
        doing = process_title(backend).removeprefix("postgres: ")
        via = f" on its PostgreSQL backend {backend.pid} ({doing})" if backend.pid != waiter.pid else f" ({doing})"
        clients = {h: ctx.graph.socket_peer(h) for h in edge.holders}
        # a holder whose client is on another host: a sweep that probed that host names the client there
        away = {h: peer for h in edge.holders if clients[h] is None and (peer := client_peer(ctx, h)) is not None}
        titles = [process_title(ctx.tree.by_pid[h]) for h in edge.holders if h in ctx.tree.by_pid]
        how = (
            "idle in a transaction"
            if any("idle in transaction" in t for t in titles)
            else "idle, outside a transaction (a session-level lock, such as pg_advisory_lock's, is held until it "
            "is released or the session ends)"
            if titles and all(t.endswith(" idle") for t in titles)
            else "running a statement"
        )
        if edge.holders:
            held = ", ".join(
                f"backend {h}"
                + (
                    f" (its client: {ctx.proc_label(c)})"
                    if c is not None
                    else f" (its client: {away[h].remote}, not on this host)"
                    if h in away
                    else ""
                )
                for h, c in list(clients.items())[:4]
            )
            summary = f"{waiter.comm} ({waiter.pid}) waits{via} for a lock; likely held by {held}, {how}"
            first = edge.holders[0]
            client = clients[first]
            finish = (
                f"commit or roll back in its client ({ctx.proc_label(client)}), or "
                if client
                else f"commit or roll back in its client (at {away[first].remote}, on another host), or "
                if first in away
                else ""
            )
            hint = (
                f"the session {how} keeps its locks until it ends: {finish}end it from SQL with "
                f"`SELECT pg_terminate_backend({first});`. Confirm first: `SELECT pid, state, wait_event, "
                "pg_blocking_pids(pid) FROM pg_stat_activity;` names the holder for sure; set "
                "idle_in_transaction_session_timeout and lock_timeout so it cannot happen silently"
            )
        else:
            summary = (
                f"{waiter.comm} ({waiter.pid}) waits{via} for a lock; no other session of the server is visible here"
            )
            hint = (
                "`SELECT pid, state, wait_event, pg_blocking_pids(pid) FROM pg_stat_activity;` names the holder "
                "(a session from another host, a prepared transaction: `SELECT * FROM pg_prepared_xacts;`)"
            )
        ev = chain_evidence(ctx, s)
        ev += [Evidence("client", f"backend {h} serves {ctx.proc_label(c)}") for h, c in clients.items() if c]
        yield META.finding(
            marked(summary, s, sev),
            (*s.chain.pids, *[h for h in edge.holders if h not in s.chain.pids]),
            [*ev, *stall.evidence],
            hint,
            sev,
            caused_by="oom-killed-child" if stall.oom else None,
            peer=next(iter(away.values()), None),
        )


RULE = Rule(META, check)
