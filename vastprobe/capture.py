"""A probe run as it came back from a target, before parsing. `collect` saves it with the raw
bytes, so a newer vastprobe can parse an old capture again.

A saved capture carries a sha256 of its raw bytes (a flipped byte is reported, not analysed) and
the scope `collect` was given (`--pid`/`--match`), which `analyze` uses unless told otherwise.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vastprobe import __version__, jsonnumbers

if TYPE_CHECKING:
    from vastprobe.model import Status
from vastprobe.probe.script import ProbeParams

CAPTURE_SCHEMA = "vastprobe.capture/1"
#: Largest capture file `analyze` reads: 32 MiB of raw output is ~43 MiB of base64, plus the snapshot.
MAX_CAPTURE_FILE = 512 * 1024 * 1024
_STATUSES = ("ok", "unreachable", "auth-failed", "host-key-rejected", "timeout", "probe-error", "skipped")


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
    pids: tuple[int, ...] = ()  # collect's --pid: analyze's default scope
    matches: tuple[str, ...] = ()  # collect's --match
    exit_status: int | None = None  # the target's shell's, when it ended with one
    exit_signal: str | None = None  # the signal that ended it, when one did
    attempts: int = 1  # 2: the first run ended with no output at all and the probe was run again


def raw_sha256(output: bytes) -> str:
    return hashlib.sha256(output).hexdigest()


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
            "python_stacks": c.params.python_stacks,
        },
        "scope": {"pids": list(c.pids), "matches": list(c.matches)},
        "exit": {"status": c.exit_status, "signal": c.exit_signal, "attempts": c.attempts},
        "raw_sha256": raw_sha256(c.output),
        "raw_b64": base64.b64encode(c.output).decode("ascii"),
        "snapshot": snapshot,
    }


class CaptureError(ValueError):
    pass


def _text(d: dict[str, Any], key: str, default: str | None = None) -> str:
    v = d.get(key, default)
    if not isinstance(v, str) or any(0xD800 <= ord(ch) <= 0xDFFF for ch in v):
        raise CaptureError(f"field {key!r} is not text")
    return v


def _texts(d: dict[str, Any], key: str) -> tuple[str, ...]:
    v = d.get(key) or []
    if not isinstance(v, list):
        raise CaptureError(f"field {key!r} is not a list")
    return tuple(_text({"x": x}, "x") for x in v)


def _number(v: Any, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise CaptureError(f"field {key!r} is not a number")
    return float(v)


def capture_from_dict(d: dict[str, Any]) -> Capture:
    """A capture, checked field by field; a raw-bytes checksum mismatch becomes a capture whose
    status says so (analyze reports it as an error instead of analysing altered bytes)."""
    if not isinstance(d, dict) or d.get("schema") != CAPTURE_SCHEMA:
        schema = d.get("schema") if isinstance(d, dict) else None
        raise CaptureError(f"not a vastprobe capture (schema {schema!r}, want {CAPTURE_SCHEMA})")
    p = d.get("params")
    if not isinstance(p, dict):
        raise CaptureError("field 'params' is missing")
    sample = _number(p.get("sample"), "params.sample")
    if not 0 <= sample <= 600:
        raise CaptureError("field 'params.sample' is out of range")
    stacks = p.get("python_stacks", False)  # captures before --py-spy lack it
    if not isinstance(stacks, bool):
        raise CaptureError("field 'params.python_stacks' is not true or false")
    params = ProbeParams(
        sample=sample,
        logs=_texts(p, "logs"),
        artifacts=_texts(p, "artifacts"),
        boundary=_text(p, "boundary"),
        python_stacks=stacks,
    )
    status = d.get("status")
    if status not in _STATUSES:
        raise CaptureError(f"field 'status' is not a status: {status!r}")
    try:
        output = base64.b64decode(_text(d, "raw_b64"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CaptureError(f"field 'raw_b64' is not base64: {exc}") from exc
    scope = d.get("scope") or {}
    if not isinstance(scope, dict):
        raise CaptureError("field 'scope' is not an object")
    pids = scope.get("pids") or []
    if not isinstance(pids, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in pids):
        raise CaptureError("field 'scope.pids' is not a list of PIDs")
    error = d.get("error")
    timings = d.get("timings") or {}
    ended = d.get("exit") or {}
    if not isinstance(ended, dict):
        raise CaptureError("field 'exit' is not an object")
    exit_status = ended.get("status")
    if exit_status is not None and (isinstance(exit_status, bool) or not isinstance(exit_status, int)
                                    or not -1 <= exit_status <= 255):  # fmt: skip
        raise CaptureError("field 'exit.status' is not an exit status")
    exit_signal = _text(ended, "signal") if ended.get("signal") is not None else None
    attempts = ended.get("attempts", 1)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 9:
        raise CaptureError("field 'exit.attempts' is not a number of attempts")
    cap = Capture(
        target=_text(d, "target"),
        transport=_text(d, "transport"),
        status=status,
        error=_text(d, "error") if error is not None else None,
        output=output,
        truncated=bool(d.get("truncated")),
        params=params,
        timings={str(k): _number(v, "timings") for k, v in timings.items()} if isinstance(timings, dict) else {},
        captured_at=_number(d.get("captured_at") or 0, "captured_at"),
        pids=tuple(pids),
        matches=_texts(scope, "matches"),
        exit_status=exit_status,
        exit_signal=exit_signal[:32] if exit_signal is not None else None,
        attempts=attempts,
    )
    want = d.get("raw_sha256")
    if want is not None and (not isinstance(want, str) or raw_sha256(output) != want.lower()):
        return Capture(
            cap.target, cap.transport, "probe-error",
            f"the capture's raw bytes do not match their sha256 (recorded {str(want)[:64]!r}, "
            f"computed {raw_sha256(output)}): the file was altered or damaged; not analysed",
            b"", False, params, cap.timings, cap.captured_at, cap.pids, cap.matches,
        )  # fmt: skip
    return cap


def read_capture_bytes(path: Path | str) -> bytes:
    """The bytes of a capture file, or stdin for `-`; bounded."""
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(MAX_CAPTURE_FILE + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_CAPTURE_FILE + 1)
    except IsADirectoryError as exc:
        raise CaptureError(f"{path}: is a directory") from exc
    except OSError as exc:
        raise CaptureError(f"{path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_CAPTURE_FILE:
        raise CaptureError(f"{path}: larger than {MAX_CAPTURE_FILE} bytes; not a capture")
    return data


def load_captures(path: Path | str) -> list[Capture]:
    """A capture file holds one capture object, or a list of them (`-`: stdin)."""
    name = "stdin" if str(path) == "-" else str(path)
    data = read_capture_bytes(path)
    if b"\0" in data[:8192]:
        raise CaptureError(f"{name}: not a capture (binary data, not JSON text)")
    try:
        doc = jsonnumbers.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CaptureError(f"{name}: not a capture (not UTF-8 text at byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise CaptureError(
            f"{name}: not a capture (invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    except RecursionError as exc:
        raise CaptureError(f"{name}: not a capture (JSON nested too deeply)") from exc
    items = doc if isinstance(doc, list) else doc.get("captures", [doc]) if isinstance(doc, dict) else []
    if not isinstance(items, list) or not items:
        raise CaptureError(f"{name}: not a capture (no capture objects in it)")
    out = []
    for i, x in enumerate(items):
        try:
            out.append(capture_from_dict(x))
        except CaptureError as exc:
            where = f"{name}" if len(items) == 1 else f"{name}, capture {i}"
            raise CaptureError(f"{where}: {exc}") from exc
    return out
