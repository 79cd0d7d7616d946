"""The rule registry: one module per rule, each exporting RULE."""

from __future__ import annotations

from vastprobe.rules.base import Rule

RULES: tuple[Rule, ...] = ()


def rule_by_slug(slug: str) -> Rule | None:
    return next((r for r in RULES if r.meta.slug == slug), None)
