"""One probe session per watch: the target's transport opened once, and its session (ssh: one
connection) kept across the rounds."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from vastprobe.capture import Capture
from vastprobe.pipeline import DiagnoseOptions, probe_with, transport_of
from vastprobe.rounds.loop import Prober


@contextlib.asynccontextmanager
async def probe_session(target: str, options: DiagnoseOptions) -> AsyncIterator[Prober]:
    """Raises TargetError for a malformed target (the command checked it already)."""
    async with transport_of(target, options).session() as kept:

        async def probe(opts: DiagnoseOptions) -> Capture:
            return await probe_with(kept, opts)

        yield probe
