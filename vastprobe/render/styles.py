"""The colours of verdicts and severities, one table each, for every view that shows them (the
report, the incidents, the watch screen), so a severity reads the same everywhere."""

from __future__ import annotations

VERDICT_STYLE = {"healthy": "bold green", "degraded": "bold yellow", "stalled": "bold red", "unknown": "bold magenta"}
SEVERITY_STYLE = {"info": "cyan", "warning": "yellow", "error": "red", "critical": "bold red"}
