"""Dataclasses to JSON-ready values. Remote strings may hold undecodable bytes (kept as
surrogates while parsing); here they become U+FFFD so every consumer gets valid UTF-8."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from vastprobe.model import HostReport, Unavailable

SCHEMA = "vastprobe.report/1"


def _clean(s: str) -> str:
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, str):
        return _clean(obj)
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if isinstance(obj, Unavailable):
        return {"unavailable": _clean(obj.reason)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    return _clean(str(obj))


def host_report_dict(r: HostReport) -> dict[str, Any]:
    findings = []
    for f in r.findings:
        d = {
            "rule": f.rule,
            "code": f.code,
            "severity": f.severity,
            "summary": _clean(f.summary),
            "pids": list(f.pids),
            "evidence": [{"source": _clean(e.source), "detail": _clean(e.detail)} for e in f.evidence],
            "hint": f.hint,
        }
        if f.caused_by:
            d["caused_by"] = f.caused_by
        findings.append(d)
    return {
        "target": _clean(r.target),
        "status": r.status,
        "error": _clean(r.error) if r.error else None,
        "verdict": r.verdict,
        "findings": findings,
        "scope": list(r.scope),
        "snapshot": to_jsonable(r.snapshot) if r.snapshot is not None else None,
        "timings": r.timings,
        **({"labels": r.labels} if r.labels else {}),
    }


def report_document(reports: list[HostReport]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hosts": [host_report_dict(r) for r in reports],
    }
