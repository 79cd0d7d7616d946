"""What every command shares: the documented exit codes, usage errors, and the probing run of
diagnose and sweep (Ctrl-C and SIGTERM keep what finished)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

from typer.core import TyperCommand

from vastprobe.notices import say
from vastprobe.targets import target_key

EXIT_OK, EXIT_STALLED, EXIT_USAGE, EXIT_UNPROBED, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_PIPE = 141  # stdout's reader went away (`| head`): what a tool killed by SIGPIPE reports
EXIT_TERMINATED = 143  # SIGTERM (`timeout`, systemd, a scheduler): stops as Ctrl-C does, 128 + 15 as a shell says
#: Documented in docs/output.md and in every command's help; tests/commands/test_checks.py holds every run to them.
EXIT_CODES = {
    EXIT_OK: "every target probed and diagnosed, none stalled",
    EXIT_STALLED: "a target is stalled (--fail-on degraded: or degraded)",
    EXIT_USAGE: "usage error: a bad option, target, inventory or capture (one line on stderr)",
    EXIT_UNPROBED: "nothing stalled, but a target could not be probed or diagnosed (skipped rows do not count)",
    EXIT_FAILED: "vastprobe itself failed (one line on stderr; the traceback with --debug)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C), after printing what finished",
}
EXIT_EPILOG = "[b]Exit codes[/b]: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items()) + "."
#: Commands that diagnose nothing never say "stalled": their codes (found by a helper: every command's
#: help carried diagnose's)
LISTING = ("rules", "probe-script", "history")
LISTING_EPILOG = f"[b]Exit codes[/b]: {EXIT_OK} done; {EXIT_USAGE} {EXIT_CODES[EXIT_USAGE]}; {EXIT_FAILED} {EXIT_CODES[EXIT_FAILED]}."
COLLECT_EPILOG = (
    f"[b]Exit codes[/b]: {EXIT_OK} the capture was written; {EXIT_USAGE} {EXIT_CODES[EXIT_USAGE]}; {EXIT_UNPROBED} "
    f"the target could not be probed (the failed try is written, saying why); {EXIT_FAILED} "
    f"{EXIT_CODES[EXIT_FAILED]}; {EXIT_INTERRUPTED} interrupted (Ctrl-C)."
)
CONTEXT = {"help_option_names": ["-h", "--help"]}

#: Set by cli's SIGTERM handler: an interrupted run then exits 143, not 130.
terminated: list[bool] = []


class Command(TyperCommand):
    """Usage lines as man pages write them: `TARGET...`, not typer's `{TARGET...}`."""

    def collect_usage_pieces(self, ctx):  # type: ignore[no-untyped-def]
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in super().collect_usage_pieces(ctx)]


def click_exceptions():  # type: ignore[no-untyped-def]
    try:
        from typer._click import exceptions  # typer >= 0.26 vendors click
    except ImportError:  # pragma: no cover - older typer depends on click
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


def usage_error(message: str) -> NoReturn:
    """A bad input found in a command's body (after parsing, before any connection): exit 2."""
    raise click_exceptions().UsageError(message)


def exit_code(reports: list, fail_on: str = "stalled") -> int:
    """1 if any target is stalled (or, with `fail_on="degraded"`, degraded); else 3 if any could not
    be probed, or was probed but not diagnosed (verdict unknown: e.g. --pid/--match matched nothing);
    else 0. Skipped rows are neither."""
    failing = ("stalled", "degraded") if fail_on == "degraded" else ("stalled",)
    if any(r.verdict in failing for r in reports):
        return EXIT_STALLED
    if any(r.status != "skipped" and (r.status != "ok" or r.verdict == "unknown") for r in reports):
        return EXIT_UNPROBED
    return EXIT_OK


def interrupted_code() -> int:
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def unique(targets: list[str], what: str = "target") -> list[str]:
    """Each target once, first spelling kept (targets.target_key: one host written two ways is one)."""
    first: dict[str, str] = {}
    for t in targets:
        first.setdefault(target_key(t), t)
    out = list(first.values())
    if len(out) < len(targets):
        n = len(targets) - len(out)
        say(f"vastprobe: {n} duplicate {what}{'s' if n != 1 else ''} probed once")
    return out


def run_entries(
    entries: list, options: Any, concurrency: int, on_report: Any, on_start: Any = None, keep_snapshots: bool = True
) -> tuple[list, bool]:
    """Probe every entry; returns (reports in completion order, interrupted). Ctrl-C stops the run
    and keeps what finished."""
    from vastprobe import eventloop
    from vastprobe.fanout import sweep as run_sweep

    done: list = []  # filled by the sweep as hosts finish (snapshots within its budget)

    from vastprobe.pipeline import warm_for

    warm_for([e.target for e in entries if e.skip is None])
    from vastprobe.report.joins import join_hosts

    try:
        eventloop.run(run_sweep(entries, options, concurrency, on_report, on_start, kept=done,
                                keep_snapshots=keep_snapshots))  # fmt: skip
    except KeyboardInterrupt:
        return join_hosts(done), True
    return join_hosts(done), False


def say_interrupted(done: list, entries: list, unit: str = "hosts") -> None:
    finished = {r.target for r in done}
    left = [e.target for e in entries if e.target not in finished]
    shown = ", ".join(left[:8]) + (f" (+{len(left) - 8} more)" if len(left) > 8 else "")
    say(f"\nvastprobe: interrupted: {len(done)} of {len(entries)} {unit} finished; {len(left)} did not: {shown}")


def write_or_say(path: Path, data: str | bytes, option: str, mode: int | None = 0o600) -> bool:
    """write_atomic, or one line on stderr naming the option and why (a full disk, a read-only file
    system, no permission) and False: the run's report was printed already, and a traceback or an
    "internal error" helps nobody."""
    from vastprobe.fileio import write_atomic

    try:
        write_atomic(path, data, mode=mode)
    except OSError as exc:
        say(f"vastprobe: error: {option} {path}: cannot write it: {exc.strerror or exc}")
        return False
    return True
