"""Where things are, for tests at any depth under tests/: the repository, this folder, the recorded data."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = REPO / "fixtures"
