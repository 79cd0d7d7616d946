"""Kernel log text a tenant had the kernel write (fixtures/kmsg/tenant-forged-lines): a marker must
open the kernel's own message, never sit inside a task's name or a quoted mount option."""

from __future__ import annotations

from tests.paths import FIXTURES
from vastprobe.parsers.kmsg import parse_kernel_lines


def test_a_tenants_forged_kernel_lines_are_no_events() -> None:
    text = (FIXTURES / "kmsg" / "tenant-forged-lines" / "dmesg.log").read_text()
    events = parse_kernel_lines(text)
    assert [(e.kind, e.pid) for e in events] == [("oom-kill", 30192)], [(e.kind, e.line[:80]) for e in events]


#: Heads loggers and dmesg's options put before the kernel's message (a helper's list): anchoring the
#: markers lost the events behind them until they were known.
HEADED = [
    "[ 5155.884800] [   T25726] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "[ 5400.000000][   T1234] NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python3, An uncorrectable double bit error",
    "[ 5400.000000] [     T811] INFO: task python3:1234 blocked for more than 122 seconds.",
    "<3>1 2025-03-02T17:35:10.123456+00:00 gpu01 kernel - - - NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "Mar  2 17:35:10 gpu01 kernel: kern.err NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "Sun 2025-03-02 17:35:10 UTC gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "1740936910.123456 gpu01 kernel: INFO: task python3:1234 blocked for more than 122 seconds.",
    "[ 1234.567890 <    0.000123>] gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python3, DBE",
    "<3>[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "[  +0.000123] Out of memory: Killed process 1234 (python3) total-vm:100kB, anon-rss:50kB, file-rss:0kB, UID:1000",
    "[Mar 2 17:35] INFO: task python3:1234 blocked for more than 122 seconds.",
    "[So Mär  2 17:35:10 2025] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
]
#: A task's own lines whose names (15 characters at most) open like a head or a marker
TASK_NAMED = [
    "[1] NVRM: Xid ([4242]: segfault at 0 ip 00007f35ed620ad8 sp 00007fff4f8eec88 error 4 in libc.so.6",
    "traps: NVRM: Xid (PCI[4242] general protection fault ip:7f35ed620ad8 sp:7fff4f8eec88 error:0",
    "x kernel: NVRM[4242]: segfault at 0 ip 00007f35ed620ad8 sp 00007fff4f8eec88 error 4 in fallen off the bus.so",
]


def test_the_kernels_lines_behind_loggers_heads_are_events_and_task_named_ones_are_not() -> None:
    for line in HEADED:
        assert len(parse_kernel_lines(line)) == 1, line
    for line in TASK_NAMED:
        assert parse_kernel_lines(line) == (), line
    # a task named like a marker that invokes the OOM killer itself is that, not the marker
    (event,) = parse_kernel_lines("[ 1.0] oom-kill:x invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0")
    assert (event.kind, event.comm) == ("oom-invoked", "oom-kill:x")
