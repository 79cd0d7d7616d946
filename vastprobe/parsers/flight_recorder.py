"""PyTorch's flight recorder dumps (`TORCH_NCCL_DEBUG_INFO_TEMP_FILE` / `TORCH_FR_DUMP_TEMP_FILE`
prefix + rank, `/tmp/nccl_trace_rank_N` by default): a pickle of plain containers and scalars.

A pickle is a program: loading one with the `pickle` module can call any function it names. This
reader never does. It is an interpreter of the opcodes that build plain data (dicts, lists, tuples,
strings, bytes, numbers, booleans, None, the memo) and of nothing else: an opcode that names a
global, calls, builds an object or loads a persistent id is refused, and so is input past its size,
nesting or item bounds. Every container's depth is known as it is built (TUPLE1-3 nest without a
MARK, so the MARK count alone bounds nothing: a key nested a million tuples deep crashed CPython in
C when the dict hashed it), and a container fetched from the memo is frozen: no later opcode may
add to it, so no value can contain itself. What the dump says is then read into a typed record: per process group, the
collectives this rank entered (sequence id, op, sizes, state) and its status.

The probe sends a dump as `@fr MTIME PATH` (`-` for a time it could not read; probes before the
time sent `@fr PATH`) followed by its bytes in base64 (at most 1 MiB of it).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
import struct
from collections.abc import Callable
from typing import Any

from vastprobe.model import Collective, FlightDump
from vastprobe.untrusted.numbers import read_int

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_ITEMS = 200_000
MAX_MEMO = 100_000
MAX_STACK = 256  # values on the stack at once: what bounds nesting built with APPEND and SETITEM


class Refused(ValueError):
    """The dump is not plain data, or not within bounds: nothing of it is used."""


_MARK = object()


def load_plain(data: bytes) -> Any:
    """The value a pickle of plain data builds; Refused for anything else."""
    if len(data) > MAX_BYTES:
        raise Refused(f"{len(data)} bytes, over {MAX_BYTES}")
    return _Interpreter(data).run()


#: The opcodes that name a global, call, build an object or load a persistent id, by name: refused.
_NOT_PLAIN = {0x63: "GLOBAL", 0x93: "STACK_GLOBAL", 0x52: "REDUCE", 0x62: "BUILD", 0x69: "INST",
              0x6F: "OBJ", 0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 0x50: "PERSID", 0x51: "BINPERSID"}  # fmt: skip


class _Interpreter:
    """One pickle being read: the input and where in it, the stack, the memo, and what bounds them
    (the items pushed, the MARKs open, each container's nesting depth). Each opcode is run by the
    step `_STEPS` names for it; one it does not name is refused."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.items = 0
        self.depth = 0
        # each container's nesting depth, by id (with the container, so the id stays its own), and the
        # containers fetched from the memo: shared, so never added to again (no cycle, no stale depth)
        self.depths: dict[int, tuple[Any, int]] = {}
        self.shared: set[int] = set()

    def run(self) -> Any:
        while True:
            op = self.take(1)[0]
            if op == 0x2E:  # STOP
                if len(self.stack) != 1:
                    raise Refused("the pickle does not end with one value")
                return self.stack[0]
            step = _STEPS.get(op)
            if step is None:
                name = _NOT_PLAIN.get(op)
                raise Refused(f"opcode {name or hex(op)} at byte {self.pos - 1}: not plain data, never run")
            step(self, op)

    # ---- the input, the stack and the bounds

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise Refused(f"a length of {n} runs past the end ({len(self.data)} bytes)")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> int:
        v: int = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]  # an integer format: an int, not text
        return v

    def push(self, v: Any) -> None:
        self.items += 1
        if self.items > MAX_ITEMS:
            raise Refused(f"more than {MAX_ITEMS} items")
        if len(self.stack) >= MAX_STACK:
            raise Refused(f"nested deeper than {MAX_STACK}")
        self.stack.append(v)

    def pop_mark(self) -> list[Any]:
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is _MARK:
                items_ = stack[i + 1 :]
                del stack[i:]
                self.depth -= 1
                return items_
        raise Refused("no mark")

    def depth_of(self, v: Any) -> int:
        got = self.depths.get(id(v))
        return got[1] if got is not None and got[0] is v else 0

    def built(self, container: Any, members: Any) -> Any:
        d = 1 + max((self.depth_of(m) for m in members), default=0)
        if d > MAX_DEPTH:
            raise Refused(f"nested deeper than {MAX_DEPTH}")
        self.depths[id(container)] = (container, d)
        return container

    def grow(self, container: Any, members: list[Any]) -> None:
        """`container` (the stack's top) takes `members`: its depth follows them."""
        if id(container) in self.shared:
            raise Refused("a value taken from the memo is added to: a value that could contain itself")
        d = max(self.depth_of(container), 1 + max((self.depth_of(m) for m in members), default=0))
        if d > MAX_DEPTH:
            raise Refused(f"nested deeper than {MAX_DEPTH}")
        self.depths[id(container)] = (container, d)

    # ---- the opcodes, by kind

    def framing(self, op: int) -> None:
        if op == 0x80:  # PROTO
            self.take(1)
        elif op == 0x95:  # FRAME
            self.take(8)
        elif op == 0x28:  # MARK
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise Refused(f"nested deeper than {MAX_DEPTH}")
            self.stack.append(_MARK)

    def scalar(self, op: int) -> None:
        """An empty container, a constant, a number."""
        if op == 0x7D:  # EMPTY_DICT
            self.push(self.built({}, ()))
        elif op == 0x5D:  # EMPTY_LIST
            self.push(self.built([], ()))
        elif op == 0x29:  # EMPTY_TUPLE
            self.push(())
        elif op == 0x4E:  # NONE
            self.push(None)
        elif op == 0x88:  # NEWTRUE
            self.push(True)
        elif op == 0x89:  # NEWFALSE
            self.push(False)
        elif op == 0x4B:  # BININT1
            self.push(self.take(1)[0])
        elif op == 0x4D:  # BININT2
            self.push(self.unpack("<H"))
        elif op == 0x4A:  # BININT
            self.push(self.unpack("<i"))
        elif op == 0x8A:  # LONG1
            n = self.take(1)[0]
            self.push(int.from_bytes(self.take(n), "little", signed=True))
        elif op == 0x47:  # BINFLOAT
            (f,) = struct.unpack(">d", self.take(8))
            self.push(f)

    def text(self, op: int) -> None:
        """A str or bytes of the length that comes first."""
        if op == 0x8C:  # SHORT_BINUNICODE
            self.push(self.take(self.take(1)[0]).decode("utf-8", "replace"))
        elif op == 0x58:  # BINUNICODE
            self.push(self.take(self.unpack("<I")).decode("utf-8", "replace"))
        elif op == 0x8D:  # BINUNICODE8
            self.push(self.take(self.unpack("<Q")).decode("utf-8", "replace"))
        elif op == 0x43:  # SHORT_BINBYTES
            self.push(self.take(self.take(1)[0]))
        elif op == 0x42:  # BINBYTES
            self.push(self.take(self.unpack("<I")))

    def memo_step(self, op: int) -> None:
        stack, memo = self.stack, self.memo
        if op == 0x94:  # MEMOIZE
            if not stack or len(memo) >= MAX_MEMO:
                raise Refused("memo")
            memo[len(memo)] = stack[-1]
        elif op in (0x71, 0x72):  # BINPUT, LONG_BINPUT
            key = self.take(1)[0] if op == 0x71 else self.unpack("<I")
            if not stack or len(memo) >= MAX_MEMO:
                raise Refused("memo")
            memo[key] = stack[-1]
        elif op in (0x68, 0x6A):  # BINGET, LONG_BINGET
            key = self.take(1)[0] if op == 0x68 else self.unpack("<I")
            if key not in memo:
                raise Refused(f"memo key {key} was never put")
            if isinstance(memo[key], (list, dict)):
                self.shared.add(id(memo[key]))
            self.push(memo[key])

    def build(self, op: int) -> None:
        """A tuple, list or dict of the items on the stack."""
        stack = self.stack
        if op in (0x85, 0x86, 0x87):  # TUPLE1, TUPLE2, TUPLE3
            n = op - 0x84
            if len(stack) < n or any(v is _MARK for v in stack[-n:]):
                raise Refused("tuple of missing items")
            got = tuple(stack[-n:])
            del stack[-n:]
            stack.append(self.built(got, got))
        elif op == 0x74:  # TUPLE
            got = tuple(self.pop_mark())
            stack.append(self.built(got, got))
        elif op == 0x6C:  # LIST
            vals = self.pop_mark()
            stack.append(self.built(vals, vals))
        elif op == 0x64:  # DICT
            vals = self.pop_mark()
            stack.append(_pairs(self.built({}, vals), vals))

    def add(self, op: int) -> None:
        """Items added to the list or dict below them."""
        stack = self.stack
        if op == 0x61:  # APPEND
            if len(stack) < 2:
                raise Refused("no list to add to")
            v = stack.pop()
            self.grow(_target(stack, list), [v])
            stack[-1].append(v)
        elif op == 0x65:  # APPENDS
            vals = self.pop_mark()
            self.grow(_target(stack, list), vals)
            stack[-1].extend(vals)
        elif op == 0x73:  # SETITEM
            if len(stack) < 3:
                raise Refused("no dict to add to")
            v, k = stack.pop(), stack.pop()
            self.grow(_target(stack, dict), [k, v])
            _pairs(stack[-1], [k, v])
        elif op == 0x75:  # SETITEMS
            vals = self.pop_mark()
            self.grow(_target(stack, dict), vals)
            _pairs(stack[-1], vals)


