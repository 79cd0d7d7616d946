"""The terminal report, per host: the headline (verdict and the one line of why), incidents root
cause first with their chains drawn as trees, findings below the verdict folded, the timeline;
then the processes the findings name (all in scope with -v), GPUs, logs, and the job's files.

Every remote string goes through `safe()` and into a Text object, so neither rich markup nor
escape sequences from a target reach the terminal. rich itself drops colour for NO_COLOR and for
output that is not a terminal; its width comes from the terminal, or COLUMNS."""

from __future__ import annotations

from typing import IO

from rich.console import Console
from rich.text import Text

from vastprobe.analysis.logs import log_health
from vastprobe.analysis.progress import progress
from vastprobe.analysis.relevance import job_start, rank_artifacts
from vastprobe.clock import utc_text
from vastprobe.model import HostReport, HostSnapshot, Process, Unavailable
from vastprobe.render import incidents as story
from vastprobe.render.layout import MIDDLE, cropped, hanging
from vastprobe.units import processes
from vastprobe.untrusted.safe import safe

MAX_ARTIFACTS = 5


def make_console(file: IO[str] | None = None) -> Console:
    return Console(file=file, highlight=False, soft_wrap=False)


def render_reports(
    reports: list[HostReport], file: IO[str] | None = None, verbose: bool = False, brief: bool = False
) -> None:
    """`brief`: the headline alone, one host after another."""
    console = make_console(file)
    for r in reports:
        story.headline(console, r, facts=not brief)
        if brief:
            continue
        render_host(console, r, verbose)
        console.print()


def render_host(console: Console, r: HostReport, verbose: bool) -> None:
    story.last_words(console, r)
    story.incidents(console, r, verbose)
    story.timeline(console, r.timeline)
    snap = r.snapshot
    if snap is None:
        return
    console.print()
    _processes(console, r, snap, verbose)
    _gpus(console, snap)
    _logs(console, snap)
    _artifacts(console, r, snap, verbose)


def named_pids(r: HostReport) -> list[int]:
    """The processes the findings and their drawn chains name, in the order they name them."""
    pids: list[int] = []
    for inc in r.incidents:
        for f in inc.findings:
            pids += f.pids
        for _f, pic in inc.pictures:
            pids += pic.pids
    return list(dict.fromkeys(pids))


def _processes(console: Console, r: HostReport, snap: HostSnapshot, verbose: bool) -> None:
    by_pid = {p.pid: p for p in snap.processes}
    named = {p for p in named_pids(r) if p in by_pid}
    scope = set(r.scope)
    if verbose:
        shown = [p for p in snap.processes if p.pid in scope or p.pid in named]
        title = f"processes in scope ({len(scope)})" + (
            f" and {len(named - scope)} more the findings name" if named - scope else ""
        )
    else:
        shown = [p for p in snap.processes if p.pid in named]
        if not shown:
            console.print(Text(f"  {processes(len(scope))} in scope, none named by a finding (-v lists them)"))
            return
        title = f"processes the findings name ({len(shown)}; {len(scope)} in scope, -v lists them)"
    console.print(Text(f"  {title}:", style="bold"))
    _process_rows(console, snap, shown)


def _process_rows(console: Console, snap: HostSnapshot, shown: list[Process]) -> None:
    header = Text(f"{'pid':>7} {'ppid':>7} st {'wchan':<18} {'cpu Δ':>6}  command", style="dim")
    cropped(console, "  ", header)
    for p in shown:
        pr = progress(p)
        cpu = f"{pr.cpu_ticks / snap.host.clk_tck:.2f}s" if pr.sampled else "-"
        wchan = "?" if isinstance(p.wchan, Unavailable) else "-" if p.wchan in ("0", "") else p.wchan
        row = Text(f"{p.pid:>7} {p.ppid:>7} {p.state:<2} {safe(wchan, 18):<18} {cpu:>6}  ")
        row.append(safe(p.command, 400), style=MIDDLE)
        cropped(console, "  ", row)


