"""The snapshot's `logs`: one `LogFile` per `--log` path, from its stat in each sample
(s{sample}.logs, parsers/files.py), its tail (log.N, read by `log_tail`, this module's parser) and
the processes that hold it open (from the process table). A module of its own because a log file
joins three sources, and because a path the probe gave up on (a dead mount) is said so here, for
the tail and the stats alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vastprobe.model import LogFile, NotRead, Process, Unavailable
from vastprobe.parsers import files
from vastprobe.probe import sources as src
from vastprobe.probe.script import FILE_TIMEOUT
from vastprobe.untrusted.secrets import redact_lines

if TYPE_CHECKING:
    from vastprobe.parsers.reading import Sections
    from vastprobe.probe.script import ProbeParams
    from vastprobe.probe.sections import RawSection


#: Why a log's tail is missing where the probe could not open it (it printed `@@unreadable`)
UNREADABLE = "could not be opened for reading (no read permission: another user's file, or root squashed on NFS)"


def log_tail(sec: RawSection | None, fmt: int = 3, bound: int | None = None) -> str | Unavailable:
    """Since format 3 every line of the tail comes prefixed with `|` (a line without it is tail's
    complaint), so no log line can pass for a marker of the probe's own. Whole lines only: a read of
    the last `bound` bytes of a longer file begins mid-line, and a password cut from its URL's
    `postgres://app:` (the scheme and user before the cut) is masked by nothing."""
    if sec is None:
        return Unavailable("not read")
    if sec.text.startswith("@@notregular"):
        return Unavailable("not a regular file: not read")
    if sec.text.startswith("@@unreadable"):
        return Unavailable(UNREADABLE)
    refused = files.not_read(sec.text.split("\n", 1)[0])
    if refused is not None:
        return refused
    if fmt >= 3:
        content, complaints = [], []
        for line in sec.text.split("\n"):
            if line.startswith("|"):
                content.append(line[1:])
            elif line:
                complaints.append(line)
        if complaints and not content:
            return Unavailable(complaints[-1].split(": ")[-1][:200])
        if bound is not None and len(content) > 1 and sum(len(c.encode("utf-8", "surrogateescape")) + 1
                                                          for c in content) >= bound:  # fmt: skip
            content = content[1:]
        return "".join(c + "\n" for c in redact_lines(content))  # a log prints what its job was given
    if sec.rc not in (0, None):
        return Unavailable(sec.text.strip().split(": ")[-1][:200] or f"tail exited {sec.rc}")
    return sec.text


def build_logs(
    sections: Sections, params: ProbeParams, fmt: int, processes: tuple[Process, ...]
) -> tuple[LogFile, ...]:
    """Every sample's stats first, then each log's tail, in the order of `params.logs`."""
    out = sections.out
    logs = []
    stat_samples = [
        (n, sections.read(src.LOGSTAT, sections.text(src.LOGSTAT, n), n=n))
        for n in src.SAMPLES
        if sections.get(src.LOGSTAT, n)
    ]
    for i, path in enumerate(params.logs):
        tail: str | Unavailable = sections.read(
            src.LOGTAIL, sections.get(src.LOGTAIL, i), fmt, params.log_tail_bytes, n=i
        )
        gave_up = [n for n in (src.LOGTAIL.section(i), *(src.LOGSTAT.section(k) for k in src.SAMPLES))
                   if n in out.abandoned]  # fmt: skip
        if gave_up:  # the probe stopped waiting for the child that touched it: a dead mount
            no_answer = NotRead(f"no answer within {FILE_TIMEOUT} s: its file system may be dead (a hung mount)",
                                "unanswered")  # fmt: skip
            if not isinstance(tail, str) and src.LOGTAIL.section(i) in gave_up:
                tail = no_answer
            for n, sample in stat_samples:
                if i not in sample and src.LOGSTAT.section(n) in out.abandoned:
                    sample[i] = no_answer
        logs.append(
            LogFile(
                path=path,
                stats=tuple(s.get(i, Unavailable("not stat'ed")) for _n, s in stat_samples),
                tail=tail,
                holders=_holders(processes, path),
            )
        )
    return tuple(logs)


def _holders(processes: tuple[Process, ...], path: str) -> tuple[tuple[int, int, bool], ...]:
    """(pid, fd, deleted) of every fd open on `path`."""
    return tuple(
        (p.pid, e.fd, e.deleted)
        for p in processes
        if not isinstance(p.fds, Unavailable)
        for e in p.fds
        if e.path == path
    )
