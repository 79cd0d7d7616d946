"""Per-host histories read back from the file: the current state and since when, the last time
healthy, the transitions in a window and whether the host flaps. Everything comes from the
`hosts` and `episodes` tables (one row per host, one per change of state), so a query costs what
the changes cost, not what the sweeps cost."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from vastprobe.history.engine import Database, reason
from vastprobe.history.store import HistoryError
from vastprobe.targets import natural_key, typed_host

FLAPPING_CHANGES = 3  # verdict changes within the window that make a host "flapping"


@dataclass(frozen=True)
class State:
    status: str
    verdict: str
    rules: tuple[str, ...]


@dataclass(frozen=True)
class Transition:
    at: float  # the first sweep that saw the new state
    after_seen: float | None  # the last sweep that saw the old one (the change happened in between)
    before: State
    after: State

    @property
    def kind(self) -> str:
        if self.before.verdict != self.after.verdict:
            return "verdict"
        if self.before.status != self.after.status:
            return "status"
        return "rules"


@dataclass(frozen=True)
class HostHistory:
    target: str
    labels: dict[str, str]
    state: State
    since: float  # start of the current run of this verdict
    sweeps: int  # sweeps in that run
    state_since: float  # start of the current state (a rule-set change restarts it)
    first_seen: float  # the oldest record kept
    last_seen: float
    last_healthy: float | None
    transitions_total: int
    transitions: tuple[Transition, ...]  # within the window, oldest first
    verdict_changes: int  # within the window
    stalls: int  # times it became stalled within the window
    error: str | None  # the last observation's error
    findings: tuple[dict[str, object], ...]  # the last observation's findings

    @property
    def flapping(self) -> bool:
        return self.verdict_changes >= FLAPPING_CHANGES


def _state(row: tuple[str, str, str]) -> State:
    return State(row[0], row[1], tuple(r for r in row[2].split(",") if r))


def select_targets(known: Sequence[str], words: Sequence[str]) -> tuple[list[str], list[str]]:
    """The recorded targets named by `words` (exactly, or by host name), and the words that named none."""
    if not words:
        return sorted(known, key=natural_key), []
    by_host: dict[str, list[str]] = {}
    for t in known:
        by_host.setdefault(typed_host(t), []).append(t)
    known_set = set(known)
    chosen: dict[str, None] = {}
    missing = []
    for w in words:
        hits = [w] if w in known_set else by_host.get(w, []) or by_host.get(typed_host(w), [])
        if not hits:
            missing.append(w)
        chosen.update(dict.fromkeys(sorted(hits, key=natural_key)))
    return list(chosen), missing


def host_histories(con: Database, words: Sequence[str], since: float) -> tuple[list[HostHistory], list[str]]:
    """Histories of the named hosts (all when none are named), and the names nothing was recorded for."""
    try:
        return _host_histories(con, words, since)
    except con.errors() as exc:
        raise HistoryError(f"history {con.where}: {reason(exc)}", con.engine != "sqlite") from exc


def _host_histories(con: Database, words: Sequence[str], since: float) -> tuple[list[HostHistory], list[str]]:
    states = {i: _state((s, v, r)) for i, s, v, r in con.execute("SELECT id, status, verdict, rules FROM states")}
    rows = {
        row[1]: row
        for row in con.execute(
            "SELECT id, target, labels, state_id, verdict_since, verdict_sweeps, state_since, first_seen, last_seen, "
            "last_healthy, transitions_total, details_id FROM hosts"
        )
    }
    chosen, missing = select_targets(list(rows), words)
    ids = {rows[t][0] for t in chosen}
    columns = "host_id, started_at, prev_last_seen, prev_state_id, state_id"
    if len(ids) * 4 > len(rows):  # most hosts: one pass over the window, in time order
        window = con.execute(
            f"SELECT {columns} FROM episodes WHERE started_at >= ? AND prev_state_id IS NOT NULL ORDER BY started_at",
            (since,),
        ).fetchall()
    else:
        window = []
        for host_id in sorted(ids):
            window += con.execute(
                f"SELECT {columns} FROM episodes WHERE host_id = ? AND started_at >= ? AND prev_state_id IS NOT NULL "
                "ORDER BY started_at",
                (host_id, since),
            ).fetchall()
    transitions: dict[int, list[Transition]] = {}
    for host_id, started, prev_seen, prev_state, state in window:
        if host_id in ids:
            transitions.setdefault(host_id, []).append(
                Transition(started, prev_seen, states[prev_state], states[state])
            )
    bodies: dict[int, str] = {}
    detail_ids = sorted({rows[t][11] for t in chosen} - {None})
    for i in range(0, len(detail_ids), 500):
        chunk = detail_ids[i : i + 500]
        marks = ",".join("?" * len(chunk))
        bodies.update(con.execute(f"SELECT id, body FROM details WHERE id IN ({marks})", chunk).fetchall())
    out = []
    for target in chosen:
        (host_id, _, labels, state_id, vsince, vsweeps, ssince, first, last, healthy, total, details_id) = rows[target]
        changes = tuple(transitions.get(host_id, ()))
        verdict_changes = sum(t.kind == "verdict" for t in changes)
        stalls = sum(t.after.verdict == "stalled" and t.before.verdict != "stalled" for t in changes)
        body = bodies.get(details_id)
        details = json.loads(body) if body else {}
        out.append(
            HostHistory(
                target, json.loads(labels) if labels else {}, states[state_id], vsince, vsweeps, ssince, first,
                last, healthy, total, changes, verdict_changes, stalls, details.get("error"),
                tuple(details.get("findings") or ()),
            )
        )  # fmt: skip
    return out, missing
