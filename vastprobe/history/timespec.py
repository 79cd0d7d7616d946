"""Durations (`30d`, `90m`) and points in time (`2h` ago, `2026-12-02T14:00`) as users type them."""

from __future__ import annotations

import re
import time
from datetime import datetime

_DURATION = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,6})?)\s*([smhdw]?)")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_MAX_SECONDS = 100 * 365 * 86400


class TimeSpecError(ValueError):
    pass


def parse_duration(text: str) -> float:
    """Seconds in `30d`, `12h`, `90m`, `45s`, `2w` or a bare number of seconds; always > 0."""
    m = _DURATION.fullmatch(text.strip().lower())
    if m is None:
        raise TimeSpecError(f"{text!r} is not a duration (want e.g. 30d, 12h, 90m, 3600)")
    seconds = float(m.group(1)) * _UNIT[m.group(2)]
    if not 0 < seconds <= _MAX_SECONDS:
        raise TimeSpecError(f"{text!r}: a duration must be above 0 and at most 100 years")
    return seconds


def parse_since(text: str, now: float | None = None) -> float:
    """A point in time: a duration back from now (`2h`), or an ISO date/time (local time unless
    it carries an offset or Z)."""
    now = time.time() if now is None else now
    try:
        return now - parse_duration(text)
    except TimeSpecError:
        pass
    raw = text.strip()
    if len(raw) > 40:
        raise TimeSpecError(f"{raw[:40]!r}...: not a time")
    try:
        when = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise TimeSpecError(f"{raw!r} is not a time (want e.g. 2h, 7d or 2026-12-02T14:00)") from None
    return when.timestamp()  # a naive datetime is local time


def local_minute(ts: float) -> str:
    """How people read a moment in a summary: local time to the minute."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def iso_utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def span(seconds: float) -> str:
    """47 min, 3 h 05 min, 2 d 4 h: coarse on purpose."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
