"""What a rule is: metadata that never changes meaning, and a pure check over a snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vastprobe.analysis.context import Context
from vastprobe.model import ONE_SAMPLE, Evidence, Finding, RemotePeer, Severity
from vastprobe.rule_options import RuleOptions

__all__ = ["ONE_SAMPLE", "Context", "Rule", "RuleMeta", "RuleOptions"]


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
        peer: RemotePeer | None = None,
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
            peer=peer,
        )


@dataclass(frozen=True)
class Rule:
    meta: RuleMeta
    check: Callable[[Context], Iterable[Finding]]
