"""A probe run as it came back from a target, before parsing. `collect` saves it with the raw
bytes, so a newer vastprobe can parse an old capture again."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vastprobe import __version__

if TYPE_CHECKING:
    from vastprobe.model import Status
from vastprobe.probe.render import ProbeParams

CAPTURE_SCHEMA = "vastprobe.capture/1"


@dataclass(frozen=True)
class Capture:
    target: str
    transport: str
    status: Status
    error: str | None
    output: bytes
    truncated: bool
    params: ProbeParams
    timings: dict[str, float] = field(default_factory=dict)
    captured_at: float = field(default_factory=time.time)


def capture_to_dict(c: Capture, snapshot: Any) -> dict[str, Any]:
    return {
        "schema": CAPTURE_SCHEMA,
        "vastprobe_version": __version__,
        "captured_at": c.captured_at,
        "target": c.target,
        "transport": c.transport,
        "status": c.status,
        "error": c.error,
        "truncated": c.truncated,
        "timings": c.timings,
        "params": {
            "sample": c.params.sample,
            "logs": list(c.params.logs),
            "artifacts": list(c.params.artifacts),
            "boundary": c.params.boundary,
        },
        "raw_b64": base64.b64encode(c.output).decode("ascii"),
        "snapshot": snapshot,
    }


class CaptureError(ValueError):
    pass


def capture_from_dict(d: dict[str, Any]) -> Capture:
    if d.get("schema") != CAPTURE_SCHEMA:
        raise CaptureError(f"not a vastprobe capture (schema {d.get('schema')!r}, want {CAPTURE_SCHEMA})")
    p = d["params"]
    params = ProbeParams(
        sample=float(p["sample"]), logs=tuple(p["logs"]), artifacts=tuple(p["artifacts"]), boundary=p["boundary"]
    )
    return Capture(
        target=d["target"],
        transport=d["transport"],
        status=d["status"],
        error=d.get("error"),
        output=base64.b64decode(d["raw_b64"]),
        truncated=bool(d.get("truncated")),
        params=params,
        timings=dict(d.get("timings") or {}),
        captured_at=float(d.get("captured_at") or 0),
    )


def load_captures(path: Path) -> list[Capture]:
    """A capture file holds one capture object, or a list of them."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CaptureError(f"{path}: {exc}") from exc
    items = data if isinstance(data, list) else data.get("captures", [data]) if isinstance(data, dict) else []
    try:
        return [capture_from_dict(x) for x in items]
    except (KeyError, TypeError, ValueError) as exc:
        raise CaptureError(f"{path}: {exc}") from exc
