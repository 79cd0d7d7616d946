"""sweep's inventory: the options that name its targets (as ClusterShell's clush takes them) and
how they are read into one list of entries, each target once; every problem a usage error."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from vastprobe.commands import checks
from vastprobe.commands.common import EXIT_OK, usage_error
from vastprobe.commands.options import P_INVENTORY, complete_targets
from vastprobe.commands.settings import per_kind
from vastprobe.notices import say


@dataclass(frozen=True)
class InventoryFlags:
    """Where the targets come from, beside the positional INVENTORY."""

    nodes: Annotated[
        Optional[list[str]],
        typer.Option(
            "-w",
            "--nodes",
            metavar="NODES",
            rich_help_panel=P_INVENTORY,
            help="Targets as a node set: 'gpu\\[01-16],root@other:2222' (repeatable).",
            autocompletion=complete_targets,
        ),
    ] = None
    hostfile: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--hostfile",
            metavar="FILE",
            callback=checks.readable_files,
            rich_help_panel=P_INVENTORY,
            help="Inventory file: a plain list or vast.ai JSON (repeatable).",
        ),
    ] = None
    listed: Annotated[
        Optional[list[str]],
        typer.Option(
            "--from",
            metavar="KIND[:QUERY]",
            callback=checks.texts,
            rich_help_panel=P_INVENTORY,
            help="The running containers or pods a runtime lists: docker\\[:FILTER,...] and podman\\[:FILTER,...] "
            "(docker ps --filter), kubectl\\[:SELECTOR] (pods of every namespace; --context) (repeatable).",
        ),
    ] = None
    exclude_nodes: Annotated[
        Optional[list[str]],
        typer.Option(
            "-x",
            "--exclude",
            metavar="NODES",
            rich_help_panel=P_INVENTORY,
            help="Leave these out: targets or host names, node sets allowed (repeatable).",
            autocompletion=complete_targets,
        ),
    ] = None


def _read_text_source(name: str) -> str:
    """An inventory file's text ('-': stdin), bounded; a usage error when it cannot be read."""
    limit = 64 * 1024 * 1024
    try:
        if name == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(Path(name).expanduser(), "rb") as f:
                data = f.read(limit + 1)
    except FileNotFoundError:
        usage_error(f"{name}: no such file")
    except IsADirectoryError:
        usage_error(f"{name}: is a directory, not an inventory file")
    except OSError as exc:
        usage_error(f"{name}: {exc.strerror or exc}")
    if len(data) > limit:
        usage_error(f"{name}: larger than {limit} bytes")
    if b"\0" in data[:65536]:
        usage_error(f"{name}: binary data, not an inventory")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        usage_error(f"{name}: not UTF-8 text (byte {exc.start})")


def inventory_entries(inventory: Optional[str], flags: InventoryFlags, context: Optional[str] = None) -> list:
    """Positional INVENTORY (an existing file, '-', or a node set), -w node sets, --hostfile files
    and the containers and pods --from lists, in that order; then -x; then each target once."""
    nodes, hostfiles = flags.nodes or [], flags.hostfile or []
    excluded, listed = flags.exclude_nodes or [], flags.listed or []
    from vastprobe.targets import (
        InventoryEntry,
        InventoryError,
        exclude,
        expand_nodeset,
        looks_like_path,
        parse_inventory,
        text_problem,
        unique_entries,
    )

    entries: list[InventoryEntry] = []

    def add_nodes(text: str, what: str) -> None:
        try:
            targets = expand_nodeset(text)
        except InventoryError as exc:
            usage_error(f"{what}: {exc}")
        for t in targets:
            bad = text_problem(t)
            if bad:
                usage_error(f"{what}: {bad}: {t!r}")
        entries.extend(InventoryEntry(t) for t in targets)

    def well_formed(target: str) -> None:
        from vastprobe.targets import TargetError
        from vastprobe.transport.registry import check_target

        try:
            check_target(target)
        except TargetError as exc:
            raise InventoryError(str(exc)) from exc

    def add_file(name: str) -> None:
        try:
            entries.extend(parse_inventory(_read_text_source(name), well_formed))
        except InventoryError as exc:
            usage_error(f"{'stdin' if name == '-' else name}: {exc}")

    if inventory is not None:
        if inventory == "-" or Path(inventory).expanduser().exists():
            add_file(inventory)
        elif looks_like_path(inventory):
            usage_error(f"{inventory}: no such file (for host names, use -w)")
        else:
            add_nodes(inventory, "INVENTORY")
    for n in nodes:
        add_nodes(n, f"-w {n}")
    for f in hostfiles:
        add_file(str(f))
    if listed:
        from vastprobe.targets import TargetError
        from vastprobe.transport.base import TransportSettings
        from vastprobe.transport.registry import list_targets

        settings = TransportSettings(per_kind=per_kind(context))
    for spec in listed or ():
        try:
            running = list_targets(spec, settings)
        except TargetError as exc:
            usage_error(str(exc))
        if not running:
            say(f"vastprobe sweep: --from {spec}: nothing running matches")
        entries.extend(InventoryEntry(t) for t in running)
    if not entries and listed and inventory is None and not nodes and not hostfiles:
        say("vastprobe sweep: nothing to sweep")  # no container running now: no error for a cron sweep
        raise typer.Exit(EXIT_OK)
    given = [("stdin" if x == "-" else x) for x in (inventory, *map(str, hostfiles)) if x is not None]
    if not entries and given:  # it was given, and holds none (it said "give an INVENTORY"; found by a helper)
        usage_error(f"no targets in {', '.join(given)}: it holds no host (only blank lines or comments?)")
    if not entries:
        usage_error("no targets: give an INVENTORY, -w NODES, --hostfile FILE or --from KIND[:QUERY]")
    try:
        ex = [t for x in excluded for t in expand_nodeset(x)]
    except InventoryError as exc:
        usage_error(f"-x: {exc}")
    kept = exclude(entries, ex)
    if not kept:
        usage_error(f"no targets left after -x ({len(entries)} excluded)")
    unique, dropped = unique_entries(kept)
    if dropped:
        say(f"vastprobe: {dropped} duplicate target{'s' if dropped != 1 else ''} probed once")
    return unique
