"""Options that shape a diagnosis, kept apart from the modules that use them so that building
them imports nothing heavy (the CLI builds them before any probe starts)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleOptions:
    stale_after: float = 300.0
    expect_gpu: bool | None = None  # None: decide from the snapshot
    expect_gpus: int | None = None  # --expect-gpus N: how many GPUs should answer
    explicit_scope: bool = False  # --pid/--match named the job
