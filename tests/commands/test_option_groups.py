"""commands/option_groups.py: a group's options put into a command's signature in its place, handed
back as one object; and every command offering each group it takes whole (an option added to a
group reaches every command that takes it)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from vastprobe.commands.option_groups import OptionGroup, with_groups


@dataclass(frozen=True)
class Knobs:
    depth: Annotated[int, typer.Option("--depth")] = 1
    name: Annotated[str, typer.Option("--name")] = "x"
    loud: Annotated[bool, typer.Option("--loud")] = False


def test_a_group_becomes_options_in_its_place_and_one_object() -> None:
    seen: list[object] = []

    @with_groups(knobs=Knobs)
    def command(first: Annotated[str, typer.Argument()], knobs: Knobs, last: int = 7) -> None:
        seen.append((first, knobs, last))

    assert list(inspect.signature(command).parameters) == ["first", "depth", "name", "loud", "last"]
    app = typer.Typer()
    app.command()(command)
    r = CliRunner().invoke(app, ["a", "--depth", "3", "--loud"])
    assert r.exit_code == 0, r.output
    assert seen == [("a", Knobs(depth=3, name="x", loud=True), 7)]


def test_left_out_options_keep_their_defaults_and_are_not_offered() -> None:
    seen: list[Knobs] = []

    @with_groups(knobs=OptionGroup(Knobs).without("name"))
    def command(knobs: Knobs) -> None:
        seen.append(knobs)

    app = typer.Typer()
    app.command()(command)
    assert CliRunner().invoke(app, ["--name", "y"]).exit_code == 2  # not an option of this command
    assert CliRunner().invoke(app, ["--depth", "2"]).exit_code == 0
    assert seen == [Knobs(depth=2)]
    assert list(inspect.signature(with_groups(k=OptionGroup(Knobs).only("loud"))(lambda k: k)).parameters) == ["loud"]


def test_an_option_declared_otherwise_for_one_command() -> None:
    other = Annotated[int, typer.Option("--levels")]

    @with_groups(knobs=OptionGroup(Knobs).but(depth=other))
    def command(knobs: Knobs) -> None:
        del knobs

    assert inspect.signature(command).parameters["depth"].annotation is other


def test_mistakes_are_caught_when_the_command_is_declared() -> None:
    with pytest.raises(TypeError, match="no option"):
        OptionGroup(Knobs).without("nope")
    with pytest.raises(TypeError, match="no parameter"):
        with_groups(knobs=Knobs)(lambda other: other)
    with pytest.raises(TypeError, match="declared twice"):

        @with_groups(knobs=Knobs)
        def twice(knobs: Knobs, depth: int = 1) -> None:
            del knobs, depth


def _offered(command_name: str) -> set[str]:
    from vastprobe.cli import app

    group = typer.main.get_group(app)
    cmd = group.commands[command_name]
    return {p.name for p in cmd.params if p.name}


@pytest.mark.parametrize(
    ("command", "groups", "left_out"),
    [
        ("diagnose", ("ProbeFlags", "RuleFlags", "ReportFlags", "SshFlags"), set()),
        ("sweep", ("ProbeFlags", "RuleFlags", "ReportFlags", "SshFlags", "FleetFlags"), set()),
        ("collect", ("ProbeFlags", "SshFlags"), set()),
        ("watch", ("ProbeFlags", "RuleFlags", "SshFlags"), {"artifacts", "py_spy"}),
        ("analyze", ("RuleFlags", "ReportFlags"), set()),
    ],
)
def test_each_command_offers_every_option_of_its_groups(
    command: str, groups: tuple[str, ...], left_out: set[str]
) -> None:
    from vastprobe.commands import options

    wanted = {f.name for g in groups for f in fields(getattr(options, g))} - left_out
    assert wanted - _offered(command) == set()
