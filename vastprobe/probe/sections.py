"""Splits the probe's framed output into sections; a cut or missing section is a fact, and so is a
section that appears twice or that the probe never writes: someone forged output (the first copy
is kept, never a later one)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_RC = re.compile(r"\n@@rc=(-?[0-9]{1,5})\n?$")


@dataclass(frozen=True)
class RawSection:
    name: str
    text: str
    rc: int | None  # None: the section was cut before its status line (size cap or deadline)

    @property
    def truncated(self) -> bool:
        return self.rc is None


@dataclass(frozen=True)
class ProbeOutput:
    sections: dict[str, RawSection]
    complete: bool  # the probe reached its end marker
    deadline_hit: bool
    framed: bool  # at least one section carried our boundary
    anomalies: tuple[str, ...] = ()  # repeated or undeclared sections

    def get(self, name: str) -> RawSection | None:
        return self.sections.get(name)


def decode(data: bytes) -> str:
    """Remote bytes are not guaranteed UTF-8: undecodable bytes become U+FFFD, so every string
    downstream is valid text (JSON, terminal). The exact bytes stay in `collect`'s capture."""
    return data.decode("utf-8", errors="replace")


def split_sections(data: bytes | str, boundary: str) -> ProbeOutput:
    text = decode(data) if isinstance(data, bytes) else data
    marker = f"\n@@{boundary}@@ "
    parts = ("\n" + text).split(marker)
    from vastprobe.probe.sources import declared

    sections: dict[str, RawSection] = {}
    anomalies: list[str] = []

    def keep(section: RawSection) -> None:
        if section.name in sections:
            anomalies.append(f"section {section.name[:40]!r} appears more than once")
        elif not declared(section.name):
            anomalies.append(f"unexpected section {section.name[:40]!r}")
        else:
            sections[section.name] = section

    complete = deadline = False
    open_name: str | None = None
    open_body = ""
    for part in parts[1:]:
        head, _, body = part.partition("\n")
        head = head.strip()
        if head == "end":
            complete = True
            continue
        if head == "deadline":
            deadline = True
            continue
        if head == "cut":  # the section's own awk stopped it at its size cap
            if open_name is not None:
                keep(_section(open_name, open_body, cut=True))
            open_name = None
            continue
        if head.startswith("/"):
            if open_name is not None and head[1:] == open_name:
                keep(_section(open_name, open_body))
            open_name = None
            continue
        if open_name is not None:  # a start without an end: the previous one was cut
            keep(_section(open_name, open_body, cut=True))
        open_name, open_body = head, body
    if open_name is not None:
        keep(_section(open_name, open_body, cut=True))
    return ProbeOutput(
        sections=sections, complete=complete, deadline_hit=deadline, framed=len(parts) > 1, anomalies=tuple(anomalies)
    )


def _section(name: str, body: str, cut: bool = False) -> RawSection:
    m = None if cut else _RC.search(body)
    if m is None:
        return RawSection(name=name, text=body, rc=None)
    return RawSection(name=name, text=body[: m.start()], rc=int(m.group(1)))
