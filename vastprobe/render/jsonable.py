"""Reports and snapshots to JSON. Snapshots hold ~100k values per host in a sweep, so orjson walks
them (a sixth of the stdlib encoder's time: 0.4 vs 2.3 ms a 170 KB report) and only dataclasses go
through `_default`. Strings need no cleaning: remote bytes were decoded with errors="replace"
(probe/sections.py).

The text is what `json.dumps(..., separators=(",", ":"))` writes: ASCII only, non-ASCII as \\u
escapes (a C1 control or a bidi override in a process name never reaches a terminal raw). But
floats: `1e-7`, not `1e-07` (the same number), and `null` for a non-finite one (vastprobe's readers
never produce one; the stdlib would write `NaN`, which is not JSON). What orjson refuses (an integer
past 64 bits) goes through the stdlib encoder."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, get_args

import orjson

from vastprobe.model import DistributedJob, Finding, HostReport, JobRank, Status, Unavailable, Verdict

if TYPE_CHECKING:
    from vastprobe.history.store import HostMemory

SCHEMA = "vastprobe.report/1"

_FIELDS: dict[type, tuple[str, ...]] = {}


def _default(obj: Any) -> Any:
    """A dataclass as its fields. A frozen dataclass's instance `__dict__` holds exactly its fields,
    in order, and is handed to the encoder as it is (a third of the encoding time of a snapshot went
    into copying it); anything else in it (a cached property) makes a copy of the fields instead."""
    if isinstance(obj, Unavailable):
        return {"unavailable": obj.reason}
    cls = type(obj)
    names = _FIELDS.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(obj):
            if isinstance(obj, (set, frozenset)):
                return sorted(obj)
            return str(obj)
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(obj))
    own = getattr(obj, "__dict__", None)
    if own is not None and len(own) == len(names):
        return own
    return {name: getattr(obj, name) for name in names}


#: Every type orjson would write its own way goes through `_default`, as with the stdlib encoder.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS
#: What the stdlib escapes and orjson writes raw: DEL and everything past ASCII
_NON_ASCII = re.compile(r"[^\x00-\x7e]")


def _ascii_escape(m: re.Match[str]) -> str:
    """As the stdlib's ensure_ascii: one \\u escape, or a surrogate pair past the BMP."""
    c = ord(m.group())
    if c > 0xFFFF:
        c -= 0x10000
        return f"\\u{0xD800 | c >> 10:04x}\\u{0xDC00 | c & 0x3FF:04x}"
    return f"\\u{c:04x}"


def dumps(obj: Any, indent: int | None = None) -> str:
    if indent is None:
        try:
            text = orjson.dumps(obj, default=_default, option=_ORJSON_OPTIONS).decode()
        except orjson.JSONEncodeError:
            return json.dumps(obj, default=_default, separators=(",", ":"))
        return text if text.isascii() and "\x7f" not in text else _NON_ASCII.sub(_ascii_escape, text)
    return json.dumps(obj, default=_default, indent=indent)


def to_jsonable(obj: Any) -> Any:
    """Plain dicts and lists, for tests and for embedding in other documents."""
    return json.loads(dumps(obj))


def _finding_dict(f: Finding) -> dict[str, Any]:
    d: dict[str, Any] = {
        "rule": f.rule,
        "code": f.code,
        "severity": f.severity,
        "summary": f.summary,
        "pids": list(f.pids),
        "evidence": [{"source": e.source, "detail": e.detail} for e in f.evidence],
        "hint": f.hint,
    }
    if f.caused_by:
        d["caused_by"] = f.caused_by
    if f.remote:
        d["remote"] = f.remote
    if f.peer is not None:  # a TCP connection whose other end is off this host
        d["peer"] = {"pid": f.peer.pid, "local": f.peer.local, "remote": f.peer.remote}
    return d


def host_report_dict(r: HostReport, snapshot: bool = False) -> dict[str, Any]:
    """`snapshot`: with the parsed evidence, the bulk of a report (0.1-0.6 MB a host); asked for
    with --snapshot, left out otherwise (pipes, cron mail, jq)."""
    findings = [_finding_dict(f) for f in r.findings]
    by_identity = {id(f): d for f, d in zip(r.findings, findings, strict=True)}

    def same(f: Finding) -> dict[str, Any]:
        return by_identity.get(id(f)) or _finding_dict(f)

    out: dict[str, Any] = {
        "target": r.target,
        "status": r.status,
        "error": r.error,
        "verdict": r.verdict,
        "headline": r.headline if r.headline is not None else r.error,
        "findings": findings,
        # notes (groups of info findings alone) are no incidents: they stay in `findings`
        "incidents": [
            {"headline": i.headline, "root": same(i.root), "consequences": [same(c) for c in i.consequences]}
            for i in r.incidents
            if any(f.severity != "info" for f in i.findings)
        ],
        "scope": list(r.scope),
    }
    if snapshot:
        out["snapshot"] = r.snapshot
    out["timings"] = r.timings
    if r.labels:
        out["labels"] = r.labels
    if r.jobs:
        out["jobs"] = [job_dict(j, r.target) for j in r.jobs]
    if r.last_words is not None:
        out["last_words"] = {"log": r.last_words.log, "lines": list(r.last_words.lines)}
    if r.outlier_of is not None:
        o = r.outlier_of
        out["outlier_of"] = {
            "group": o.group,
            "group_size": o.group_size,
            "majority_size": o.majority_size,
            "differences": list(o.differences),
        }
    return out


