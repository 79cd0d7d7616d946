"""A run's host reports as a Document (render/formats.py): diagnose and analyze show each host's
report; sweep's table is the fleet's summary instead. JSON and NDJSON are the same for both."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vastprobe.history.store import HostMemory
    from vastprobe.model import HostReport


@dataclass
class ReportsDocument:
    """`code`: the run's exit code; `unfinished`: targets an interrupt left out (both in the summary)."""

    reports: list[HostReport]
    code: int
    unfinished: int = 0
    snapshot: bool = False
    verbose: int = 0
    brief: bool = False
    memory: Mapping[str, HostMemory] | None = None

    @functools.cached_property
    def summary(self) -> dict[str, Any]:
        from vastprobe.render.jsonable import summary_dict

        return summary_dict(self.reports, self.code, self.unfinished, memory=self.memory)

    def items(self) -> list[HostReport]:
        return self.reports

    def item(self, host: HostReport) -> dict[str, Any]:
        from vastprobe.render.jsonable import ndjson_host

        return ndjson_host(host, self.snapshot)

    def whole(self) -> dict[str, Any]:
        from vastprobe.render.jsonable import report_document

        return report_document(self.reports, self.snapshot, self.summary)

    def end(self) -> dict[str, Any]:
        from vastprobe.render.jsonable import ndjson_end

        return ndjson_end(self.summary)

    def table(self, out: IO[str]) -> None:
        from vastprobe.render.table import render_reports

        render_reports(self.reports, out, verbose=self.verbose > 0, brief=self.brief)


@dataclass
class FleetDocument(ReportsDocument):
    """sweep's: the table folds the fleet into a summary (with the history's memory, the run's time)."""

    elapsed: float | None = None

    def table(self, out: IO[str]) -> None:
        from vastprobe.render.summary import render_summary

        render_summary(self.reports, out, memory=self.memory, elapsed=self.elapsed, verbose=self.verbose > 0)
