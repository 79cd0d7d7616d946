"""One probe session per watch: the transport's connection opened once and each round run over it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from vastprobe.pipeline import DiagnoseOptions, probe_any
from vastprobe.watch.loop import Prober


@contextlib.asynccontextmanager
async def probe_session(target: str, options: DiagnoseOptions) -> AsyncIterator[Prober]:
    async def probe(opts: DiagnoseOptions):  # type: ignore[no-untyped-def]
        return await probe_any(target, opts)

    yield probe
