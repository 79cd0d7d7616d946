"""`vastprobe watch`: one target, probed round after round over one connection, showing what moves."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated, Optional

import typer

from vastprobe.commands import checks
from vastprobe.commands.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STALLED,
    EXIT_TERMINATED,
    EXIT_UNPROBED,
    EXIT_USAGE,
    exit_code,
    terminated,
)
from vastprobe.commands.option_groups import with_groups
from vastprobe.commands.options import (
    P_OUTPUT,
    P_SCOPE,
    PROBE_GROUP,
    RULE_GROUP,
    SSH_GROUP,
    TARGET_HELP,
    ProbeFlags,
    RuleFlags,
    SshFlags,
    VerboseOpt,
    complete_targets,
)
from vastprobe.commands.settings import probe_options, ssh_options
from vastprobe.notices import say

IntervalOpt = Annotated[
    float,
    typer.Option("--interval", "-n", metavar="SECONDS", parser=checks.duration, callback=checks.seconds(0.5, 86400), rich_help_panel=P_SCOPE,
                 help="Seconds from the start of one round to the start of the next: 0.5-86400."),
]  # fmt: skip
RoundsOpt = Annotated[
    Optional[int],
    typer.Option("--rounds", metavar="N", callback=checks.whole(1, 1_000_000, "round count"), rich_help_panel=P_OUTPUT,
                 help="Stop after N rounds, 1-1000000 (default: until Ctrl-C)."),
]  # fmt: skip


class StreamFormat(StrEnum):
    table = "table"
    ndjson = "ndjson"


StreamFormatOpt = Annotated[
    Optional[StreamFormat],
    typer.Option("--format", rich_help_panel=P_OUTPUT,
                 help="table on a terminal (one screen, redrawn), ndjson otherwise (one record a round)."),
]  # fmt: skip
#: A watch ends on Ctrl-C by design: its exit code is what the last round saw.
EXIT_EPILOG = (
    f"[b]Exit codes[/b]: the last round's, as diagnose gives them ({EXIT_OK} nothing stalled, {EXIT_STALLED} stalled, "
    f"{EXIT_UNPROBED} not probed or not diagnosed), also on Ctrl-C; {EXIT_USAGE} usage error; {EXIT_FAILED} vastprobe "
    f"itself failed; {EXIT_INTERRUPTED} Ctrl-C before any round finished; {EXIT_TERMINATED} SIGTERM."
)


@with_groups(probe=PROBE_GROUP.without("artifacts", "py_spy"), rules=RULE_GROUP, ssh=SSH_GROUP)
def watch(
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET",
            help=TARGET_HELP + ".",
            autocompletion=complete_targets,
        ),
    ],
    interval: IntervalOpt = 10.0,
    rounds: RoundsOpt = None,
    *,
    probe: ProbeFlags,
    rules: RuleFlags,
    fmt: StreamFormatOpt = None,
    ssh: SshFlags,
    verbose: VerboseOpt = 0,
) -> None:
    """Probe one target every --interval seconds and show what moves: CPU, I/O and log growth per
    process of the job, GPU use, the findings, and when the verdict changed (over SSH the rounds
    share one connection). Not on a terminal: one NDJSON record a round, then a summary record.
    Ctrl-C ends it with a summary and the last round's exit code; -v lists every finding.

    [b]Examples[/b]
      vastprobe watch root@203.0.113.7:41234 -i ~/.ssh/vast --pid 1234
      vastprobe watch local --match prover -n 5
      vastprobe watch gpu-box --rounds 3 --format ndjson | jq 'select(.round) | .verdict'
    """
    from dataclasses import replace

    streamed = fmt is StreamFormat.ndjson if fmt is not None else not sys.stdout.isatty()
    sample = probe.sample
    if sample > interval:
        say(f"vastprobe: warning: --sample {sample:g} is longer than --interval {interval:g}: a round takes "
            f"{sample:g} s or more, so rounds come that often")  # fmt: skip
    options = probe_options(probe, rules, timeout=ssh.timeout, targets=(target,))
    reached = ssh_options([target], ssh, verbose)
    raise typer.Exit(_run(target, replace(options, ssh=reached), interval, rounds, streamed, verbose > 0))


def _run(target: str, options, interval: float, rounds: int | None, streamed: bool, verbose: bool) -> int:  # type: ignore[no-untyped-def]
    from vastprobe import eventloop
    from vastprobe.render import watch_screen as shown
    from vastprobe.rounds.loop import WatchLog, watch
    from vastprobe.rounds.session import probe_session

    log = WatchLog(target=target)
    ended = f"--rounds {rounds}" if rounds is not None else "its end"
    if streamed:

        def on_round(r) -> None:  # type: ignore[no-untyped-def]
            sys.stdout.write(shown.ndjson_record(r))
            sys.stdout.flush()

        live = None
    else:
        from rich.live import Live

        from vastprobe.render.table import make_console

        console = make_console()
        if console.is_terminal:  # one screen, redrawn each round
            live = Live(console=console, auto_refresh=False, transient=False, redirect_stderr=False)
            live.start()
        else:  # --format table into a file or a pipe: each round's screen after the last
            live = None

        def on_round(r) -> None:  # type: ignore[no-untyped-def]
            if live is not None:
                live.update(shown.screen(r, log, verbose), refresh=True)
            else:
                console.print(shown.screen(r, log, verbose))
                console.print()

    async def rounds_over_one_session() -> None:
        async with probe_session(target, options) as probe:
            await watch(probe, options, interval, rounds, on_round, log)

    interrupted = False
    try:
        eventloop.run(rounds_over_one_session())
    except KeyboardInterrupt:
        interrupted = True
        ended = "SIGTERM" if terminated else "Ctrl-C"
    finally:
        if live is not None:
            live.stop()
    if streamed:
        from vastprobe.render.jsonable import dumps

        sys.stdout.write(dumps(shown.summary(log, ended)) + "\n")
        sys.stdout.flush()
    else:
        console.print(shown.summary_text(log, ended), end="", soft_wrap=not console.is_terminal)
    if terminated:
        return EXIT_TERMINATED
    if log.last is None:
        return EXIT_INTERRUPTED if interrupted else exit_code([])
    return exit_code([log.last.report])