def _gpus(console: Console, snap: HostSnapshot) -> None:
    g = snap.gpus
    if not g.present:
        console.print(Text("  GPUs: no nvidia-smi on the target", style="dim"))
        return
    if g.error:
        hanging(console, "  ", Text("GPUs: ", style="red"), Text(safe(g.error), style="red"))
    for sample_rows in g.samples[-1:]:
        for row in sample_rows:
            utils = [s.utilization_gpu for samp in g.samples for s in samp if s.index == row.index]
            text = ", ".join("n/a" if u is None else f"{u:.0f}%" for u in utils)
            mem = (
                f"{row.memory_used_mib:.0f}/{row.memory_total_mib:.0f} MiB"
                if row.memory_used_mib is not None and row.memory_total_mib
                else "n/a"
            )
            cropped(console, "  ", Text(f"GPU {row.index} {safe(row.name)}  util {text}  mem {mem}"))


def _logs(console: Console, snap: HostSnapshot) -> None:
    now = None
    if isinstance(snap.host.btime, int) and snap.probe.sample_uptimes:
        now = snap.host.btime + snap.probe.sample_uptimes[-1]
    for log in snap.logs:
        # facts only: whether a log is stale depends on --stale-after, and missing-logs says so
        h = log_health(log, now, float("inf"))
        age = f"last written {h.age:.0f}s before the probe" if h.age is not None else ""
        words: list[str] = [h.state] if h.state != "ok" else []
        words += [w for w in (age, "growing" if h.grew else "") if w]
        body = Text(", ".join(words) or "ok")
        hanging(console, "  ", Text(f"log {safe(log.path, 300)}: "), body)


def _artifacts(console: Console, r: HostReport, snap: HostSnapshot, verbose: bool) -> None:
    by_pid = {p.pid: p for p in snap.processes}
    named = [by_pid[p] for p in named_pids(r) if p in by_pid]
    scope, excluded = set(r.scope), set(snap.excluded_pids)
    job = named or [p for p in snap.processes if p.pid in scope]
    # a whole host's scope is no job: "written since the job started" would date every file in /tmp,
    # and the processes its findings name are no job either (a stuck make and an OOM loser in
    # someone else's session are not one job started at the earliest of them)
    everyone = {p.pid for p in snap.processes if not p.kernel_thread and p.pid not in excluded}
    whole_host = any(p.kernel_thread for p in snap.processes) and scope == everyone
    start = None if whole_host else job_start(snap, job)
    limit = MAX_ARTIFACTS * 4 if verbose else MAX_ARTIFACTS
    for a in snap.artifacts:
        ranked = rank_artifacts(snap, a.entries, job, start[0] if start else None)
        line = Text(f"  artifacts {safe(a.pattern, 200)}: {a.matched} match{'es' if a.matched != 1 else ''}")
        # the job's files only (a host's /tmp holds everybody's): held open, run or named like its
        # programs, written by its users since it started; on a whole host, the ones held open; -v all
        if not verbose:
            least = 3 if whole_host else 1
            shown = [ra for ra in ranked if ra.score >= least]
            if len(shown) < len(ranked):
                whose = "held open" if whole_host else "the job's"
                line.append(f", {len(shown)} {whose} (-v lists all)" if shown else f", none {whose} (-v lists them)")
            ranked = shown
        if ranked:
            first = ", held open first" if whole_host else ", the job's first"
            line.append(first if ranked[0].score > 0 else ", newest first")
        if a.error:
            line.append(f" ({safe(a.error, 120)})", style="dim")
        console.print(line)
        folder = _folder(a.pattern)
        for ra in ranked[:limit]:
            e = ra.artifact
            when = utc_text(e.mtime)  # a target can send any mtime (2^62): never raises
            t = Text(f"{when}  {e.size:>10}  ", style="dim")
            t.append(safe(e.path[len(folder) :] if folder and e.path.startswith(folder) else e.path, 300))
            if ra.reason:
                t.append(f"  {safe(ra.reason, 300)}", style="italic")
            cropped(console, "    ", t)


def _folder(pattern: str) -> str:
    """`/tmp/run/` for `/tmp/run/*`: the part every match shares, left out of each row."""
    head, _, last = pattern.rpartition("/")
    if not head or any(c in head for c in "*?["):
        return ""
    return head + "/" if any(c in last for c in "*?[") else ""