_STEPS: dict[int, Callable[[_Interpreter, int], None]] = {
    **dict.fromkeys((0x80, 0x95, 0x28), _Interpreter.framing),
    **dict.fromkeys((0x7D, 0x5D, 0x29, 0x4E, 0x88, 0x89, 0x4B, 0x4D, 0x4A, 0x8A, 0x47), _Interpreter.scalar),
    **dict.fromkeys((0x8C, 0x58, 0x8D, 0x43, 0x42), _Interpreter.text),
    **dict.fromkeys((0x94, 0x71, 0x72, 0x68, 0x6A), _Interpreter.memo_step),
    **dict.fromkeys((0x85, 0x86, 0x87, 0x74, 0x6C, 0x64), _Interpreter.build),
    **dict.fromkeys((0x61, 0x65, 0x73, 0x75), _Interpreter.add),
}


def _target(stack: list[Any], kind: type) -> Any:
    if not stack or not isinstance(stack[-1], kind):
        raise Refused(f"no {kind.__name__} to add to")
    return stack[-1]


def _pairs(d: dict[Any, Any], vals: list[Any]) -> dict[Any, Any]:
    if len(vals) % 2:
        raise Refused("odd number of dict items")
    for i in range(0, len(vals), 2):
        k = vals[i]
        if not isinstance(k, (str, int, bool, type(None), tuple)) or (isinstance(k, tuple) and not _hashable(k)):
            raise Refused("a dict key that is not a scalar")
        d[k] = vals[i + 1]
    return d


