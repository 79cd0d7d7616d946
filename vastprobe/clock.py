"""Wall-clock text from seconds a target supplied. A broken or hostile target can send any number
(a 2^62 mtime, a NaN, a year past 9999), and `time.gmtime` raises on those: here they read as
unknown instead."""

from __future__ import annotations

import math
import time

#: Latest second shown as a date: the end of the year 9999 (strftime's four-digit years).
MAX_SECONDS = 253402300799
#: Earliest: the start of the year 1 (negative stamps are real on some file systems).
MIN_SECONDS = -62135596800


def utc_struct(seconds: float | None) -> time.struct_time | None:
    if seconds is None or isinstance(seconds, bool) or not math.isfinite(seconds):
        return None
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        return None
    try:
        return time.gmtime(seconds)
    except (OverflowError, OSError, ValueError):
        return None


def utc_text(seconds: float | None, fmt: str = "%Y-%m-%d %H:%M:%S", unknown: str = "????-??-?? ??:??:??") -> str:
    """`seconds` as UTC text, or `unknown` when it is no time a calendar can show."""
    t = utc_struct(seconds)
    return time.strftime(fmt, t) if t is not None else unknown
