"""Reading vastprobe's NDJSON: one line per host, then the summary line that ends every stream."""

from __future__ import annotations

import json


def hosts_and_summary(text: str) -> tuple[list[dict], dict]:
    """The host lines and the summary; fails when the stream does not end with exactly one summary."""
    *hosts, last = (json.loads(line) for line in text.splitlines())
    assert "summary" in last and "target" not in last, last
    assert all("target" in h and "summary" not in h for h in hosts), hosts
    assert last["summary"]["hosts"] == len(hosts), (last, len(hosts))
    return hosts, last["summary"]


def host_lines(text: str) -> list[dict]:
    return hosts_and_summary(text)[0]
