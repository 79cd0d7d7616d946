"""The snapshot's `kernel_log`: the kmsg section and, when the probe wrote it, kmsg.fallback, read
together by parsers/kmsg.py with the host's boot time and the time of the probe (dmesg's stamps
count from boot; a syslog stamp has no year). A module of its own, beside kmsg.py rather than in
it, because it undoes the probe's framing of those sections (`_kmsg_text`) and needs the host's
facts, which that parser of lines does not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vastprobe.model import available
from vastprobe.probe import sources as src

if TYPE_CHECKING:
    from vastprobe.model import HostFacts, KernelLog
    from vastprobe.parsers.reading import Sections


def build_kernel_log(sections: Sections, fmt: int, facts: HostFacts) -> KernelLog:
    btime = available(facts.btime)
    kernel_log: KernelLog = sections.read(
        src.KMSG,
        _kmsg_text(sections, src.KMSG, fmt),
        _kmsg_text(sections, src.KMSG_FALLBACK, fmt) or None,
        btime,
        now=btime + facts.uptime if btime is not None else None,  # syslog stamps have no year
        also=[src.KMSG_FALLBACK],
    )
    return kernel_log


def _kmsg_text(sections: Sections, source: src.Source, fmt: int) -> str | None:
    """Since format 2 every kernel-log line comes prefixed with `|`, so no line (nor a process name
    inside one) can pass for one of the section's own `@@` markers; older captures have none."""
    sec = sections.get(source)
    if sec is None:
        return None
    if fmt < 2:
        return sec.text
    lines = []
    for line in sec.text.split("\n"):
        if line.startswith("|"):
            body = line[1:]
            lines.append(" " + body if body.startswith("@@") else body)
        elif line.startswith("@@"):
            lines.append(line)
    return "\n".join(lines)
