"""Kernel log text a tenant had the kernel write (fixtures/kmsg/tenant-forged-lines): a marker must
open the kernel's own message, never sit inside a task's name or a quoted mount option."""

from __future__ import annotations

from tests.paths import FIXTURES
from vastprobe.parsers.kmsg import parse_kernel_lines


def test_a_tenants_forged_kernel_lines_are_no_events() -> None:
    text = (FIXTURES / "kmsg" / "tenant-forged-lines" / "dmesg.log").read_text()
    events = parse_kernel_lines(text)
    assert [(e.kind, e.pid) for e in events] == [("oom-kill", 30192)], [(e.kind, e.line[:80]) for e in events]