def job_dict(j: DistributedJob, host: str) -> dict[str, Any]:
    """A distributed job as one host saw it: its id, world size, the ranks here and the one holding it."""

    def rank(r: JobRank) -> dict[str, Any]:
        return {"host": host, "rank": r.rank, "local_rank": r.local_rank, "pid": r.pid, "state": r.state,
                "why": r.why, "gpu": r.gpu}  # fmt: skip

    culprit = j.culprits[0] if j.culprits else None
    where = host
    if culprit is None and j.held_by is not None:  # named on another host of the sweep
        where, culprit = j.held_by
    return {
        "id": j.key,
        "world_size": j.world_size,
        "ranks": [rank(r) for r in j.ranks],
        "culprit": None
        if culprit is None
        else {
            "host": where,
            "rank": culprit.rank,
            "local_rank": culprit.local_rank,
            "pid": culprit.pid,
            "why": culprit.why,
        },
        "waiting": [r.rank for r in j.waiting],
        "progress": j.progress,
    }


def generated_at() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def summary_dict(
    reports: list[HostReport],
    exit_code: int,
    unfinished: int = 0,
    memory: Mapping[str, HostMemory] | None = None,
) -> dict[str, Any]:
    """What the run came to, in the shape of every run (each status and verdict counted, zeros
    too), so `jq .summary.verdict.stalled` needs no default; `complete` is false when it was
    interrupted, with how many targets did not finish; `groups`: the hosts that are not healthy,
    folded by cause as the sweep table folds them (render/groups.py), with the history's
    transition when there is one."""
    status = dict.fromkeys(get_args(Status), 0)
    verdict = dict.fromkeys(get_args(Verdict), 0)
    for r in reports:
        status[r.status] = status.get(r.status, 0) + 1
        verdict[r.verdict] = verdict.get(r.verdict, 0) + 1
    out: dict[str, Any] = {"hosts": len(reports), "status": status, "verdict": verdict, "exit_code": exit_code}
    out["complete"] = unfinished == 0
    if unfinished:
        out["unfinished"] = unfinished
    from vastprobe.render.groups import summary_groups

    out["groups"] = summary_groups(reports, memory)
    jobs = _jobs_across(reports)
    if jobs:
        out["jobs"] = jobs
    return out


def _jobs_across(reports: list[HostReport]) -> list[dict[str, Any]]:
    """The run's multi-host jobs, each once (report/job_joins.py): its hosts, the rank that holds
    it and where, the hosts that wait on it, and the ranks no host of the run has."""
    from vastprobe.report.job_joins import jobs_across_hosts

    out = []
    for job in jobs_across_hosts(reports):
        holder = _rank_dict(*job.holder) if job.holder is not None else None
        out.append({
            "id": job.key,
            "world_size": job.world_size,
            "hosts": [t for t, _j in job.parts],
            "holder": holder,
            "also_held_by": [_rank_dict(t, o) for t, o in job.also],
            "waiting": [t for t, _j in job.waiting],
            "moving": [t for t, _j in job.moving],
            "missing": list(job.missing),
        })  # fmt: skip
    return out


def _rank_dict(host: str, c: JobRank) -> dict[str, Any]:
    return {"host": host, "rank": c.rank, "local_rank": c.local_rank, "pid": c.pid, "state": c.state, "why": c.why}


def report_document(
    reports: list[HostReport], snapshot: bool = False, summary: dict[str, Any] | None = None
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "generated_at": generated_at(),
        "hosts": [host_report_dict(r, snapshot) for r in reports],
    }
    if summary is not None:
        doc["summary"] = summary
    return doc


def ndjson_host(r: HostReport, snapshot: bool = False) -> dict[str, Any]:
    """One host's report as an NDJSON line, stamped like a document: a line read alone (grep, tail,
    a log shipper) still says its schema and when it was written."""
    return {"schema": SCHEMA, "generated_at": generated_at(), **host_report_dict(r, snapshot)}


def ndjson_end(summary: dict[str, Any]) -> dict[str, Any]:
    """The line that ends an NDJSON stream: no `target`, a `summary` instead (summary_dict). A
    stream without it was cut short."""
    return {"schema": SCHEMA, "generated_at": generated_at(), "summary": summary}
