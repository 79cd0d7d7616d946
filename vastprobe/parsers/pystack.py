"""py-spy's dumps of Python programs (the `pystack` section, asked with --py-spy).

The probe sends `@pyspy PID` and then py-spy's output, every line prefixed with `|` (a frame's
function and file names are the program's to choose, so no line of theirs can pass for ours);
`@cut` where the 64 KiB per program ran out; `@@absent` when py-spy is not on the target's PATH and
`@@budget` when the probe's time for it ran out. py-spy's own format:

    Process 6903: python3 train.py
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 6903 (idle): "MainThread"
        wait (threading.py:320)
        join (multiprocessing/queues.py:199)
"""

from __future__ import annotations

import re

from vastprobe.model import PythonStack, PyThread
from vastprobe.untrusted.numbers import read_int

MAX_PROGRAMS = 8
MAX_THREADS = 64
MAX_FRAMES = 64
_THREAD = re.compile(r'Thread (\S{1,40}) \(([^)]{0,40})\)(?:: "(.{0,200})")?\s*')


def parse_pystack_section(text: str) -> tuple[tuple[PythonStack, ...], str | None]:
    """The programs' stacks, and a note when py-spy was absent or its time ran out."""
    stacks: list[PythonStack] = []
    note: str | None = None
    pid: int | None = None
    lines: list[str] = []
    cut = False

    def flush() -> None:
        if pid is not None and len(stacks) < MAX_PROGRAMS:
            stacks.append(_one(pid, lines, cut))

    for raw in text.split("\n"):
        if raw.startswith("@pyspy "):
            flush()
            pid, lines, cut = read_int(raw[7:]), [], False
        elif raw == "@cut":
            cut = True
        elif raw.startswith("|") and pid is not None:
            lines.append(raw[1:])
        elif raw == "@@absent":
            note = "py-spy is not on the target's PATH: no Python stack was taken (pip install py-spy)"
        elif raw == "@@budget":
            note = "the probe's 12 s for py-spy ran out: the oldest Python programs have no stack"
    flush()
    return tuple(stacks), note


def _one(pid: int, lines: list[str], cut: bool) -> PythonStack:
    threads: list[PyThread] = []
    head: tuple[str, str, str] | None = None
    frames: list[str] = []
    error = None

    def close() -> None:
        if head is not None and len(threads) < MAX_THREADS:
            threads.append(PyThread(head[0], head[1], head[2], tuple(frames[:MAX_FRAMES])))

    for line in lines:
        m = _THREAD.fullmatch(line)
        if m:
            close()
            head, frames = (m.group(1), m.group(3) or "", m.group(2)), []
        elif line.startswith(("    ", "\t")) and head is not None:
            frame = line.strip()
            if frame and not frame.startswith(("Locals:", "Arguments:")):
                frames.append(frame[:200])
        elif line.startswith("Error: ") and error is None:
            error = line[7:].strip()[:200]
        elif line.startswith("timeout") or "Terminated" in line:
            error = error or "timed out"
    close()
    if not threads and error is None:
        error = "py-spy printed no thread (timed out, or the program exited)"
    return PythonStack(pid, tuple(threads), error, cut)
