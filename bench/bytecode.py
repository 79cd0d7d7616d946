"""Benchmarks measure vastprobe as installed: `pip install .` byte-compiles every module, but an
editable checkout run with PYTHONDONTWRITEBYTECODE=1 (this VM's default) compiles each module from
source on every start, ~50-100 ms of CPU that no user pays. Each benchmark compiles first."""

from __future__ import annotations

import compileall
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compile_vastprobe() -> None:
    compileall.compile_dir(ROOT / "vastprobe", quiet=1)
