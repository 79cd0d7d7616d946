"""Which files matter to the job: a listing of /tmp holds everybody's files, newest first is not
the job's first. A file the job holds open, or runs, or that is named like one of its programs,
comes before one that was merely written lately."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vastprobe.model import Artifact, HostSnapshot, Process, Unavailable

#: Program names that say nothing about which job a file belongs to.
GENERIC = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "ash",
        "zsh",
        "env",
        "python",
        "python3",
        "perl",
        "ruby",
        "node",
        "java",
        "sleep",
        "cat",
        "tee",
    }
)
_WORD = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class RankedArtifact:
    artifact: Artifact
    score: (
        int  # 4 held open for writing by the job, 3 held open, 2 run by it or named like it, 1 written since it started
    )
    reason: str | None
    writing: bool = False  # held open for writing by the job: its mtime is the job's last write


def _words(name: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(name[:256]) if len(w) >= 4}


#: A file named like the job's programs counts as the job's when its users wrote it since the job
#: started, or this many seconds before (the scripts a launcher writes, then runs).
NAMED_BEFORE_START = 60.0


def rank_artifacts(
    snapshot: HostSnapshot, entries: Iterable[Artifact], job: Sequence[Process], job_start: float | None
) -> list[RankedArtifact]:
    holders: dict[str, dict[int, tuple[Process, bool]]] = {}
    uids = {p.uid for p in job if p.uid is not None}
    run_paths: dict[str, Process] = {}
    relative: dict[str, Process] = {}  # a relative path's name: the cwd it is under is not known here
    names: dict[str, Process] = {}
    for p in job:
        if not isinstance(p.fds, Unavailable):
            for e in p.fds:
                if e.path.startswith("/"):
                    seen = holders.setdefault(e.path, {})
                    writes = e.mode in ("w", "rw") or (p.pid in seen and seen[p.pid][1])
                    seen[p.pid] = (p, writes)
        for arg in p.cmdline[:4]:
            if arg.startswith("/"):
                run_paths.setdefault(arg, p)  # the very file it runs: evidence whoever wrote it
            elif "/" in arg:
                relative.setdefault(arg.rsplit("/", 1)[-1], p)
        if p.comm not in GENERIC:
            for w in _words(p.comm):
                names.setdefault(w, p)
    out = []
    for a in entries:
        base = a.path.rsplit("/", 1)[-1]
        held = holders.get(a.path)
        if held:
            procs = list(held.values())
            writing = any(w for _p, w in procs)
            who = ", ".join(f"{p.comm} ({p.pid})" for p, _w in procs[:3]) + (" …" if len(procs) > 3 else "")
            out.append(
                RankedArtifact(
                    a, 4 if writing else 3, f"held open {'for writing ' if writing else ''}by {who}", writing
                )
            )
            continue
        runner = run_paths.get(a.path)
        if runner is not None:
            out.append(RankedArtifact(a, 2, f"run by {runner.comm} ({runner.pid})"))
            continue
        # a name alone is no evidence (another user's or another job's file named alike was called
        # the job's): only a file of the job's users, written since the job started, is tied by it
        ours = a.uid is None or a.uid in uids
        since = job_start is None or a.mtime >= job_start - NAMED_BEFORE_START
        runner = relative.get(base) if ours else None
        if runner is not None:
            out.append(RankedArtifact(a, 2, f"run by {runner.comm} ({runner.pid})"))
            continue
        like = next((names[w] for w in sorted(_words(base)) if w in names), None) if ours and since else None
        if like is not None:
            out.append(RankedArtifact(a, 2, f"named like {like.comm} ({like.pid}), of its user"))
            continue
        if (
            job_start is not None
            and a.mtime >= job_start
            and a.kind != "directory"
            and (a.uid is None or a.uid in uids)
        ):
            # a file written since the job started, by one of its users (another user's file is not the
            # job's; a directory's mtime moves with whoever adds a file to it)
            out.append(RankedArtifact(a, 1, "written since the job started"))
            continue
        out.append(RankedArtifact(a, 0, None))
    out.sort(key=lambda r: (-r.score, -r.artifact.mtime, r.artifact.path))
    return out


#: Processes that started this soon after boot are the system's (a host's init), not a job's.
BOOT_SECONDS = 30


def job_start(snapshot: HostSnapshot, job: Sequence[Process]) -> tuple[float, Process] | None:
    """When the job's earliest process started, on the target's clock; None for the boot's own."""
    btime = snapshot.host.btime
    tck = snapshot.host.clk_tck
    started = [p for p in job if p.starttime / tck >= BOOT_SECONDS]
    if isinstance(btime, Unavailable) or not started:
        return None
    first = min(started, key=lambda p: (p.starttime, p.pid))
    return btime + first.starttime / tck, first
