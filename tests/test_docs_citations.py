"""Users read docs/ only: nothing in the repository cites a file outside it (the design notes the
project started from lived in ../shared, which users never get)."""

from __future__ import annotations

import re

from tests.paths import REPO

OUTSIDE = re.compile(r"(?<![\w.-])(?:\.\./)?shared/(?:design|reference|hooks)\b")


def test_no_citation_points_outside_the_repository() -> None:
    files = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "vastprobe").rglob("*.py"),
             *(REPO / "vastprobe").rglob("*.sh"), *(REPO / "tests").rglob("*.py"), *(REPO / "bench").rglob("*.py")]  # fmt: skip
    found = [f"{f.relative_to(REPO)}:{n}" for f in files for n, line in enumerate(f.read_text().splitlines(), 1)
             if OUTSIDE.search(line) and f.name != "test_docs_citations.py"]  # fmt: skip
    assert not found, found


def test_the_contract_is_in_docs() -> None:
    text = (REPO / "docs" / "contract.md").read_text()
    assert "vastprobe.report/1" in text and "## Exit codes" in text and "## Changes to the first text" in text
    assert "docs/contract.md" in (REPO / "docs" / "output.md").read_text()
