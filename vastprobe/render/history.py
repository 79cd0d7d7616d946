"""`vastprobe history` output: a plain-text block per host, or JSON (`vastprobe.history/1`), as a
Document (render/formats.py) so it prints in every format the reports do."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import IO, Any

from vastprobe.history.queries import HostHistory, State, Transition
from vastprobe.history.timespec import iso_utc, local_minute, span
from vastprobe.untrusted.safe import safe

SCHEMA = "vastprobe.history/1"
SHOWN_TRANSITIONS = 10


def _state_word(s: State) -> str:
    return s.verdict if s.status == "ok" else f"{s.verdict} ({s.status})"


def _rules(rules: tuple[str, ...]) -> str:
    return ", ".join(rules) if rules else "no rule at warning or above"


def _change(t: Transition) -> str:
    if t.kind == "rules":
        gained = [f"+{r}" for r in t.after.rules if r not in t.before.rules]
        lost = [f"-{r}" for r in t.before.rules if r not in t.after.rules]
        return f"{_state_word(t.after)}: rules " + " ".join(gained + lost)
    text = f"{_state_word(t.before)} -> {_state_word(t.after)}"
    return text + (f"  [{', '.join(t.after.rules)}]" if t.after.rules else "")


def history_lines(histories: list[HostHistory], since: float, now: float) -> list[str]:
    out: list[str] = []
    for h in histories:
        head = (
            f"{safe(h.target)}  {h.state.verdict.upper()}"
            + (f" ({h.state.status})" if h.state.status != "ok" else "")
            + f" since {local_minute(h.since)}, {span(now - h.since)}, {h.sweeps} sweep{'s' * (h.sweeps != 1)}"
        )
        out.append(head)
        worst = next((f for f in h.findings if f.get("severity") in ("critical", "error", "warning")), None)
        if h.error:
            out.append(f"  {safe(h.error, 160)}")
        elif worst is not None:
            out.append(f"  {worst.get('code')} {worst.get('rule')}: {safe(str(worst.get('summary')), 160)}")
        seen = f"  last seen {local_minute(h.last_seen)}"
        healthy = (
            "never healthy in the kept history"
            if h.last_healthy is None
            else ("healthy now" if h.state.verdict == "healthy" else f"last healthy {local_minute(h.last_healthy)}")
        )
        out.append(f"{seen}; {healthy}; {h.transitions_total} transition{'s' * (h.transitions_total != 1)} in all")
        flap = (
            f"FLAPPING: {h.verdict_changes} verdict changes, {h.stalls} stall{'s' * (h.stalls != 1)} since {local_minute(since)}"
            if h.flapping
            else f"{len(h.transitions)} transition{'s' * (len(h.transitions) != 1)} since {local_minute(since)}"
        )
        out.append(f"  {flap}")
        shown = h.transitions[-SHOWN_TRANSITIONS:]
        if len(h.transitions) > len(shown):
            out.append(f"    ... {len(h.transitions) - len(shown)} earlier")
        for t in shown:
            out.append(f"    {local_minute(t.at)}  {safe(_change(t), 160)}")
    return out


@functools.lru_cache(maxsize=256)
def _state_dict(s: State) -> dict[str, Any]:
    return {"status": s.status, "verdict": s.verdict, "rules": list(s.rules)}


@functools.lru_cache(maxsize=65536)  # every host of a sweep shares its time: one string per sweep
def _ts(v: float) -> dict[str, Any]:
    return {"at": iso_utc(v), "unix": round(v, 3)}


def host_history_dict(h: HostHistory, now: float) -> dict[str, Any]:
    def ts(v: float | None) -> dict[str, Any] | None:
        return None if v is None else _ts(v)

    out: dict[str, Any] = {
        "target": h.target,
        "state": _state_dict(h.state),
        "since": ts(h.since),
        "for_seconds": round(now - h.since, 1),
        "sweeps": h.sweeps,
        "state_since": ts(h.state_since),
        "first_seen": ts(h.first_seen),
        "last_seen": ts(h.last_seen),
        "last_healthy": ts(h.last_healthy),
        "error": h.error,
        "findings": list(h.findings),
        "transitions_total": h.transitions_total,
        "transitions": [
            {
                "at": ts(t.at),
                "after_seen": ts(t.after_seen),
                "kind": t.kind,
                "from": _state_dict(t.before),
                "to": _state_dict(t.after),
            }
            for t in h.transitions
        ],
        "verdict_changes": h.verdict_changes,
        "stalls": h.stalls,
        "flapping": h.flapping,
    }
    if h.labels:
        out["labels"] = h.labels
    return out


def history_document(histories: list[HostHistory], since: float, now: float, missing: list[str]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "generated_at": iso_utc(now),
        "since": iso_utc(since),
        "hosts": [host_history_dict(h, now) for h in histories],
        "not_recorded": missing,
    }


@dataclass
class HistoryDocument:
    """The hosts' histories over [since, now]; `missing`: the targets asked for that it has no record of."""

    histories: list[HostHistory]
    since: float
    now: float
    missing: list[str]

    def items(self) -> list[HostHistory]:
        return self.histories

    def item(self, host: HostHistory) -> dict[str, Any]:
        return host_history_dict(host, self.now)

    def whole(self) -> dict[str, Any]:
        return history_document(self.histories, self.since, self.now, self.missing)

    def end(self) -> None:
        return None  # a history stream is its hosts' lines alone

    def table(self, out: IO[str]) -> None:
        out.write("".join(line + "\n" for line in history_lines(self.histories, self.since, self.now)))
