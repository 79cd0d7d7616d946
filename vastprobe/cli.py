"""The command line: the typer app, its commands registered from vastprobe/commands/ (one module
each; the options they share are defined once in commands/options.py, in the groups the commands
take, each with its check from commands/checks.py), and the process around them. Nothing else.

Every option is checked while the command line is parsed and every cross-option check runs before
the first connection: bad input is one line on stderr and exit 2. vastprobe's own failure is one
line and exit 4 (the traceback with --debug or VASTPROBE_DEBUG=1); Ctrl-C prints what finished and
exits 130. Everything on stderr goes through notices.say, escaped. Output goes through
render/formats.py.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from vastprobe import __version__
from vastprobe.commands import collect, diagnose, history, rules, sweep, watch
from vastprobe.commands.common import (
    COLLECT_EPILOG,
    CONTEXT,
    EXIT_EPILOG,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_TERMINATED,
    EXIT_USAGE,
    LISTING,
    LISTING_EPILOG,
    Command,
    click_exceptions,
    terminated,
)
from vastprobe.notices import say

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings=CONTEXT,
    help="Find out why a GPU host went quiet: one read-only probe per host, classified with evidence.",
    epilog=EXIT_EPILOG,
)


def _version(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:  # not while a shell asks for completions
        typer.echo(f"vastprobe {__version__}")
        raise typer.Exit(0)


def _show_completion(ctx: typer.Context, value: Optional[str]) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from vastprobe.completion import SCRIPTS, ShellError, shell_for

    try:
        shell = shell_for(value)
    except ShellError as exc:
        raise typer.BadParameter(str(exc)) from exc
    sys.stdout.write(SCRIPTS[shell])
    raise typer.Exit(0)


def _install_completion(ctx: typer.Context, value: Optional[str]) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from vastprobe.completion import ShellError, install, shell_for

    try:
        shell = shell_for(value)
        script, rc = install(shell)
    except ShellError as exc:
        raise typer.BadParameter(str(exc)) from exc
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise typer.BadParameter(f"{where}{exc.strerror or exc}") from exc
    loaded = f", loaded from {rc}" if rc else ""
    say(f"vastprobe: {shell} completion installed in {script}{loaded}; it works in shells started from now on")
    raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="On an internal error, print the traceback (also VASTPROBE_DEBUG=1).")
    ] = False,
    install_completion: Annotated[
        Optional[str],
        typer.Option(
            "--install-completion",
            metavar="[bash|zsh|fish]",
            callback=_install_completion,
            is_eager=True,
            expose_value=False,
            help="Install completion for this shell ($SHELL) or the one named, then exit.",
        ),
    ] = None,
    show_completion: Annotated[
        Optional[str],
        typer.Option(
            "--show-completion",
            metavar="[bash|zsh|fish]",
            callback=_show_completion,
            is_eager=True,
            expose_value=False,
            help="Print the completion script for this shell or the one named (to save or source), then exit.",
        ),
    ] = None,
) -> None:
    pass  # --debug is read by main() before parsing, so it works after the command name too


#: Every command, in the order `vastprobe --help` lists them.
COMMANDS: dict[str, Callable[..., Any]] = {
    "diagnose": diagnose.diagnose,
    "sweep": sweep.sweep,
    "collect": collect.collect,
    "analyze": collect.analyze,
    "rules": rules.rules,
    "probe-script": rules.probe_script,
    "history": history.history_command,
    "watch": watch.watch,
}
#: The exit codes' footer of a command whose codes differ from every other's.
EPILOGS = {"watch": watch.EXIT_EPILOG, "collect": COLLECT_EPILOG, **dict.fromkeys(LISTING, LISTING_EPILOG)}
for _name, _callback in COMMANDS.items():
    app.command(_name, cls=Command, context_settings=CONTEXT, epilog=EPILOGS.get(_name, EXIT_EPILOG))(_callback)


# ---- the process: one line per failure, documented exit codes ---------------------------------


def _command_name(args: list[str]) -> str:
    return next((a for a in args if a in COMMANDS), "")


def _completion_shell_named(args: list[str]) -> list[str]:
    """`--show-completion` / `--install-completion` with no shell after them mean this shell ("auto"):
    typer's options cannot leave their value out, so it is filled in here."""
    out = list(args)
    for i in range(len(out) - 1, -1, -1):
        if out[i] in ("--show-completion", "--install-completion") and "--" not in out[:i]:
            after = out[i + 1] if i + 1 < len(out) else None
            if after is None or after.startswith("-") or after in COMMANDS:
                out.insert(i + 1, "auto")
    return out


def _click_group(args: list[str]) -> typer.core.TyperGroup:
    """The click group for this command line. typer builds every command's click object (options,
    help, types) on each start: ~15 ms for seven commands, against ~5 ms for the one that runs.
    The whole group is built when no command is named (`vastprobe`, `-h`, a misspelt name, so
    that the help and "No such command" list them all)."""
    import copy

    name = next((a for a in args if not a.startswith("-")), None)
    only = [
        c
        for c in app.registered_commands
        if c.callback and typer.main.get_command_name(c.name or c.callback.__name__) == name
    ]
    if not only:
        return typer.main.get_command(app)  # type: ignore[return-value]
    narrowed = copy.copy(app)
    narrowed.registered_commands = only
    return typer.main.get_command(narrowed)  # type: ignore[return-value]


