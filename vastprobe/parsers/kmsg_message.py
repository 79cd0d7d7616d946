"""The kernel's own message in a kernel-log line, after the heads loggers and dmesg's options write
before it; None for a line the kernel writes about one task (a segfault, a trap), which opens with
the task's name: a tenant's text. Markers are anchored to what this returns (parsers/kmsg.py)."""

from __future__ import annotations

import re

#: Heads that loggers and dmesg's options write before the kernel's message, which strip_prefix
#: leaves (a tenant writes no line's start): printk's caller id "[   T25726] ", a syslog priority
#: "<3>", a bracketed stamp of any form ("[  +0.000123]", "[Mar 2 17:35]", "[ 1.5 <    0.000123>]",
#: a localised ctime), epoch seconds, an ISO date, "host kernel: ", "host kernel - - - " (RFC 5424),
#: rsyslog's "kern.err ". A marker after them opened the line before it was anchored (found by a helper)
_LOGGER_HEAD = re.compile(
    r"(?:<[0-9]{1,3}>[0-9]? ?|\[[^\]'\"`]{1,48}\] ?|[0-9]{9,11}\.[0-9]{1,9} "
    r"|(?:[A-Z][a-z]{2} )?[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.,+-]{8,32}(?: [A-Z]{2,5})? "
    r"|[^\s'\"`]{1,64} kernel(?:: | - - - )|kernel: |kern\.[a-z]{3,7} )"
)
#: A line the kernel writes about one task, opening with its name: "NAME[812]: segfault at …"
_TASK_LINE = re.compile(r"[^\n]{1,16}\[[0-9]{1,10}\]: ")


def kernel_message(msg: str) -> str | None:
    msg = msg.lstrip()  # a message's continuation is indented ("               NVRM: fallen off the bus …")
    if _TASK_LINE.match(msg):
        return None  # a task's own line: its name and its library's are the tenant's
    for _ in range(4):
        m = _LOGGER_HEAD.match(msg)
        if m is None or not m.end():
            break
        msg = msg[m.end() :]
        if _TASK_LINE.match(msg):
            return None
    return msg
