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

The probe asks for each frame's arguments and locals (`--locals`) and lets out only the names of
ALLOWED_LOCALS (the script's VP_PYLOCALS: the same list), each value cut at 512 characters, under
the frame they belong to, without py-spy's "Arguments:" and "Locals:" headers:

        _poll_until_acquired (filelock/_core/_acquire.py:177)
                lock_filename: "/tmp/x.lock"

The list is applied here again: a target that sends more (a forged section, a changed probe) never
puts another variable in a snapshot. py-spy writes a str between double quotes, a newline in it as
`\\n` and a single quote as `\\"`; other characters as they are (a path holding those is not
decoded, and so matches no open file). A value py-spy cut (`..."`, past 128 characters) or the
probe cut is no str: its text is not known.

`build_python_stacks` gives the snapshot its `python_stacks` and `python_stacks_note`: the note
also says when the probe abandoned py-spy or wrote no pystack section it was asked for.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from vastprobe.model import FrameLocal, PythonStack, PyThread
from vastprobe.probe import sources as src
from vastprobe.untrusted.numbers import read_int

if TYPE_CHECKING:
    from vastprobe.parsers.reading import Sections
    from vastprobe.probe.script import ProbeParams

MAX_PROGRAMS = 8
MAX_THREADS = 64
MAX_FRAMES = 64
#: the arguments and locals that may leave the target (VP_PYLOCALS in probe/script.sh): the paths
#: of polling locks (py-filelock's, torch's FileBaton's build directory) and `self` as its type name
ALLOWED_LOCALS = ("lock_filename", "canonical_path", "lock_file", "lock_file_path", "build_directory", "self")
MAX_LOCALS = 8  # a frame's
MAX_VALUE = 512
_THREAD = re.compile(r'Thread (\S{1,40}) \(([^)]{0,40})\)(?:: "(.{0,200})")?\s*')
_LOCAL = re.compile(r" {12}([A-Za-z_][A-Za-z0-9_]{0,63}): (.*)", re.ASCII | re.DOTALL)
_OBJECT = re.compile(r"<([A-Za-z_][A-Za-z0-9_.]{0,127}) at 0x[0-9a-fA-F]{1,16}>", re.ASCII)


def frame_local(name: str, value: str) -> FrameLocal | None:
    """One allow-listed local as a typed value; None for any other name (or `self` that is not
    shown as an object's type)."""
    if name not in ALLOWED_LOCALS:
        return None
    value = value[:MAX_VALUE]
    obj = _OBJECT.fullmatch(value)
    if name == "self" and obj is None:
        return None
    text = None
    if len(value) >= 2 and value.startswith('"') and value.endswith('"') and not value.endswith('..."'):
        text = value[1:-1]
    return FrameLocal(name, value, text, obj.group(1) if obj else None)


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


def build_python_stacks(
    sections: Sections, params: ProbeParams, fmt: int
) -> tuple[tuple[PythonStack, ...], str | None]:
    """The stacks, and why some or all were not taken (None when nothing needs saying)."""
    stacks, note = sections.read(src.PYSTACK, sections.text(src.PYSTACK))
    if src.PYSTACK.name in sections.out.abandoned:
        note = "py-spy did not answer within the probe's 16 s and was abandoned"
    elif params.python_stacks and sections.out.get(src.PYSTACK.name) is None and fmt >= 2:
        note = "the probe took no Python stack (its section is missing)"
    return stacks, note


def _one(pid: int, lines: list[str], cut: bool) -> PythonStack:
    threads: list[PyThread] = []
    head: tuple[str, str, str] | None = None
    frames: list[str] = []
    local_vars: list[list[FrameLocal]] = []
    error = None

    def close() -> None:
        if head is not None and len(threads) < MAX_THREADS:
            kept = tuple(tuple(v) for v in local_vars[:MAX_FRAMES]) if any(local_vars) else ()
            threads.append(PyThread(head[0], head[1], head[2], tuple(frames[:MAX_FRAMES]), kept))

    for line in lines:
        m = _THREAD.fullmatch(line)
        local = _LOCAL.fullmatch(line) if head is not None and frames else None
        if m:
            close()
            head, frames, local_vars = (m.group(1), m.group(3) or "", m.group(2)), [], []
        elif local is not None:
            v = frame_local(local.group(1), local.group(2))
            if v is not None and len(local_vars[-1]) < MAX_LOCALS:
                local_vars[-1].append(v)
        elif line.startswith(("    ", "\t")) and head is not None:
            frame = line.strip()
            if frame and not frame.startswith(("Locals:", "Arguments:")):
                frames.append(frame[:200])
                local_vars.append([])
        elif line.startswith("Error: ") and error is None:
            error = line[7:].strip()[:200]
        elif line.startswith("timeout") or "Terminated" in line:
            error = error or "timed out"
    close()
    if not threads and error is None:
        error = "py-spy printed no thread (timed out, or the program exited)"
    return PythonStack(pid, tuple(threads), error, cut)