def _options_of(command: str) -> set[str]:
    """Every option name `vastprobe COMMAND` takes (built only to word a usage error)."""
    group = _click_group([command])
    cmd = getattr(group, "commands", {}).get(command)
    return {o for p in (cmd.params if cmd is not None else ()) for o in (*p.opts, *p.secondary_opts)}


def _usage_hint(message: str, args: list[str]) -> str:
    """One more clause for the slips people make: an option before the command it belongs to, a
    target before the command, a long option written with one dash (`-pid`, which click reads as
    `-p id`)."""
    command = _command_name(args)
    if not command:
        return ""
    end = args.index("--") if "--" in args else len(args)
    at = args.index(command)
    opts = _options_of(command)
    misplaced = [a.split("=", 1)[0] for a in args[:at] if a.split("=", 1)[0] in opts]
    if misplaced:
        return f" ({misplaced[0]} is an option of 'vastprobe {command}': options go after the command)"
    if "No such command" in message:
        stray = next((a for a in args[:at] if not a.startswith("-")), None)
        if stray is not None:
            return f" Did you mean 'vastprobe {command} {stray}'?"
    one_dash = next((a for a in args[at:end] if re.fullmatch(r"-[a-z][a-z-]+", a) and f"-{a}" in opts), None)
    if one_dash is not None:
        return f" (did you mean -{one_dash}?)"
    return ""


def run(args: list[str], debug: bool = False) -> int:
    """Run the CLI on `args` and return the exit code; never raises (but SystemExit from --help)."""
    import os

    instruction = os.environ.get("_VASTPROBE_COMPLETE")
    if instruction:  # a shell's completion script asks (vastprobe/completion.py)
        from vastprobe.completion import respond

        return respond(_click_group([]), instruction)
    args = _completion_shell_named(args)
    exc_mod = click_exceptions()
    prog = ("vastprobe " + _command_name(args)).strip()
    try:
        rv = _click_group(args).main(args=args, prog_name="vastprobe", standalone_mode=False)
        return rv if isinstance(rv, int) else EXIT_OK
    except exc_mod.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(exc.format_message() + "\n")
            return EXIT_USAGE
        say(f"{prog}: {exc.format_message()}{_usage_hint(exc.format_message(), args)} (see {prog} -h)")
        return EXIT_USAGE
    except exc_mod.ClickException as exc:  # a file option click itself could not open
        say(f"{prog}: {exc.format_message()}")
        return EXIT_USAGE
    except (KeyboardInterrupt, getattr(exc_mod, "Abort", typer.Abort), typer.Abort):
        say("\nvastprobe: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # whoever read stdout went away (`| head`): stop quietly, as a SIGPIPE'd tool would
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), sys.stdout.fileno())
        return EXIT_PIPE
    except SystemExit as exc:  # rich and click end a write to a closed pipe with SystemExit(1)
        code = exc.code if isinstance(exc.code, int) else 0
        return EXIT_PIPE if code == 1 else code
    except Exception as exc:
        if debug:
            import traceback

            say(traceback.format_exc().rstrip("\n"))  # escaped too: an exception may quote remote text
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        hint = "" if debug else " (run with --debug or VASTPROBE_DEBUG=1 for the traceback)"
        say(f"vastprobe: internal error: {type(exc).__name__}: {text}{hint}")
        return EXIT_FAILED


def _on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM stops vastprobe as Ctrl-C does: what finished is printed, recorded and reported."""
    import signal

    terminated.append(True)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started under nohup: no Ctrl-C to borrow
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)  # asyncio's Ctrl-C handling, wherever the run is


def main() -> None:
    import contextlib
    import gc
    import os
    import signal

    signal.signal(signal.SIGTERM, _on_sigterm)

    # A short-lived CLI that allocates many small objects per host: collect young objects far less
    # often (cyclic garbage stays bounded: each host's report is kept anyway).
    gc.set_threshold(50_000, 20, 20)
    args = sys.argv[1:]
    end = args.index("--") if "--" in args else len(args)
    debug = os.environ.get("VASTPROBE_DEBUG", "") not in ("", "0")
    if "--debug" in args[:end]:
        debug = True
        args = [a for i, a in enumerate(args) if not (a == "--debug" and i < end)]
    code = run(args, debug)
    if terminated and code == EXIT_INTERRUPTED:
        code = EXIT_TERMINATED
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        code = EXIT_PIPE if code == EXIT_OK else code
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    # Everything vastprobe writes is flushed, closed or renamed into place by now (history through
    # its context manager, files through write_atomic). Interpreter teardown would free every
    # object of every report one at a time: ~0.1 s of CPU after a 20-host sweep, more for bigger
    # fleets; and leftover analysis threads past their budget end with the process.
    os._exit(code)


if __name__ == "__main__":
    main()
