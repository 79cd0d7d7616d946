"""A host's analysis leaves no reference cycle behind: everything it built is freed by reference
counting when its report is dropped. One recursive closure in the wait graph once held each host's
whole snapshot in a cycle; a sweep's garbage collector then scanned ~50,000 young objects a
collection and took a tenth of its CPU (docs/benchmarks.md, issue 36)."""

from __future__ import annotations

import collections
import gc
from collections.abc import Iterator

import pytest

from tests.paths import FIXTURES
from vastprobe.capture import load_captures
from vastprobe.pipeline import DiagnoseOptions, report_or_raise
from vastprobe.probe.script import ProbeParams

CAPTURES = ("healthy", "stopped-child", "orphan-pipe", "seed-inside")


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("name", CAPTURES)
def test_a_report_leaves_no_cyclic_garbage(name: str, collector_off: None) -> None:
    capture = load_captures(FIXTURES / "reports" / "captures" / f"{name}.json")[0]
    options = DiagnoseOptions(params=ProbeParams(logs=("/tmp/vastprobe-golden/job.log",)))
    report_or_raise(capture, options)  # the first one may fill caches that live on
    gc.collect()
    report = report_or_raise(capture, options)
    assert report.verdict in ("healthy", "stalled")  # it was analysed, not refused
    del report
    gc.set_debug(gc.DEBUG_SAVEALL)
    assert gc.collect() == 0, collections.Counter(type(o).__qualname__ for o in gc.garbage).most_common(8)


@pytest.mark.parametrize("name", CAPTURES)
def test_a_reports_table_leaves_no_cyclic_garbage(name: str, collector_off: None) -> None:
    """The terminal table too (a sweep with --format table renders every host): the wait tree's
    drawing once walked itself with recursive closures, each holding the snapshot."""
    import io

    from vastprobe.render.table import make_console, render_host

    capture = load_captures(FIXTURES / "reports" / "captures" / f"{name}.json")[0]
    options = DiagnoseOptions(params=ProbeParams(logs=("/tmp/vastprobe-golden/job.log",)))
    report = report_or_raise(capture, options)
    out = io.StringIO()
    render_host(make_console(out), report, True)
    gc.collect()
    render_host(make_console(out), report, True)
    assert "\n" in out.getvalue()
    del report
    gc.set_debug(gc.DEBUG_SAVEALL)
    assert gc.collect() == 0, collections.Counter(type(o).__qualname__ for o in gc.garbage).most_common(8)
