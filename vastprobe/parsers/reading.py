"""The one place a section's parser is called: `Sections.read`.

Every section is declared once in probe/sources.py, with its parser named there as
`"module:function"` (probe/ sits below parsers/, so it names the parser rather than importing
it). `parser_of` resolves that name when the parser is called, so the function called is the one
the module holds at that moment; `Sections.read` calls it on the section's text and, when it
raises, raises `SectionUnreadable` naming that section and why. The pipeline then reads the
capture again without it (a section whose parser failed is read as absent) and the report says
so (`probe-section-unreadable`, VP902). A failure outside every `read` is not a section's: it is
the host's.

A new source is: its shell function in probe/script.sh, its parser in a module here, its entry in
probe/sources.py naming both, and its builder beside its parser, which reads it with
`sections.read(src.NEW, ...)` and which snapshot.build_snapshot calls for the part of the model
it fills.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

from vastprobe.probe.sections import ProbeOutput, RawSection
from vastprobe.probe.sources import LEGACY, SOURCES, Source

T = TypeVar("T")

#: Why a part of the snapshot is empty when a format 1 probe, which did not read it, wrote the capture.
NOT_READ = "not read by this probe version"


class SectionUnreadable(Exception):
    """A section's parser raised: `sections` are the sections it was reading (those present in
    the output), `reason` the exception in one line; the parser's exception is the cause."""

    def __init__(self, sections: tuple[str, ...], cause: Exception) -> None:
        self.sections = sections
        self.cause = cause
        self.reason = f"{type(cause).__name__}: {cause}"[:300]
        super().__init__(f"section(s) {', '.join(sections) or '(none present)'} unreadable: {self.reason}")


def parser_of(source: Source) -> Callable[..., Any]:
    """The function `source.parser` names (`module:function`), looked up now (a test may have
    replaced it). Every parser module is loaded with this one (PARSER_MODULES, below), so the lookup
    is a dict's: import_module's own checks cost 40 us a host."""
    module, _, name = source.parser.partition(":")
    loaded = sys.modules.get(module) or importlib.import_module(module)
    fn = getattr(loaded, name)
    if not callable(fn):
        raise TypeError(f"{source.parser} is not a function")
    return fn  # type: ignore[no-any-return]


class Sections:
    """The probe's sections as the snapshot reads them: their text, and their parsers called
    through `read`."""

    def __init__(self, out: ProbeOutput) -> None:
        self.out = out

    def get(self, source: Source, n: int = 0) -> RawSection | None:
        return self.out.get(source.section(n))

    def text(self, source: Source, n: int = 0) -> str:
        sec = self.get(source, n)
        return sec.text if sec else ""

    def cut(self, source: Source, n: int = 0) -> bool:
        """Whether the section arrived without its status line: its last lines may be partial."""
        sec = self.get(source, n)
        return sec is not None and sec.truncated

    def missing(self, source: Source, n: int = 0) -> str:
        """Why the section `source.section(n)` gave nothing: absent, cut short, or its command failed."""
        name = source.section(n)
        s = self.out.get(name)
        if s is None:
            return f"the probe produced no {name} section"
        if s.truncated:
            return f"the {name} section was cut short"
        return f"{name} failed"

    def absent(self, source: Source, fmt: int) -> str:
        """Why the section of a source format 2 added is absent: a format 1 probe never read it."""
        return NOT_READ if fmt < 2 else self.missing(source)

    @overload
    def read(
        self,
        source: Source,
        *args: Any,
        n: int = 0,
        parser: Callable[..., T],
        also: Iterable[Source] = (),
        **kwargs: Any,
    ) -> T: ...
    @overload
    def read(
        self, source: Source, *args: Any, n: int = 0, parser: None = None, also: Iterable[Source] = (), **kwargs: Any
    ) -> Any: ...
    def read(
        self,
        source: Source,
        *args: Any,
        n: int = 0,
        parser: Callable[..., Any] | None = None,
        also: Iterable[Source] = (),
        **kwargs: Any,
    ) -> Any:
        """`source`'s parser (or `parser`, another reader of the same section: the process
        section feeds several) called on `args`; when it raises, the section `source.section(n)`
        (and those of `also`, read by the same call) is unreadable."""
        fn = parser if parser is not None else parser_of(source)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # a parser bug or input no parser foresaw: that section, not the host
            names = (source.section(n), *(s.section(n) for s in also))
            raise SectionUnreadable(tuple(sorted(x for x in set(names) if x in self.out.sections)), exc) from exc


#: Every parser module a source names, loaded with this one, so that importing the snapshot (as
#: the analysis warm-up does, pipeline.warm_analysis) loads every parser before the first capture.
#: Last in this file, so that a parser module that imports from this one finds it whole.
PARSER_MODULES = tuple(sorted({s.parser.partition(":")[0] for s in (*SOURCES, *LEGACY)}))
for _module in PARSER_MODULES:
    importlib.import_module(_module)
