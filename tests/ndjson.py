"""Reading vastprobe's NDJSON: one line per host, then the summary line that ends every stream."""

from __future__ import annotations

import json


def hosts_and_summary(text: str) -> tuple[list[dict], dict]:
    """The host lines, the last of each target's (a host whose report a join across hosts changed
    after its line went out is written again), and the summary; fails when the stream does not end
    with exactly one summary."""
    *lines, last = (json.loads(line) for line in text.split("\n") if line)
    assert "summary" in last and "target" not in last, last
    assert all("target" in h and "summary" not in h for h in lines), lines
    hosts = list({h["target"]: h for h in lines}.values())
    assert last["summary"]["hosts"] == len(hosts), (last, len(hosts))
    return hosts, last["summary"]


def host_lines(text: str) -> list[dict]:
    return hosts_and_summary(text)[0]
