"""Inventories: what `vastprobe sweep` reads. Plain target lists (with ClusterShell-style ranges
and ssh_config aliases) or `vastai show instances --raw` JSON, told apart by their first byte."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_EXPANSION = 100_000
_RANGE = re.compile(r"\[([0-9,\-\s]+)\]")


class InventoryError(ValueError):
    pass


@dataclass(frozen=True)
class InventoryEntry:
    target: str
    skip: str | None = None  # why it is not probed (a vast.ai instance that is not running)
    labels: dict[str, str] = field(default_factory=dict)  # instance id, label: travel into the report


def expand_ranges(text: str) -> list[str]:
    """`gpu[01-03]` -> gpu01 gpu02 gpu03 (zero padding kept); `10.0.0.[1-2]:2222`; `n[1-2,7]`;
    several brackets multiply out. Text without brackets is returned as is."""
    m = _RANGE.search(text)
    if not m:
        return [text]
    values: list[str] = []
    for part in m.group(1).replace(" ", "").split(","):
        if not part:
            continue
        if "-" in part:
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or not hi.isdigit() or int(hi) < int(lo):
                raise InventoryError(f"bad range [{m.group(1)}] in {text!r}")
            width = len(lo) if lo.startswith("0") else 0
            values += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
        elif part.isdigit():
            values.append(part)
        else:
            raise InventoryError(f"bad range [{m.group(1)}] in {text!r}")
        if len(values) > MAX_EXPANSION:
            raise InventoryError(f"range in {text!r} expands to more than {MAX_EXPANSION} targets")
    head, tail = text[: m.start()], text[m.end() :]
    out = []
    for v in values:
        out += expand_ranges(head + v + tail)
        if len(out) > MAX_EXPANSION:
            raise InventoryError(f"{text!r} expands to more than {MAX_EXPANSION} targets")
    return out


def parse_plain(text: str) -> list[InventoryEntry]:
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        for word in line.split():
            try:
                out += [InventoryEntry(t) for t in expand_ranges(word)]
            except InventoryError as exc:
                raise InventoryError(f"line {n}: {exc}") from exc
    return out


def vast_address(inst: dict[str, Any]) -> str | None:
    """As the official CLI builds it: the direct port when `ports["22/tcp"]` exists, else the proxy
    `ssh_host:ssh_port`, plus one for jupyter run types."""
    ports = inst.get("ports") or {}
    direct = ports.get("22/tcp") if isinstance(ports, dict) else None
    ip = inst.get("public_ipaddr")
    if direct and ip:
        host_port = direct[0].get("HostPort") if isinstance(direct, list) and direct else None
        if host_port:
            return f"root@{str(ip).strip()}:{int(host_port)}"
    host, port = inst.get("ssh_host"), inst.get("ssh_port")
    if host and port:
        port = int(port)
        if "jupyter" in str(inst.get("image_runtype") or ""):
            port += 1
        return f"root@{host}:{port}"
    return None


def parse_vast(data: Any) -> list[InventoryEntry]:
    items = data.get("instances", data) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InventoryError("vast.ai JSON: expected a list of instances")
    out = []
    for inst in items:
        if not isinstance(inst, dict):
            continue
        labels = {"instance_id": str(inst.get("id", "")), "label": str(inst.get("label") or "")}
        labels = {k: v for k, v in labels.items() if v}
        addr = vast_address(inst)
        status = inst.get("actual_status")
        name = addr or f"vast-{inst.get('id', '?')}"
        if status != "running":
            out.append(
                InventoryEntry(
                    name, f"vast.ai instance {inst.get('id')} is {status or 'provisioning'}, not running", labels
                )
            )
        elif addr is None:
            out.append(InventoryEntry(name, f"vast.ai instance {inst.get('id')} has no SSH address yet", labels))
        else:
            out.append(InventoryEntry(addr, None, labels))
    return out


def parse_inventory(text: str) -> list[InventoryEntry]:
    stripped = text.lstrip()
    if stripped[:1] in ("[", "{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            if stripped.startswith("["):  # `[::1]:22`: a plain list that starts with an IPv6 target
                return parse_plain(text)
            raise InventoryError(f"inventory looks like JSON but is not: {exc}") from exc
        return parse_vast(data)
    return parse_plain(text)
