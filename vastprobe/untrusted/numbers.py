"""The one integer and float reader every parser uses.

Remote text is hostile: `str.isdigit()` accepts `²` and `int()` accepts `٣`, `1_000` and 5,000-digit
numbers (which raise past Python's limit). These read ASCII only, bounded in length, and answer
None instead of raising, so a garbled field is a missing value, never a crash.
"""

from __future__ import annotations

import math
import re

#: Longest integer accepted: 2^64 has 20 digits; a hex mask of 64 bits has 16.
MAX_INT_DIGITS = 20
#: Longest float text accepted ("12345678.123456" and the like).
MAX_FLOAT_CHARS = 32

_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_FLOAT = frozenset("0123456789.eE+-")


def is_digits(text: str, max_digits: int = MAX_INT_DIGITS) -> bool:
    """Non-empty ASCII digits only, at most `max_digits` of them."""
    return 0 < len(text) <= max_digits and _DIGITS.issuperset(text)


def read_digits(text: str, max_digits: int = MAX_INT_DIGITS) -> int | None:
    """Exactly non-empty ASCII digits, at most `max_digits` (no spaces, no sign), else None: the
    cheap reader for hot loops over fields already split out."""
    if 0 < len(text) <= max_digits and _DIGITS.issuperset(text):
        return int(text)
    return None


def read_int(text: str | None, max_digits: int = MAX_INT_DIGITS, signed: bool = False) -> int | None:
    """An ASCII decimal integer (surrounding spaces allowed, a leading `-` when signed), else None."""
    if text is None:
        return None
    t = text.strip()
    neg = signed and t[:1] == "-"
    if neg:
        t = t[1:]
    if not (0 < len(t) <= max_digits and _DIGITS.issuperset(t)):  # is_digits, inlined: ~2,000 calls a host
        return None
    n = int(t)
    return -n if neg else n


_SIGNED_INT = f"-?[0-9]{{1,{MAX_INT_DIGITS}}}"
_SIGNED_INTS = re.compile(f"(?:{_SIGNED_INT} )*{_SIGNED_INT}")


def read_signed_ints(fields: list[str]) -> list[int] | None:
    """Fields split on whitespace that are each a signed ASCII integer of at most MAX_INT_DIGITS
    digits, checked in one linear regex pass (a stat record has 21), else None."""
    if not fields:
        return []
    if _SIGNED_INTS.fullmatch(" ".join(fields)) is None:
        return None
    return [int(x) for x in fields]


def read_hex(text: str | None, max_digits: int = 16) -> int | None:
    """A hex number with or without `0x` (signal masks, clock-event reasons), else None."""
    if text is None:
        return None
    t = text.strip()
    if t[:2] in ("0x", "0X"):
        t = t[2:]
    if not (0 < len(t) <= max_digits and _HEX.issuperset(t)):
        return None
    return int(t, 16)


def read_float(text: str | None) -> float | None:
    """A finite ASCII decimal float, else None (`nan`, `inf`, Arabic-Indic digits and 1e999 are not numbers here)."""
    if text is None:
        return None
    t = text.strip()
    if not (0 < len(t) <= MAX_FLOAT_CHARS and _FLOAT.issuperset(t)):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return v if math.isfinite(v) else None
