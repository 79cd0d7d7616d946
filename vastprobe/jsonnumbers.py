"""JSON from outside (vast.ai inventories, capture files) read with bounded integers.

Python refuses to turn a string of more than 4,300 digits into an int (a ValueError from inside
`json.loads`, which no caller expects): such a number is read as a `HugeNumber`, which is no int,
so the field that holds it fails its own check and is named in the message."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: Longest integer read as one: far above any real field, far below Python's 4,300-digit limit.
MAX_JSON_INT_DIGITS = 1000


@dataclass(frozen=True)
class HugeNumber:
    """An integer too long to read; `digits` says how long."""

    digits: int

    def __str__(self) -> str:
        return f"<a number of {self.digits} digits>"


def _int(text: str) -> int | HugeNumber:
    digits = len(text) - text.startswith("-")
    return int(text) if digits <= MAX_JSON_INT_DIGITS else HugeNumber(digits)


def loads(text: str) -> Any:
    """json.loads, with every integer longer than MAX_JSON_INT_DIGITS a HugeNumber; raises what
    json.loads raises for bad JSON (JSONDecodeError, RecursionError)."""
    return json.loads(text, parse_int=_int)
