"""Memory cgroups: /proc/PID/cgroup lines, the probe's cgroup map, and the counters files.

/proc/42/cgroup:4:memory:/vpt          (v1)
/proc/42/cgroup:0::/system.slice/x     (v2)
M<TAB>v1<TAB>/vpt<TAB>/sys/fs/cgroup/memory/vpt
/sys/fs/cgroup/memory/vpt/memory.oom_control:oom_kill 1

`build_cgroups` gives the snapshot its `cgroups`: the cgmap section's cgroups with their counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vastprobe.model import CgroupMemory
from vastprobe.parsers.procfs_lines import group_by_pid, to_int
from vastprobe.probe import sources as src

if TYPE_CHECKING:
    from vastprobe.parsers.reading import Sections

#: cgroup v1 reports "no limit" as LONG_MAX rounded down to the page size.
_V1_UNLIMITED = 2**62


def parse_proc_cgroup_section(text: str) -> dict[int, tuple[str | None, str | None]]:
    """PID -> (v1 memory cgroup path, v2 cgroup path)."""
    out: dict[int, tuple[str | None, str | None]] = {}
    for pid, lines in group_by_pid(text, "cgroup").lines.items():
        v1 = v2 = None
        for line in lines:
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            if parts[0] == "0" and parts[1] == "":
                v2 = parts[2]
            elif "memory" in parts[1].split(","):
                v1 = parts[2]
        out[pid] = (v1, v2)
    return out


def parse_cgmap(text: str) -> list[tuple[str, str, str]]:
    """(version, cgroup path, directory) triples."""
    out = []
    for line in text.split("\n"):
        f = line.split("\t")
        if len(f) == 4 and f[0] == "M" and f[1] in ("v1", "v2"):
            out.append((f[1], f[2], f[3]))
    return out


def _bytes(value: str | None) -> int | None:
    if value is None or value.strip() == "max":
        return None
    n = to_int(value)
    return None if n is None or n >= _V1_UNLIMITED else n


def parse_cgmem(cgmap_text: str, counters_text: str) -> list[CgroupMemory]:
    """Both sections at once: the cgmap section's cgroups with the cgmem section's counters."""
    return parse_cgmem_section(counters_text, parse_cgmap(cgmap_text))


def parse_cgmem_section(counters_text: str, cgmap: list[tuple[str, str, str]]) -> list[CgroupMemory]:
    """The memory counters (cgmem section) of each cgroup that parse_cgmap found."""
    files: dict[str, dict[str, list[str]]] = {}
    for line in counters_text.split("\n"):
        path, sep, value = line.partition(":")
        if not sep or "/memory." not in path:
            continue
        directory, _, name = path.rpartition("/")
        files.setdefault(directory, {}).setdefault(name, []).append(value)
    out = []
    for version, cgpath, directory in cgmap:
        f = files.get(directory)
        if not f:
            continue

        def kv(name: str, f: dict[str, list[str]] = f) -> dict[str, str]:
            pairs = (line.split(None, 1) for line in f.get(name, []))
            return {p[0]: p[1] for p in pairs if len(p) == 2}

        def one(name: str, f: dict[str, list[str]] = f) -> str | None:
            values = f.get(name)
            return values[0] if values else None

        if version == "v1":
            oc = kv("memory.oom_control")
            out.append(
                CgroupMemory(
                    version="v1",
                    path=cgpath,
                    directory=directory,
                    oom_kill=to_int(oc.get("oom_kill", "")),
                    oom=to_int(oc.get("under_oom", "")),
                    limit_bytes=_bytes(one("memory.limit_in_bytes")),
                    usage_bytes=_bytes(one("memory.usage_in_bytes")),
                    peak_bytes=_bytes(one("memory.max_usage_in_bytes")),
                    failcnt=to_int(one("memory.failcnt") or ""),
                )
            )
        else:
            ev = kv("memory.events")
            out.append(
                CgroupMemory(
                    version="v2",
                    path=cgpath,
                    directory=directory,
                    oom_kill=to_int(ev.get("oom_kill", "")),
                    oom=to_int(ev.get("oom", "")),
                    limit_bytes=_bytes(one("memory.max")),
                    usage_bytes=_bytes(one("memory.current")),
                    peak_bytes=_bytes(one("memory.peak")),
                    failcnt=to_int(ev.get("max", "")),
                )
            )
    return out


def build_cgroups(sections: Sections) -> tuple[CgroupMemory, ...]:
    return tuple(sections.read(src.CGMEM, sections.text(src.CGMEM), sections.read(src.CGMAP, sections.text(src.CGMAP))))
