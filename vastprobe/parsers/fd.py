"""`ls -ln /proc/*/fd` output: per process its fd links.

    /proc/123/fd:
    lr-x------ 1 0 0 64 Dec  2 16:25 0 -> /dev/null
    l-wx------ 1 0 0 64 Dec  2 16:25 1 -> pipe:[2787]

The link's own mode tells how the fd was opened: r-x read, -wx write, rwx both. An epoll waiter's
epoll fds are followed by their interest lists (`@epoll EPFD tfd: N events: HEX ...`, from fdinfo). Since format 2 the
probe also lists each process's `ns/net` link, and uses GNU `ls -b` where it can: link targets come
C-escaped (`\n`, `\\ `, `\\`, octal), so a path holding a newline cannot pass for another line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vastprobe.model import EpollWatch, FdEntry, FdMode
from vastprobe.untrusted.numbers import read_digits, read_hex, read_int

_HEADER = re.compile(r"^/proc/([0-9]{1,10})/fd:$", re.ASCII)
_ENTRY = re.compile(r"^l([r-])([w-])[x-]\S* +[0-9]+ +\S+ +\S+ +[0-9]+ +.{6,40}? ([0-9]{1,10}) -> (.*)$", re.ASCII)
_LINK_PID = re.compile(r"/proc/([0-9]{1,10})/fd/", re.ASCII)
_DENIED_DIR = re.compile(r"^ls: (?:cannot open directory )?'?/proc/([0-9]{1,10})/fd'?: (.*)$", re.ASCII)
_EPOLL = re.compile(r"^@epoll ([0-9]{1,10}) tfd: *([0-9]{1,10}) events: *([0-9a-fA-F]{1,8})\b", re.ASCII)
_OCTAL_BYTE = {f"{n:03o}": n & 0xFF for n in range(0o1000)}
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v", " ": b" "}


def unescape_ls(text: str) -> str:
    """Undo GNU ls -b (quoting style "escape"): the exact name, undecodable bytes as U+FFFD."""
    if "\\" not in text:
        return text
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 == n:
            out += c.encode("utf-8", "surrogateescape" if "\udc80" <= c <= "\udcff" else "replace")
            i += 1
            continue
        e = text[i + 1]
        byte = _OCTAL_BYTE.get(text[i + 1 : i + 4])
        if byte is not None:
            out.append(byte)
            i += 4
            continue
        out += _ESCAPES.get(e, e.encode("utf-8", "replace"))
        i += 2
    return out.decode("utf-8", "replace")


@dataclass
class FdTable:
    fds: dict[int, list[FdEntry]] = field(default_factory=dict)
    denied: dict[int, str] = field(default_factory=dict)
    truncated: set[int] = field(default_factory=set)
    unreadable_links: dict[int, int] = field(default_factory=dict)
    epoll: dict[int, list[EpollWatch]] = field(default_factory=dict)  # epoll waiters' interest lists


#: (read, write) letters of the link's own mode -> how the fd was opened
_MODES: dict[tuple[str, str], FdMode] = {("r", "w"): "rw", ("r", "-"): "r", ("-", "w"): "w", ("-", "-"): "?"}


def parse_fd_section(text: str, escaped: bool = False) -> FdTable:
    table = FdTable()
    current: int | None = None
    for raw in text.split("\n"):
        line = raw[:8192]
        if current is not None and line[:1] == "l" and line[:4] != "ls: ":  # most lines: an fd link
            e = _ENTRY.match(line)
            if e:
                table.fds[current].append(
                    FdEntry(
                        fd=read_digits(e.group(3), 10) or 0,
                        target=unescape_ls(e.group(4)) if escaped else e.group(4),
                        mode=_MODES[(e[1], e[2])],
                    )
                )
            continue
        h = _HEADER.match(line)
        if h:
            current = read_int(h.group(1)) or 0
            table.fds.setdefault(current, [])
            continue
        d = _DENIED_DIR.match(line)
        if d:
            pid = read_int(d.group(1)) or 0
            table.denied[pid] = d.group(2)
            continue
        if line.startswith("ls: cannot read symbolic link"):
            m = _LINK_PID.search(line)
            if m:
                pid = read_int(m.group(1)) or 0
                table.unreadable_links[pid] = table.unreadable_links.get(pid, 0) + 1
            continue
        if current is None:
            continue
        if line == "@@more":
            table.truncated.add(current)
            continue
        if line.startswith("@epoll "):
            m = _EPOLL.match(line)
            if m:
                table.epoll.setdefault(current, []).append(
                    EpollWatch(read_digits(m[1], 10) or 0, read_digits(m[2], 10) or 0, read_hex(m[3]) or 0)
                )
            continue
    for pid, n in table.unreadable_links.items():
        if not table.fds.get(pid):
            table.denied.setdefault(pid, f"{n} fd links not readable (permission denied)")
    return table
