"""`vastprobe rules CODE` prints the rule's docs page, the same text as docs/rules/<slug>.md: one
source, shipped in the package through the vastprobe/ruledocs link (package data)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.resources import files

import pytest

from tests.paths import REPO
from vastprobe.cli import run
from vastprobe.rules import RULES


@pytest.mark.parametrize("rule", RULES, ids=[r.meta.code for r in RULES])
def test_rules_code_prints_the_docs_page(rule, capsys: pytest.CaptureFixture[str]) -> None:
    page = (REPO / "docs" / "rules" / f"{rule.meta.slug}.md").read_text(encoding="utf-8")
    assert run(["rules", rule.meta.code]) == 0
    assert capsys.readouterr().out == page
    assert run(["rules", rule.meta.slug]) == 0
    assert capsys.readouterr().out == page


def test_vp101_prints_its_whole_page_from_a_real_process() -> None:
    r = subprocess.run([sys.executable, "-m", "vastprobe", "rules", "VP101"], capture_output=True, text=True,
                       timeout=60, cwd="/")  # fmt: skip
    page = (REPO / "docs" / "rules" / "do-wait-orphan.md").read_text(encoding="utf-8")
    assert r.returncode == 0 and r.stdout == page
    for part in ("**What it detects.**", "**Why it stalls a job.**", "**What to do.**", "**Example.**"):
        assert part in r.stdout


def test_the_pages_ship_in_the_package() -> None:
    """What the package carries is docs/rules itself (a link), and the package data names it."""
    shipped = files("vastprobe") / "ruledocs"
    names = sorted(p.name for p in shipped.iterdir() if p.name.endswith(".md"))
    assert names == sorted(p.name for p in (REPO / "docs" / "rules").glob("*.md"))
    assert (REPO / "vastprobe" / "ruledocs").resolve() == (REPO / "docs" / "rules").resolve()
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "ruledocs/*.md" in config["tool"]["setuptools"]["package-data"]["vastprobe"]
    assert any(d.startswith("ClusterShell") for d in config["project"]["dependencies"])


def test_the_probes_own_findings_are_in_the_catalogue() -> None:
    """A user who saw VP900 in a report got "no rule 'VP900'" (found by a new user's review): the
    probe's own findings are listed after the rules, and each has its page, by code and by slug."""
    import json
    import subprocess
    import sys

    listing = subprocess.run([sys.executable, "-m", "vastprobe", "rules", "--format", "json"], capture_output=True,
                             text=True, timeout=60)  # fmt: skip
    codes = [row["code"] for row in json.loads(listing.stdout)]
    assert codes[-4:] == ["VP900", "VP901", "VP902", "VP903"], codes
    for name, slug in (("VP900", "probe-incomplete"), ("probe-output-forged", "probe-output-forged"),
                       ("vp902", "probe-section-unreadable"), ("VP903", "py-spy-unavailable")):  # fmt: skip
        r = subprocess.run([sys.executable, "-m", "vastprobe", "rules", name], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
        assert r.returncode == 0 and r.stdout.startswith(f"# {slug} ("), (name, r.stdout[:80], r.stderr)
