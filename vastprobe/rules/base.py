"""What a rule is: metadata that never changes meaning, and a pure check over a snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from vastprobe.analysis.gpu import gpu_expected, gpu_holders
from vastprobe.analysis.logs import LogHealth, found_logs, log_health
from vastprobe.analysis.oom import OomMatch, job_is_bounded, match_oom_kills
from vastprobe.analysis.progress import Progress, progress
from vastprobe.analysis.ranks import find_jobs
from vastprobe.analysis.stalls import StalledChain, StallEvidence, stall_evidence, stalled_chains
from vastprobe.analysis.tree import ProcessTree
from vastprobe.analysis.waitgraph import WaitGraph
from vastprobe.model import DistributedJob, Evidence, Finding, HostSnapshot, LogFile, Process, Severity, available
from vastprobe.options import RuleOptions
from vastprobe.probe.sources import PROC

__all__ = ["ONE_SAMPLE", "Context", "Rule", "RuleMeta", "RuleOptions"]

#: Ends the summary of a finding that one sample (--sample 0) made a note or a warning: what it saw
#: once, a second sample would confirm or clear.
ONE_SAMPLE = " (seen in one sample)"


@dataclass(frozen=True)
class RuleMeta:
    slug: str  # kebab-case, stable
    code: str  # VPnnn, never reused
    severity: Severity  # the default; a check may raise or lower it per finding
    summary: str

    def finding(
        self,
        summary: str,
        pids: Iterable[int] = (),
        evidence: Iterable[Evidence] = (),
        hint: str | None = None,
        severity: Severity | None = None,
        caused_by: str | None = None,
        remote: str | None = None,
    ) -> Finding:
        return Finding(
            rule=self.slug,
            code=self.code,
            severity=severity or self.severity,
            summary=summary,
            pids=tuple(pids),
            evidence=tuple(evidence),
            hint=hint,
            caused_by=caused_by,
            remote=remote,
        )


class Context:
    """One snapshot with the derived views every rule needs, computed once."""

    def __init__(
        self, snapshot: HostSnapshot, scope: tuple[int, ...], options: RuleOptions, tree: ProcessTree | None = None
    ) -> None:
        self.snapshot = snapshot
        self.scope = frozenset(scope)
        self.options = options
        self.tree = tree or ProcessTree(snapshot)

    @cached_property
    def graph(self) -> WaitGraph:
        return WaitGraph(self.snapshot, self.tree)

    @cached_property
    def stalled_chains(self) -> list[StalledChain]:
        return stalled_chains(self)

    def stall_evidence(self, chain: StalledChain) -> StallEvidence:
        return stall_evidence(self, chain.chain.pids, chain.waiter)

    @cached_property
    def samples_taken(self) -> int:
        """Samples the probe took of every process: 1 when the second sample's section was cut (a
        process missing from it may simply not have been read)."""
        probe = self.snapshot.probe
        return 1 if PROC.section(1) in probe.truncated_sections else len(probe.sample_uptimes)

    def gone_by_second_sample(self, p: Process) -> bool:
        """Seen by the first sample, not by a complete second one: exited (or its PID reused)."""
        return self.samples_taken >= 2 and len(p.samples) < 2

    @cached_property
    def progress(self) -> dict[int, Progress]:
        return {p.pid: progress(p, self.samples_taken) for p in self.snapshot.processes}

    @cached_property
    def bounded(self) -> bool:
        """Whether the scope is the job rather than a whole host (analysis.oom.job_is_bounded)."""
        return job_is_bounded(self.snapshot, self.options.explicit_scope)

    @cached_property
    def gpu_holders(self) -> list[int]:
        return gpu_holders(self.snapshot, self.scope)

    @cached_property
    def gpu_expected(self) -> tuple[bool, str]:
        """Whether the job should be using a GPU, and why (asked once per chain by stall_evidence)."""
        return gpu_expected(self.snapshot, self.scope, self.options.expect_gpu)

    @cached_property
    def oom_matches(self) -> list[OomMatch]:
        return match_oom_kills(self.snapshot, self.scope, self.graph, self.options.explicit_scope)

    @cached_property
    def jobs(self) -> list[DistributedJob]:
        """Distributed jobs with ranks on this host, and the ranks holding them (analysis.ranks)."""
        return find_jobs(self)

    @cached_property
    def log_healths(self) -> list[LogHealth]:
        logs = (*self.snapshot.logs, *self.found_logs)
        return [log_health(log, self.now, self.options.stale_after, self.snapshot.processes) for log in logs]

    @cached_property
    def found_logs(self) -> tuple[LogFile, ...]:
        """Where --pid/--match named the job, the files its processes hold open write-only (their
        stdout and stderr, or named like logs) are its logs: judged as given ones, said to be found.
        Without a named job they are not: a quiet daemon is no stall."""
        return found_logs(self.snapshot, self.scope) if self.options.explicit_scope else ()

    @property
    def two_samples(self) -> bool:
        return len(self.snapshot.probe.sample_uptimes) >= 2

    def in_scope(self) -> list[Process]:
        return [p for p in self.snapshot.processes if p.pid in self.scope]

    @cached_property
    def now(self) -> float | None:
        """The target's wall clock at the last sample (its own clock: log mtimes use it)."""
        btime = available(self.snapshot.host.btime)
        ups = self.snapshot.probe.sample_uptimes
        if btime is None or not ups:
            return None
        return btime + ups[-1]

    def start_wall(self, p: Process) -> float | None:
        btime = available(self.snapshot.host.btime)
        if btime is None:
            return None
        return btime + p.starttime / self.snapshot.host.clk_tck

    def proc_label(self, pid: int) -> str:
        p = self.tree.by_pid.get(pid)
        return f"{pid} ({p.comm})" if p else str(pid)


@dataclass(frozen=True)
class Rule:
    meta: RuleMeta
    check: Callable[[Context], Iterable[Finding]]
