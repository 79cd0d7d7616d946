"""What the job's programs say about themselves: Python stacks (py-spy) and PyTorch flight recorder
dumps with the collectives each rank entered."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Collective:
    """One collective a rank entered, from its flight recorder dump."""

    pg: str  # the process group's id
    seq: int  # collective_seq_id
    op: str  # profiling_name: "nccl:all_reduce", "gloo:all_reduce"
    sizes: str  # input sizes, in words
    state: str  # scheduled, started, completed
    retired: bool


@dataclass(frozen=True)
class FrameLocal:
    """One argument or local variable of a Python frame, as py-spy printed it (`--locals`). Only the
    names the probe lets out (parsers/pystack.ALLOWED_LOCALS) ever reach a snapshot: locals can
    hold secrets."""

    name: str
    repr: str  # py-spy's text for the value, at most 512 characters: "/tmp/x.lock", None, 3, <UnixFileLock at 0x7f..>
    text: str | None = None  # a str's text, between py-spy's quotes; None: not a str, or cut short
    type_name: str | None = None  # an object py-spy shows only as <Type at 0x...>: its type (self: UnixFileLock)


@dataclass(frozen=True)
class PyThread:
    """One thread of a Python program as py-spy read it (parsers/pystack.py)."""

    tid: str  # as py-spy names it: the native thread id, or its address
    name: str  # the Python thread's name: MainThread, QueueFeederThread, pt_autograd_0
    status: str  # py-spy's words: idle, active, active+gil, ...
    frames: tuple[str, ...]  # innermost first: "function (file:line)"
    #: each frame's allow-listed arguments and locals, one tuple per frame (as `frames`); () when
    #: py-spy gave none (a probe before --locals, a py-spy without it)
    frame_locals: tuple[tuple[FrameLocal, ...], ...] = ()

    def locals_of(self, index: int) -> tuple[FrameLocal, ...]:
        return self.frame_locals[index] if index < len(self.frame_locals) else ()


@dataclass(frozen=True)
class PythonStack:
    """Where a Python program is (--py-spy): its threads' stacks, or why py-spy could not say."""

    pid: int
    threads: tuple[PyThread, ...]
    error: str | None = None  # py-spy's own error (not Python, permission denied, timed out)
    cut: bool = False  # past the probe's 64 KiB per program

    def thread_lines(self, threads: int = 4, frames: int = 3) -> list[str]:
        """Each thread's innermost frames and its outermost one (where the program entered), for evidence."""
        out = []
        for t in self.threads[:threads]:
            where = " <- ".join(t.frames[:frames]) or "no Python frame"
            hidden = len(t.frames) - frames - 1  # the outermost frame (the program's entry) is shown
            if hidden > 0:
                where += f" <- … {hidden} more <- {t.frames[-1]}"
            elif hidden == 0:
                where += f" <- {t.frames[-1]}"
            out.append(f'thread {t.tid} "{t.name}" ({t.status}): {where}')
        return out


@dataclass(frozen=True)
class FlightDump:
    """One rank's flight recorder dump (parsers/flight_recorder.py: read without running pickle)."""

    path: str
    rank: int | None  # from the file name's digits after the prefix
    version: str
    collectives: tuple[Collective, ...]
    last_completed: dict[str, int]  # process group -> its last completed collective (pg_status)
    refused: str | None = None  # why the dump was not read: a pickle that is not plain data, bounds
    mtime: int | None = None  # when it was written (epoch seconds, the target's clock); None: not known
    #: the probe's output ended inside this dump (its deadline, or the section's cap): not read, and
    #: no sign of what its writer wrote
    cut: bool = False

    @property
    def prefix(self) -> str:
        """The dump prefix its rank wrote it under (TORCH_FR_DUMP_TEMP_FILE): the path without the rank."""
        return self.path.rstrip("0123456789")

    def last_entered(self, pg: str) -> int | None:
        seqs = [c.seq for c in self.collectives if c.pg == pg]
        return max(seqs) if seqs else None
