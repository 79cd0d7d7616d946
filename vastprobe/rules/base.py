"""What a rule is: metadata that never changes meaning, and a pure check over a snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vastprobe.analysis.context import Context
from vastprobe.model import Evidence, Finding, Severity
from vastprobe.options import RuleOptions

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


@dataclass(frozen=True)
class Rule:
    meta: RuleMeta
    check: Callable[[Context], Iterable[Finding]]
