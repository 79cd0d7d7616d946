"""A process that waits for another, unrelated one to exit by polling it, as its command line says:
`tail --pid=P` (an entrypoint's "wait for the daemon"), a shell loop `while kill -0 P; do sleep 1;
done`. Its wait is on P, which no wait channel shows: it sleeps on a timer between polls. With P
stopped, the waiter read HEALTHY (found by a helper)."""

from __future__ import annotations

import re

from vastprobe.model import Process
from vastprobe.untrusted.numbers import read_digits

#: Shells whose script text is read for a `kill -0 P` loop
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ash", "ksh", "mksh", "busybox"})
#: `while kill -0 P` / `until ! kill -0 P`, P written out in the script (a launcher formats it in)
_KILL0_LOOP = re.compile(r"\b(?:while|until)\s+(?:!\s*)?kill\s+-0\s+([0-9]{1,10})\b")


def watched_pid(p: Process) -> tuple[int, str] | None:
    """The PID `p` polls for, and how, in words; None when its command line says none."""
    argv = p.cmdline
    prog = argv[0].rsplit("/", 1)[-1] if argv else ""
    if prog == "tail":
        for i, a in enumerate(argv[1:], 1):
            text = a[6:] if a.startswith("--pid=") else argv[i + 1] if a == "--pid" and i + 1 < len(argv) else None
            if text is not None and (pid := read_digits(text, 10)) is not None:
                return pid, f"tail --pid={pid}"
        return None
    if prog in _SHELLS and len(argv) > 1:
        m = _KILL0_LOOP.search(" ".join(argv[1:])[:4096])
        if m is not None and (pid := read_digits(m.group(1), 10)) is not None:
            return pid, f"a loop of `kill -0 {pid}`"
    return None
