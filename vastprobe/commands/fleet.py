"""A run's fleet memory (docs/history.md): the history it records into, --group-by's outliers,
--shard's slice of the inventory. diagnose (with --history), sweep and history use it; nothing
from vastprobe.history is imported until one of them asks."""

from __future__ import annotations

import json
from typing import Optional

from vastprobe.commands.checks import history_url_problem
from vastprobe.commands.common import EXIT_INTERRUPTED, EXIT_STALLED, EXIT_USAGE, usage_error
from vastprobe.notices import say


def _resolve_shard(shard: Optional[str], shards: Optional[int]) -> Optional[tuple[int, int]]:
    """K and N from --shard K/N, or from the engine's environment for --shard auto: a usage error
    (exit 2, before any host is contacted) when they cannot be known."""
    import os

    from vastprobe.history.shard import SHARDS_ENV, ShardError, parse_shard, shard_from_environment

    if shard is None or shard.strip() != "auto":
        if shards is not None:
            usage_error("--shards N goes with --shard auto (with --shard K/N, N is already given)")
        return parse_shard(shard) if shard is not None else None
    if shards is None and os.environ.get(SHARDS_ENV, "").strip():
        raw = os.environ[SHARDS_ENV].strip()
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 9999:
            usage_error(f"--shard auto: {SHARDS_ENV}={raw[:40]!r} is not a shard count from 1 to 9999")
        shards = int(raw)
    try:
        k, n, _ = shard_from_environment(os.environ, shards)
    except ShardError as exc:
        usage_error(str(exc))
    return k, n


def history_location(text: str):  # type: ignore[no-untyped-def]
    from vastprobe.history.store import location_of

    return location_of(text)


def default_history():  # type: ignore[no-untyped-def]
    """$VASTPROBE_HISTORY (checked as --history is), else the per-user SQLite file."""
    import os

    from vastprobe.history.store import HISTORY_ENV, default_location

    env = os.environ.get(HISTORY_ENV, "")
    problem = history_url_problem(env) if env.strip() else None
    if problem:
        usage_error(f"{HISTORY_ENV}: {problem}")
    return default_location()


GROUP_WINDOW = 3600.0  # --group-by counts other shards' hosts whose features are at most this old


def _labels_of(text: Optional[str]) -> dict:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


class FleetMemory:
    """One run's history, group and shard settings (checked while parsing), and what it asks of them."""

    def __init__(
        self,
        history,  # type: ignore[no-untyped-def]  # a Path or a database URL (store.Location)
        keep: str,
        group_by: Optional[str] = None,
        shard: Optional[str] = None,
        shards: Optional[int] = None,
    ) -> None:
        import time

        from vastprobe.history.timespec import parse_duration

        self.started_at = time.time()
        self.history = history
        self.failed = None  # the history error of a shared database: exit 2 once everything is written
        self.keep = parse_duration(keep)
        self.shard = _resolve_shard(shard, shards)
        self.group_by = group_by
        self.memory: dict = {}

    def select(self, entries: list) -> list:
        if self.shard is None:
            return entries
        from vastprobe.history.shard import in_shard

        return in_shard(entries, [e.target for e in entries], *self.shard)

    def finish(self, reports: list, kind: str = "sweep", complete: bool = True) -> list:
        """The run recorded, outliers marked (with a history, against the whole fleet's groups: the
        hosts other shards recorded within GROUP_WINDOW count in their groups); a history failure
        is one line."""
        feats = texts = None
        if self.group_by is not None:
            from vastprobe.report.outliers import features, features_text

            feats = {r.target: features(r) for r in reports if r.status != "skipped"}
            texts = {t: features_text(f) for t, f in feats.items()}
        from vastprobe.fanout import remember

        shard = f"{self.shard[0]}/{self.shard[1]}" if self.shard else None
        errors: list = []
        peers: list = []
        memory, warning = remember(reports, self.history, started_at=self.started_at, keep=self.keep, kind=kind,
                                   shard=shard, complete=complete, on_error=errors, features=texts,
                                   peers_since=self.started_at - GROUP_WINDOW if feats is not None else None,
                                   peers_out=peers)  # fmt: skip
        if self.group_by is not None:
            from vastprobe.report.outliers import Peer, features_from_text, mark_outliers

            others = []
            for target, labels, text in peers:
                fs = features_from_text(text)
                if fs is not None and target not in (feats or {}):
                    others.append(Peer(target, _labels_of(labels), fs))
            reports = mark_outliers(reports, self.group_by, others, feats)
        self.memory = dict(memory)
        if errors and errors[0].shared:  # a shared history the run could not write: a configuration error
            self.failed = errors[0]
            say(f"vastprobe: error: {warning}")
        elif warning:
            say(f"vastprobe: warning: {warning}")
        return reports

    def exit_code(self, code: int) -> int:
        """A shared (PostgreSQL) history that could not be written fails the run with exit 2, after the
        findings were printed and written: every shard's memory depends on it, so it must not go unseen.
        A stall found wins: cron must see it, and stderr says the history is gone (a stalled host
        read exit 2 while the database was down; found by a helper)."""
        if self.failed is not None and code not in (EXIT_INTERRUPTED, EXIT_STALLED):
            return EXIT_USAGE
        return code
