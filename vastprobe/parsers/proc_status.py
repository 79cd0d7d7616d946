"""/proc/PID/status, the subset the probe greps (`Key:\\tvalue`, memory in kB)."""

from __future__ import annotations

from dataclasses import dataclass

from vastprobe.parsers.procfs_lines import group_by_pid, to_int
from vastprobe.untrusted.numbers import read_hex


@dataclass(frozen=True)
class StatusRecord:
    name: str | None
    state: str | None
    ppid: int | None
    tracer_pid: int | None
    uid: int | None  # real UID
    threads: int | None
    vm_rss_kb: int | None
    vm_hwm_kb: int | None
    nspid: tuple[int, ...]
    sig_ign: int | None
    sig_cgt: int | None
    voluntary_ctxt: int | None
    nonvoluntary_ctxt: int | None


def _kb(value: str) -> int | None:
    parts = value.split()
    return to_int(parts[0]) if parts else None


def _hex(value: str) -> int | None:
    return read_hex(value)


def parse_status(lines: list[str]) -> StatusRecord:
    kv: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep:
            kv[key] = value.strip()
    uid = kv.get("Uid", "").split()
    nspid = tuple(n for n in (to_int(x) for x in kv.get("NSpid", "").split()) if n is not None)
    return StatusRecord(
        name=kv.get("Name"),
        state=kv["State"][:1] if kv.get("State") else None,
        ppid=to_int(kv.get("PPid", "")),
        tracer_pid=to_int(kv.get("TracerPid", "")),
        uid=to_int(uid[0]) if uid else None,
        threads=to_int(kv.get("Threads", "")),
        vm_rss_kb=_kb(kv["VmRSS"]) if "VmRSS" in kv else None,
        vm_hwm_kb=_kb(kv["VmHWM"]) if "VmHWM" in kv else None,
        nspid=nspid,
        sig_ign=_hex(kv["SigIgn"]) if "SigIgn" in kv else None,
        sig_cgt=_hex(kv["SigCgt"]) if "SigCgt" in kv else None,
        voluntary_ctxt=to_int(kv.get("voluntary_ctxt_switches", "")),
        nonvoluntary_ctxt=to_int(kv.get("nonvoluntary_ctxt_switches", "")),
    )


def parse_status_section(text: str) -> tuple[dict[int, StatusRecord], dict[int, str]]:
    grouped = group_by_pid(text, "status")
    return {pid: parse_status(lines) for pid, lines in grouped.lines.items()}, grouped.errors
