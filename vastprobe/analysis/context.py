"""The rules' view of one snapshot: the analysis view (analysis.view) plus the results of the
analyses built on it (the stalled chains, the evidence that work should be happening, the
distributed jobs), each computed once and shared by every rule that reads it.

It lives in analysis, below the rules, so that the analyses that feed it and the rules that read
it both point down to it.
"""

from __future__ import annotations

from functools import cached_property

from vastprobe.analysis.ranks import find_jobs
from vastprobe.analysis.stalls import StalledChain, StallEvidence, stall_evidence, stalled_chains
from vastprobe.analysis.view import SnapshotView
from vastprobe.model import DistributedJob

__all__ = ["Context"]


class Context(SnapshotView):
    """One snapshot with the derived views every rule needs, computed once."""

    @cached_property
    def stalled_chains(self) -> list[StalledChain]:
        return stalled_chains(self)

    def stall_evidence(self, chain: StalledChain) -> StallEvidence:
        return stall_evidence(self, chain.chain.pids, chain.waiter)

    @cached_property
    def jobs(self) -> list[DistributedJob]:
        """Distributed jobs with ranks on this host, and the ranks holding them (analysis.ranks)."""
        return find_jobs(self, self.stalled_chains)
