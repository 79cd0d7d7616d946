"""Option groups: options that several commands share, declared once as the fields of a frozen
dataclass (commands/options.py), and a decorator that puts a group's options into a command's
signature in place of one parameter and hands the command the group as one object.

typer builds a command's options from `inspect.signature`, so the decorator rewrites the signature
it reads: the parameter `probe: ProbeFlags` becomes --sample, --pid, ... in that place (their
order is the help's order), and the call gets `probe=ProbeFlags(sample=..., pid=..., ...)`. A new
shared option is one field in its group, and every command that takes the group offers it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields, replace
from typing import Any, TypeVar, get_type_hints

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class OptionGroup:
    """A group as one command takes it: the dataclass whose fields are the options, less the ones
    this command does not offer (they keep their defaults), with some options declared otherwise
    (collect's --ssh-option, whose -o is its output file)."""

    flags: type
    left_out: frozenset[str] = frozenset()
    declared: tuple[tuple[str, Any], ...] = ()

    def without(self, *names: str) -> OptionGroup:
        self._check(names)
        return replace(self, left_out=self.left_out | frozenset(names))

    def only(self, *names: str) -> OptionGroup:
        self._check(names)
        return replace(self, left_out=frozenset(f.name for f in fields(self.flags)) - frozenset(names))

    def but(self, **annotations: Any) -> OptionGroup:
        self._check(tuple(annotations))
        return replace(self, declared=self.declared + tuple(annotations.items()))

    def _check(self, names: tuple[str, ...]) -> None:
        unknown = set(names) - {f.name for f in fields(self.flags)}
        if unknown:
            raise TypeError(f"{self.flags.__name__} has no option {', '.join(sorted(unknown))}")

    def parameters(self) -> list[inspect.Parameter]:
        hints = get_type_hints(self.flags, include_extras=True) | dict(self.declared)
        return [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
            for f in fields(self.flags)
            if f.name not in self.left_out and f.default is not MISSING
        ]

    def build(self, values: dict[str, Any]) -> Any:
        """The group's object from the command line's values, taking them out of `values`."""
        return self.flags(**{p.name: values.pop(p.name) for p in self.parameters()})


def with_groups(**groups: OptionGroup | type) -> Callable[[F], F]:
    """Each named parameter of the command becomes its group's options, in its place."""
    chosen = {name: g if isinstance(g, OptionGroup) else OptionGroup(g) for name, g in groups.items()}

    def decorate(command: F) -> F:
        own = inspect.signature(command, eval_str=True)
        missing = set(chosen) - set(own.parameters)
        if missing:
            raise TypeError(f"{command.__name__} has no parameter {', '.join(sorted(missing))} for its group")
        params: list[inspect.Parameter] = []
        for p in own.parameters.values():
            if p.name in chosen:
                params += chosen[p.name].parameters()
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))
        names = [p.name for p in params]
        clash = {n for n in names if names.count(n) > 1}
        if clash:
            raise TypeError(f"{command.__name__}: options declared twice: {', '.join(sorted(clash))}")

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            for name, group in chosen.items():
                values[name] = group.build(values)
            return command(**values)

        run.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params} | {"return": own.return_annotation}
        return run  # type: ignore[return-value]

    return decorate