def _hashable(key: tuple[Any, ...]) -> bool:
    """A tuple key of scalars and such tuples (its depth already bounded by load_plain)."""
    return all(isinstance(k, (str, int, bool, type(None), float, bytes)) or (isinstance(k, tuple) and _hashable(k))
               for k in key)  # fmt: skip


_RANK = re.compile(r"([0-9]{1,7})$", re.ASCII)


def read_dump(path: str, data: bytes) -> FlightDump:
    """The typed record of one dump; a dump that is refused says why (and holds nothing else)."""
    m = _RANK.search(path)
    rank = read_int(m.group(1)) if m else None
    try:
        doc = load_plain(data)
    except Refused as exc:
        return FlightDump(path, rank, "", (), {}, refused=str(exc))
    if not isinstance(doc, dict):
        return FlightDump(path, rank, "", (), {}, refused="not a dict")
    out = []
    for e in doc.get("entries") or []:
        if not isinstance(e, dict):
            continue
        seq = e.get("collective_seq_id")
        pg = e.get("process_group")
        if not isinstance(seq, int) or isinstance(seq, bool):
            continue
        pg_id = str(pg[0]) if isinstance(pg, (tuple, list)) and pg else str(e.get("pg_id", ""))
        sizes = e.get("input_sizes")
        out.append(
            Collective(
                pg=pg_id[:64],
                seq=seq,
                op=str(e.get("profiling_name", "?"))[:80],
                sizes=str(sizes)[:120] if sizes is not None else "?",
                state=str(e.get("state", "?"))[:20],
                retired=e.get("retired") is True,
            )
        )
    raw_status = doc.get("pg_status")
    status: dict[Any, Any] = raw_status if isinstance(raw_status, dict) else {}
    done = {
        str(k)[:64]: v["last_completed_collective"]
        for k, v in status.items()
        if isinstance(v, dict) and isinstance(v.get("last_completed_collective"), int)
    }
    return FlightDump(path, rank, str(doc.get("version", ""))[:20], tuple(out), done)


_HEADER = re.compile(r"@fr (?:([0-9]{1,12}|-) )?(/.*)", re.ASCII)


#: Why a dump the section's end cut through was not read.
CUT_SHORT = "cut short: the probe's output ended inside it (its deadline or the section's cap)"


def parse_fr_section(text: str, cut: bool = False) -> tuple[FlightDump, ...]:
    """`@fr MTIME PATH` lines, each followed by the dump's base64 lines. `cut`: the section did not
    reach its end; its last dump, when it does not read whole, was cut there (not written so)."""
    dumps: list[FlightDump] = []
    path: str | None = None
    mtime: int | None = None
    chunks: list[str] = []

    def flush(last: bool = False) -> None:
        if path is None:
            return
        try:
            data = base64.b64decode("".join(chunks), validate=True)
        except (binascii.Error, ValueError):
            data = None
        dump = read_dump(path, data) if data is not None else None
        if cut and last and (dump is None or dump.refused):
            dumps.append(FlightDump(path, None, "", (), {}, refused=CUT_SHORT, mtime=mtime, cut=True))
        elif dump is None:
            dumps.append(FlightDump(path, None, "", (), {}, refused="not base64", mtime=mtime))
        else:
            dumps.append(dataclasses.replace(dump, mtime=mtime))

    for line in text.split("\n"):
        if line.startswith("@fr-cut /"):  # the probe's bound on names looked at: the rest not read
            flush()
            path, chunks = None, []
            where = line[len("@fr-cut ") :][:4096]
            dumps.append(FlightDump(where, None, "", (), {}, refused=f"more files named like dumps under {where} than the "
                                    "probe looks at (64): the rest were not read"))  # fmt: skip
        elif line.startswith("@fr "):
            flush()
            m = _HEADER.fullmatch(line[:4200])
            path, chunks = (m.group(2)[:4096], []) if m else (None, [])
            mtime = read_int(m.group(1)) if m and m.group(1) not in (None, "-") else None
        elif path is not None and line and not line.startswith("@"):
            chunks.append(line.strip())
    flush(last=True)
    return tuple(dumps[:16])
