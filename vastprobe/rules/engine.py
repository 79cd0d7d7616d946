"""Runs every rule over a snapshot (the verdict is model.verdict over the findings, report/ judges it).

Severity policy: `error` and `critical` mean the job cannot finish by itself (stalled);
`warning` means it may be at risk (degraded); `info` is context only.
"""

from __future__ import annotations

from vastprobe.analysis.tree import ProcessTree
from vastprobe.model import SEVERITY_ORDER, Evidence, Finding, HostSnapshot
from vastprobe.rules import RULES
from vastprobe.rules.base import Context, RuleOptions


def run_rules(
    snapshot: HostSnapshot,
    scope: tuple[int, ...],
    options: RuleOptions,
    tree: ProcessTree | None = None,
    context: Context | None = None,
) -> tuple[Finding, ...]:
    """`context`, when given, is the one to use (the caller reads its graph and chains afterwards)."""
    ctx = context or Context(snapshot, scope, options, tree)
    findings: list[Finding] = []
    for rule in RULES:
        try:
            findings.extend(rule.check(ctx))
        except Exception as exc:  # a broken rule must not hide the others' findings
            findings.append(
                rule.meta.finding(
                    f"rule {rule.meta.slug} failed on this snapshot: {type(exc).__name__}",
                    evidence=[Evidence("vastprobe", repr(exc))],
                    hint="please report this with `vastprobe collect`'s capture",
                    severity="info",
                )
            )
    return tuple(sorted(findings, key=lambda f: (-SEVERITY_ORDER[f.severity], f.code)))
