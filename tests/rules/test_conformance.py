"""Every rule: unique slug and code, metadata in form, a docs page, and a test that names it."""

from __future__ import annotations

import re

import pytest

from tests.paths import REPO
from vastprobe.rules import RESERVED, RETIRED, RULES

ROOT = REPO
CONTRACT_SLUGS = {"do-wait-orphan", "oom-killed-child", "idle-gpu", "missing-logs", "stopped-child", "zombie-child",
                  "gpu-xid", "gpu-driver-error"}  # fmt: skip
TEST_TEXT = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))


def test_contract_slugs_exist() -> None:
    assert {r.meta.slug for r in RULES} >= CONTRACT_SLUGS


def test_slugs_and_codes_unique_and_never_reused() -> None:
    slugs = [r.meta.slug for r in RULES]
    codes = [r.meta.code for r in RULES]
    assert len(set(slugs)) == len(slugs) and len(set(codes)) == len(codes)
    assert not set(codes) & (set(RETIRED) | set(RESERVED))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.meta.slug)
def test_rule_metadata_docs_and_tests(rule) -> None:
    m = rule.meta
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", m.slug)
    assert re.fullmatch(r"VP\d{3}", m.code)
    assert m.severity in ("info", "warning", "error", "critical")
    assert m.summary and "\n" not in m.summary
    doc = ROOT / "docs" / "rules" / f"{m.slug}.md"
    assert doc.exists(), f"missing {doc}"
    text = doc.read_text()
    assert text.startswith(f"# {m.slug} ({m.code}, {m.severity})")
    assert f'"{m.slug}"' in TEST_TEXT, f"no test names {m.slug}"
    assert rule.check.__module__.endswith(m.slug.replace("-", "_"))
