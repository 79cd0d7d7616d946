"""Import only what a command needs: no rich on the JSON path, no asyncssh for local work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


def imported(*args: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vastprobe", *args], capture_output=True, text=True, timeout=120
    )
    return {m.group(1) for m in re.finditer(r"\|\s+([\w.]+)\s*$", r.stderr, re.M)}


@pytest.mark.parametrize(
    "args",
    [("diagnose", "local", "--format", "json", "--sample", "0"), ("rules", "--format", "json"), ("probe-script",)],
)
def test_json_and_local_paths_stay_light(args: tuple[str, ...]) -> None:
    mods = imported(*args)
    assert "vastprobe.cli" in mods  # the measurement saw the run at all
    assert "asyncssh" not in mods and "rich" not in mods


def test_analyze_stays_light(tmp_path: Path) -> None:
    cap = tmp_path / "c.json"
    subprocess.run(
        [sys.executable, "-m", "vastprobe", "collect", "local", "-o", str(cap), "--sample", "0"],
        check=True,
        capture_output=True,
    )
    mods = imported("analyze", str(cap), "--format", "json")
    assert "asyncssh" not in mods and "rich" not in mods


def test_the_measurement_can_see_rich() -> None:
    assert "rich" in imported("diagnose", "local", "--format", "table", "--sample", "0")
