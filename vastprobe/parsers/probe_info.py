"""The snapshot's `probe`: what the run says of itself rather than of the host (its version and
shell, each sample's uptime stamp, its own CPU time, whether it finished, and which of the
sections it should have written are missing, cut, failed or forged). A module of its own because
it reads the framing as a whole (ProbeOutput, probe/sections.py) and the source table's order
(`expected_sections`), not one source."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vastprobe.model import ProbeInfo
from vastprobe.probe import sources as src

if TYPE_CHECKING:
    from vastprobe.parsers.reading import Sections
    from vastprobe.probe.script import ProbeParams
    from vastprobe.probe.sections import ProbeOutput


def build_probe_info(
    sections: Sections,
    params: ProbeParams,
    meta: dict[str, str],
    fmt: int,
    shell_pid: int | None,
    shell_ppid: int | None,
    transport: str,
    output_bytes: int,
) -> ProbeInfo:
    out = sections.out
    uptimes = tuple(
        u for u in (sections.read(src.NOW, sections.text(src.NOW, n), n=n) for n in src.SAMPLES) if u is not None
    )
    return ProbeInfo(
        version=meta.get("version", ""),
        shell_pid=shell_pid,
        shell_ppid=shell_ppid,
        transport=transport,
        sample_uptimes=uptimes,
        complete=out.complete,
        deadline_hit=out.deadline_hit,
        truncated_sections=tuple(n for n, s in out.sections.items() if s.truncated),
        failed_sections=tuple((n, s.rc) for n, s in out.sections.items() if s.rc not in (0, None)),
        cpu_seconds=sections.read(src.TIMES, sections.text(src.TIMES)),
        output_bytes=output_bytes,
        timeout_mode=meta.get("timeout", ""),
        tampering=out.anomalies,
        unfinished_sections=_unfinished(out, params, fmt),
    )


def _unfinished(out: ProbeOutput, params: ProbeParams, fmt: int) -> tuple[str, ...]:
    """The sections this probe version writes for these parameters that are missing or cut, in
    the probe's order (format 1 captures: only the ones cut, their section list was another)."""
    if fmt < 2:
        return tuple(n for n, s in out.sections.items() if s.truncated)
    wanted = src.expected_sections(len(params.logs), len(params.artifacts), params.sample != 0)
    extra = tuple(n for n in src.OPTIONAL if (s := out.get(n)) is not None and s.truncated)
    return tuple(n for n in wanted if (s := out.get(n)) is None or s.truncated) + extra
