"""Builds the probe script with its parameters; every parameter reaches the shell quoted."""

from __future__ import annotations

import functools
import os.path
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from vastprobe import __version__

#: Cap on each per-process section (stat, status, fd, ...), in bytes.
MAX_PROC_SECTION = 8 * 1024 * 1024
#: Cap on the socket-table section (only sockets some process holds are kept), in bytes.
MAX_NET_SECTION = 2 * 1024 * 1024
#: Threads whose state and wait channel are read, in all (at most 64 per process, 64 processes).
MAX_THREADS = 2048
#: Seconds a section that touches an operator's path (a --log, an --artifacts glob, df) may take
#: before the probe abandons the child doing it (a dead mount: docs/security.md).
FILE_TIMEOUT = 5
#: Bytes of dmesg (or journalctl) output read at most: the largest kernel ring buffer is 32 MiB.
MAX_KMSG_READ = 64 * 1024 * 1024
#: Cap on the whole probe output read from one host, in bytes.
MAX_TOTAL_OUTPUT = 32 * 1024 * 1024
DEFAULT_ARTIFACTS = ("/tmp/*",)
#: The longest bound script.sh writes as a number for a command it runs under `timeout` (`tmo 20`,
#: `VP_FILE_T=16`; tests/probe/test_script.py checks it); nvidia-smi's is a parameter.
LONGEST_LITERAL_BOUND = 20

_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?$")


def shell_quote(value: str) -> str:
    """Single-quote for POSIX sh: nothing inside is expanded, a quote is spliced in."""
    if "\0" in value:
        raise ValueError("a probe parameter cannot contain a NUL byte")
    return "'" + value.replace("'", "'\\''") + "'"


@dataclass(frozen=True)
class ProbeParams:
    """What one probe run looks at; all of it is data on the remote side."""

    sample: float = 1.0
    logs: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = DEFAULT_ARTIFACTS
    deadline: int = 60
    nvidia_smi_timeout: int = 8
    max_fd_per_process: int = 256
    max_artifacts: int = 200
    log_tail_bytes: int = 4096
    held_tail_bytes: int = 2048  # of 4 found logs (held open write-only): the job's first, then those written last
    #: --pid: whose (and whose descendants') found logs and threads are read first, and with
    #: --py-spy their Python programs
    job_pids: tuple[int, ...] = ()
    python_stacks: bool = False  # --py-spy: py-spy dump --nonblocking of Python programs
    boundary: str = field(default_factory=lambda: secrets.token_hex(16))


def _number(value: float | int) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if not _NUMBER.match(text):
        raise ValueError(f"not a non-negative number: {value!r}")
    return text


def _each(name: str, items: tuple[str, ...], indexed: bool = True) -> str:
    """A shell function that calls its arguments once per item: the sh stand-in for a list."""
    calls = [
        f'\t"$@" {i} {shell_quote(item)}' if indexed else f'\t"$@" {shell_quote(item)}' for i, item in enumerate(items)
    ]
    if not indexed:
        return f'{name}() {{\n\t"$@" {" ".join(shell_quote(i) for i in items)}\n}}'
    return f"{name}() {{\n" + ("\n".join(calls) if calls else "\t:") + "\n}"


def log_dirs(logs: tuple[str, ...]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for log in logs:
        seen.setdefault(os.path.dirname(log) or ".", None)
    return tuple(seen)


def longest_command_bound(params: ProbeParams) -> int:
    """Seconds the probe lets any one command it bounds run: its literal bounds and nvidia-smi's
    (whose section is cut 2 s after it)."""
    return max(LONGEST_LITERAL_BOUND, int(params.nvidia_smi_timeout) + 2)


@functools.cache
def script_template() -> str:
    """Read once per run (a sweep renders it per host). A plain path, not importlib.resources:
    that machinery cost 10-30 ms of import on every start."""
    return Path(__file__).with_name("script.sh").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=16)
def render_script(params: ProbeParams) -> str:
    """The script for these parameters. Remembered: a sweep renders it once per host with the same
    parameters but for the deadline, which the seconds left after connecting set (~30 us each)."""
    if not re.fullmatch(r"[0-9a-f]{16,64}", params.boundary):
        raise ValueError("boundary must be hex")
    lines = [
        f"VP_B={shell_quote(params.boundary)}",
        f"VP_VERSION={shell_quote(__version__)}",
        f"VP_SAMPLE={shell_quote(_number(params.sample))}",
        f"VP_DEADLINE={shell_quote(_number(int(params.deadline)))}",
        f"VP_NVSMI_T={shell_quote(_number(int(params.nvidia_smi_timeout)))}",
        f"VP_MAXPROC={shell_quote(_number(MAX_PROC_SECTION))}",
        f"VP_MAXFD={shell_quote(_number(int(params.max_fd_per_process)))}",
        f"VP_MAXNET={shell_quote(_number(MAX_NET_SECTION))}",
        f"VP_MAXTHR={shell_quote(_number(MAX_THREADS))}",
        f"VP_MAXART={shell_quote(_number(int(params.max_artifacts)))}",
        f"VP_TAIL={shell_quote(_number(int(params.log_tail_bytes)))}",
        f"VP_HTAIL={shell_quote(_number(int(params.held_tail_bytes)))}",
        f"VP_JOBPIDS={shell_quote(' '.join(_number(int(p)) for p in params.job_pids[:64]))}",
        f"VP_NLOGS={shell_quote(_number(len(params.logs)))}",
        f"VP_FILE_T={shell_quote(_number(FILE_TIMEOUT))}",
        f"VP_KMAX={shell_quote(_number(MAX_KMSG_READ))}",
        f"VP_PYSPY={'1' if params.python_stacks else '0'}",
        "VP_GPU_HUNG=0",
        _each("vp_each_log", params.logs),
        _each("vp_each_glob", params.artifacts),
        _each("vp_dfdirs", log_dirs(params.logs), indexed=False),
    ]
    return script_template().replace("#@PARAMS@", "\n".join(lines), 1)
