"""Kernel-log lines about OOM kills, NVIDIA Xid and NVSwitch SXid errors, lost GPUs and hung tasks.

The probe keeps only matching lines (plus `@@source`, `@@err`, `@@exit`, `@@lines` markers). A
reader whose `@@exit` says the probe's timeout killed it (124, 137) did not finish: the log is not
read (in time), whatever lines it printed first, so no rule takes the lines' silence for "no OOM
kill" (issue 32). Every line is first stripped of what the log reader put in front of the kernel's
text (parsers/kmsg_prefix.py), then read:

    [ 1002.442956] msg                                   dmesg (seconds since boot)
    [Sun Feb 23 16:24:18 2025] msg                       dmesg -T / --ctime (local time, no zone)
    2025-01-21T04:41:44,283302+00:00 msg                 dmesg --time-format iso (zone given)
    kern  :warn  : 2025-01-21T04:41:44,283302+00:00 msg  dmesg --decode
    6,3964,206764307,-;msg                               /dev/kmsg records (microseconds since boot)
    Mar  2 17:35:10 host kernel: [2858609.598568] msg    kern.log / messages (syslog; year inferred)
    [ 1234.567890] host kernel: msg                      journalctl -o short-monotonic

OOM kills, oldest to newest (docs/rules/oom-killed-child.md). The process name is what stands
between the first `(` after the pid and the `)` that precedes the next field, so a name that holds
spaces, brackets or parentheses (`((sd-pam))`, `runc:[2:INIT]`) comes out whole:
    Out of memory: Killed process 1234 (java).                                             (2.6)
    Killed process 2236, UID 0, (java) total-vm:3424kB, anon-rss:1kB, file-rss:0kB         (RHEL 6)
    Killed process 5100 (fio) total-vm:6966656kB, anon-rss:2779756kB, file-rss:0kB, ...    (3.x-5.2)
    Killed process 45465 (tail), UID 0, total-vm:7582132kB, anon-rss:7420324kB, ...         (RHEL 7)
    Memory cgroup out of memory: Killed process 2115 (python3) total-vm:..., UID:0 pgtables:148kB oom_score_adj:0
    oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),...,oom_memcg=/a,task_memcg=/a/b,task=python3,pid=2115,uid=0
    oom_reaper: reaped process 2115 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB
    Task in /a killed as a result of limit of /b                                           (<= 4.18)
NVIDIA:
    NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, ...
    NVRM: Xid (0000:03:00): 14, Channel 00000001                                  (no PCI:, no pid)
    nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error
    NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.                            (no Xid line)
    NVRM: The NVIDIA GPU 0000:b3:00.0 / (PCI ID: ...) installed in this system has / NVRM: fallen off
    the bus and is not responding to commands.                                  (three lines, no Xid)

Every pattern is anchored at a position found with `str.find`, or is a bounded run of one
character class: lines are cut to MAX_LINE first, and matching stays linear in the line's length.
"""

from __future__ import annotations

import dataclasses
import re

from vastprobe.model import KernelEvent, KernelLog
from vastprobe.parsers.kmsg_message import kernel_message
from vastprobe.parsers.kmsg_prefix import MAX_LINE, strip_prefix
from vastprobe.untrusted.numbers import read_digits, read_float, read_hex, read_int

# ---------------------------------------------------------------- messages
_DIGITS = re.compile(r"\d{1,20}", re.ASCII)
_ANON = re.compile(r"anon-rss:(\d{1,20})kB", re.ASCII)
_FILE = re.compile(r"file-rss:(\d{1,20})kB", re.ASCII)
#: A kill line as kernels since 5.x word it, whole, with a name free of parentheses: read in one
#: match (what _killed's general path reads from it, field for field; the test holds them equal).
_KILL_LINE = re.compile(
    r"(\d{1,20}) \(([^()]*)\) total-vm:(\d{1,20})kB, anon-rss:(\d{1,20})kB, file-rss:(\d{1,20})kB, "
    r"shmem-rss:\d{1,20}kB, UID:(\d{1,10}) pgtables:\d{1,20}kB oom_score_adj:-?\d{1,6}",
    re.ASCII,
)
#: The three lines of a memory cgroup's OOM kill that make most of a kernel log read by dmesg, whole,
#: stamp and all: the kill (as _KILL_LINE has it), the cgroup's usage and who invoked the killer
#: (a name of word characters only: no logger's head, task line or second marker can hide in it).
#: Read in one match each (what strip_prefix, kernel_message and _event read from them, field for
#: field; tests/parsers/test_kmsg_fast_paths.py holds them equal); a stamp with no space ("[12345.6]",
#: a host up for more than 2.8 hours) too. Every other line takes the general path.
#: dmesg's stamp before the message, with or without its padding: the two fast paths' first group
_DMESG_STAMP = r"\[ {0,12}(\d{1,12}\.\d{1,9})\] "
_OOM_LINE = re.compile(
    _DMESG_STAMP
    + r"(?:(Memory cgroup out of memory: |Out of memory: )?Killed process "
    + _KILL_LINE.pattern
    + r"|memory: usage (\d{1,20})kB, limit (\d{1,20})kB(?:,[^\n]*)?"
    + r"|([A-Za-z0-9_-]{1,15}) invoked oom-killer: [^\n]*)",
    re.ASCII,
)
#: The stamp of a memory cgroup's OOM summary line ("oom-kill:constraint=…"), the fourth line of a
#: kill: its fields are _summary's, its prefix read here in one match where the line holds no
#: " kernel" (no logger's head can hide in it then; kernel_message would strip one).
_SUMMARY_STAMP = re.compile(_DMESG_STAMP + r"oom-kill:(?=constraint=)", re.ASCII)
#: The sizes of a kill's line in one pass: the first of each, as a search for each would find
#: (no match can hold the start of another: each is a key, digits and "kB").
_SIZES = re.compile(r"(total-vm|vsz|anon-rss|file-rss):(\d{1,20})kB", re.ASCII)
_UID_NEW = re.compile(r"UID:(\d{1,10})", re.ASCII)
_UID_RHEL7 = re.compile(r", UID (\d{1,10}),", re.ASCII)
_USAGE = re.compile(r"memory: usage (\d{1,20})kB, limit (\d{1,20})kB", re.ASCII)
_TASK_IN = re.compile(r"Task in (\S{1,1024}) killed as a result of limit of (\S{1,1024})")
_XID_NUM = re.compile(r"(\d{1,6}),? ?", re.ASCII)
_SEVERITY = re.compile(r"\b(Fatal|Non-fatal|Nonfatal)\b")
_BDF = re.compile(
    r"PCI:([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})"
    r"|(?:([0-9A-Fa-f]{4,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.[0-7]"
)
_ERR_WORDS = re.compile(r"not permitted|denied|failed|No journal files|No entries", re.I)

# Where a process name ends: the `)` before the next field. The last one wins (see _killed).
_NAME_ENDS = (") total-vm:", "), UID ", ") vsz:", ") score ", ") is already exiting")
_GPU_ANNOUNCE = "NVRM: The NVIDIA GPU "  # the first of the three lines of a lost GPU without an Xid


# ---------------------------------------------------------------- events


def _pci(domain: str | None, bus: str, dev: str) -> str:
    d = read_hex(domain) if domain else 0
    return f"{d or 0:04x}:{bus.lower()}:{dev.lower()}"


def _find_pci(text: str) -> str | None:
    m = _BDF.search(text)
    if m is None:
        return None
    if m.group(1) is not None:
        return _pci(m.group(1), m.group(2), m.group(3))
    return _pci(m.group(4), m.group(5), m.group(6))


def _kb(pattern: re.Pattern[str], text: str) -> int | None:
    m = pattern.search(text)
    return read_int(m.group(1)) if m else None


def _name_and_tail(rest: str) -> tuple[str, str]:
    """`rest` starts right after the `(` that opens the name."""
    end = max(map(rest.rfind, _NAME_ENDS))
    if end < 0:
        end = rest.rfind(")")
    if end < 0:
        return rest, ""
    return rest[:end], rest[end:]


def _kill_line_fields(detail: str, pid: str, comm: str, vm: str, anon: str, file: str, uid: str) -> dict[str, object]:
    """A kill line's fields from _KILL_LINE's groups (bounded ASCII digits, and the name)."""
    return {
        "kind": "oom-kill", "pid": read_digits(pid), "detail": detail, "uid": read_digits(uid), "comm": comm,
        "total_vm_kb": read_digits(vm), "anon_rss_kb": read_digits(anon), "file_rss_kb": read_digits(file),
    }  # fmt: skip


def _killed(msg: str, at: int) -> dict[str, object] | None:
    detail = "memcg" if "Memory cgroup out of memory" in msg[:at] else "global"
    if whole := _KILL_LINE.fullmatch(msg, at):
        return _kill_line_fields(detail, *whole.groups())
    m = _DIGITS.match(msg, at)
    if m is None:
        return None
    out: dict[str, object] = {"kind": "oom-kill", "pid": read_int(m.group())}
    out["detail"] = detail
    k = m.end()
    if msg.startswith(", UID ", k):  # RHEL 6: the uid, then the name
        u = _DIGITS.match(msg, k + 6)
        if u is None or not msg.startswith(", (", u.end()):
            return out
        out["uid"] = read_int(u.group())
        name, tail = _name_and_tail(msg[u.end() + 3 :])
    elif msg.startswith(" (", k):
        name, tail = _name_and_tail(msg[k + 2 :])
        if (uid := _kb(_UID_NEW, tail)) is not None or (uid := _kb(_UID_RHEL7, tail)) is not None:
            out["uid"] = uid
    else:
        return out
    out["comm"] = name
    sizes: dict[str, int | None] = {}
    for key, digits in _SIZES.findall(tail):
        sizes.setdefault(key, read_digits(digits))
    out["total_vm_kb"] = sizes.get("total-vm") if "total-vm:" in tail else sizes.get("vsz")
    out["anon_rss_kb"] = sizes.get("anon-rss")
    out["file_rss_kb"] = sizes.get("file-rss")
    return out


def _summary(text: str) -> dict[str, object]:
    """`oom-kill:` line (4.19+), read from the end: a task name or cgroup path may hold commas."""
    out: dict[str, object] = {"kind": "oom-summary"}
    if text.startswith("constraint="):
        c = text.find(",")
        out["constraint"] = text[11:c] if c >= 0 else text[11:]
    u = text.rfind(",uid=")
    p = text.rfind(",pid=", 0, u if u >= 0 else len(text))
    if p < 0:
        return out  # a cut line: the constraint is all there is
    out["pid"] = read_int(text[p + 5 : u if u >= 0 else None])
    if u >= 0:
        out["uid"] = read_int(text[u + 5 :])
    t = text.rfind(",task=", 0, p)
    if t >= 0:
        out["comm"] = text[t + 6 : p]
    tm = text.rfind(",task_memcg=", 0, t if t >= 0 else p)
    if tm >= 0:
        out["task_memcg"] = text[tm + 12 : t if t >= 0 else p]
    om = text.find(",oom_memcg=", 0, tm if tm >= 0 else p)
    if om >= 0:
        end = tm if tm >= 0 else text.find(",", om + 11)
        out["memcg"] = text[om + 11 : end if end >= 0 else None]
    return out


def _reaper(text: str) -> dict[str, object] | None:
    if text.startswith("reaped process "):
        m = _DIGITS.match(text, 15)
        if m is None or not text.startswith(" (", m.end()):
            return None
        rest = text[m.end() + 2 :]
        end = rest.rfind("), now ")
        if end < 0:
            end = rest.rfind(")")
        return {
            "kind": "oom-reaped",
            "pid": read_int(m.group()),
            "comm": rest[:end] if end >= 0 else rest,
            "anon_rss_kb": _kb(_ANON, rest[end:]) if end >= 0 else None,
            "file_rss_kb": _kb(_FILE, rest[end:]) if end >= 0 else None,
        }
    if text.startswith("unable to reap pid:"):
        m = _DIGITS.match(text, 19)
        if m is None:
            return None
        rest = text[m.end() :].strip()
        comm = rest[1:-1] if rest.startswith("(") and rest.endswith(")") else None
        return {"kind": "oom-reaped", "pid": read_int(m.group()), "comm": comm, "detail": "unable to reap"}
    return None


def _xid(msg: str, at: int) -> dict[str, object] | None:
    close = msg.find("): ", at)
    if close < 0:
        return None
    dev = msg[at:close]
    num = _XID_NUM.match(msg, close + 3)
    if num is None:
        return None
    pci = _find_pci(dev if dev.startswith("PCI:") else "PCI:" + dev)
    rest = msg[num.end() :]
    pid: int | None = None
    name: str | None = None
    if rest.startswith("pid="):
        c = rest.find(",")
        pid = read_int(rest[4:c] if c >= 0 else rest[4:])  # "'<unknown>'" is no pid
        rest = rest[c + 1 :].lstrip() if c >= 0 else ""
        if rest.startswith("name="):
            c = rest.find(", ")
            name = rest[5:c] if c >= 0 else rest[5:]
            rest = rest[c + 2 :] if c >= 0 else ""
            if name == "<unknown>":
                name = None
    sev = _SEVERITY.search(rest)
    return {
        "kind": "xid",
        "pci": pci,
        "xid": read_int(num.group(1)),
        "pid": pid,
        "comm": name,
        "detail": rest.strip(),
        "severity": sev.group(1) if sev else None,
    }


def _sxid(msg: str, at: int) -> dict[str, object] | None:
    """`nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 ...`"""
    close = msg.find("): ", at)
    if close < 0:
        return None
    num = _XID_NUM.match(msg, close + 3)
    if num is None:
        return None
    head = msg[: at - 6].rstrip(": ")
    rest = msg[num.end() :].strip()
    word = rest.split(",", 1)[0].strip()
    return {
        "kind": "sxid",
        "device": head.rsplit(" ", 1)[-1] or None,
        "pci": _find_pci(msg[at:close]),
        "xid": read_int(num.group(1)),
        "severity": word if word in ("Fatal", "Non-fatal") else None,
        "detail": rest,
    }


def _hung(msg: str, at: int) -> dict[str, object] | None:
    end = msg.find(" blocked for more than ", at)
    if end < 0:
        return None
    who = msg[at + 11 : end]
    c = who.rfind(":")
    if c < 0:
        return None
    secs = _DIGITS.match(msg, end + 23)
    return {
        "kind": "hung-task",
        "comm": who[:c],
        "pid": read_int(who[c + 1 :]),
        "detail": secs.group() if secs else None,
    }


#: Every text _event looks for: a line holding none of them is no event, whatever its prefix says
_EVENT_WORDS = (
    "Killed process ", "oom-kill:", "oom_reaper: ", " invoked oom-killer:", "memory: usage ", "Task in ",
    "NVRM: Xid (", "SXid (", "fallen off the bus", "GPU is lost", "INFO: task ",
)  # fmt: skip


_EVENT_TEXT = re.compile("|".join(re.escape(w) for w in _EVENT_WORDS))


#: What may stand before "Killed process" in the kernel's own OOM line: "Out of memory: ", "Memory
#: cgroup out of memory: ", "Out of memory (oom_kill_allocating_task): "
_KILLED_HEAD = re.compile(r"(?:(?:Memory cgroup )?[Oo]ut of memory(?: \([a-z_]+\))?: )?")
#: The NVSwitch driver's device name before its SXid: "nvidia-nvswitch3: "
_SXID_HEAD = re.compile(r"nvidia-nvswitch[0-9]{1,3}: ")
#: The longest name a task has (TASK_COMM_LEN less its NUL), which "NAME invoked oom-killer:" opens with
COMM_MAX = 15


def _event(msg: str) -> dict[str, object] | None:
    """Each marker where the kernel puts it, at the start of its message (after the device or the
    OOM head it comes with), never within: a tenant has the kernel log text of its own making (tmpfs
    logs an unknown mount option verbatim, "Unknown parameter 'NVRM: Xid (…): 79'", and a segfault
    line opens with the task's name, "GPU is lost[812]: segfault at …"), which made a host with no
    fault STALLED (found by a helper)."""
    found = kernel_message(msg)
    if found is None:
        return None
    msg = found
    if 0 < (i := msg.find(" invoked oom-killer:")) <= COMM_MAX:  # first: the task's name opens it
        return {"kind": "oom-invoked", "comm": msg[:i].strip()}
    if (i := msg.find("Killed process ")) >= 0 and _KILLED_HEAD.fullmatch(msg, 0, i):
        return _killed(msg, i + 15)
    if msg.startswith("oom-kill:"):
        return _summary(msg[9:])
    if msg.startswith("oom_reaper: "):
        return _reaper(msg[12:])
    if msg.startswith("memory: usage ") and (u := _USAGE.match(msg)):
        return {"kind": "memcg-usage", "usage_kb": read_int(u.group(1)), "limit_kb": read_int(u.group(2))}
    if msg.startswith("Task in ") and (t := _TASK_IN.match(msg)):
        return {"kind": "oom-summary", "task_memcg": t.group(1), "memcg": t.group(2)}
    if msg.startswith("NVRM: Xid ("):
        return _xid(msg, 11)
    if (i := msg.find("SXid (")) > 0 and _SXID_HEAD.fullmatch(msg, 0, i):
        return _sxid(msg, i + 6)
    if msg.startswith("NVRM: ") and ((i := msg.find("fallen off the bus")) >= 0 or (i := msg.find("GPU is lost")) >= 0):
        return {"kind": "gpu-lost", "pci": _find_pci(msg[:i]), "detail": msg.strip()}
    if msg.startswith("INFO: task "):
        return _hung(msg, 0)
    return None


def _fields(line: str, btime: int | None, now: float | None) -> dict[str, object] | None:
    """One line's event as KernelEvent's fields, or None. The events of a log are built as fields,
    completed (_enrich) and made KernelEvents once (_events): replacing a frozen dataclass's fields
    one event at a time cost more than reading the line."""
    if len(line) <= MAX_LINE:
        if oom := _OOM_LINE.fullmatch(line):
            return _oom_fields(oom, line, btime)
        if (stamp := _SUMMARY_STAMP.match(line)) and " kernel" not in line:
            return _stamped(_summary(line[stamp.end() :]), line, read_float(stamp[1]), btime)
    if _EVENT_TEXT.search(line) is None:  # most of a kernel log: skip its prefix's clocks
        return None
    msg, uptime, wall, local = strip_prefix(line, now)
    fields = _event(msg)
    if fields is None:
        return None
    if wall is None and uptime is not None and btime is not None:
        wall = btime + uptime
    fields["line"] = line[:MAX_LINE]
    fields["uptime"] = uptime
    fields["wall_time"] = wall
    fields["local_time"] = local
    return fields


def _oom_fields(m: re.Match[str], line: str, btime: int | None) -> dict[str, object]:
    """The fields of a line _OOM_LINE read, as _fields makes them."""
    stamp, head, pid, comm, vm, anon, file, uid, usage, limit, invoker = m.groups()
    fields: dict[str, object]
    if invoker is not None:
        fields = {"kind": "oom-invoked", "comm": invoker}
    elif usage is not None:
        fields = {"kind": "memcg-usage", "usage_kb": read_int(usage), "limit_kb": read_int(limit)}
    else:
        detail = "memcg" if head == "Memory cgroup out of memory: " else "global"
        fields = _kill_line_fields(detail, pid, comm, vm, anon, file, uid)
    return _stamped(fields, line, read_float(stamp), btime)


def _stamped(fields: dict[str, object], line: str, uptime: float | None, btime: int | None) -> dict[str, object]:
    """A fast path's fields with the line and its dmesg stamp (no wall or local time in it)."""
    fields["line"] = line
    fields["uptime"] = uptime
    fields["wall_time"] = btime + uptime if uptime is not None and btime is not None else None
    fields["local_time"] = None
    return fields


def parse_line(line: str, btime: int | None = None, now: float | None = None) -> KernelEvent | None:
    fields = _fields(line, btime, now)
    return None if fields is None else KernelEvent(**fields)  # type: ignore[arg-type]


def _parse_lines(lines: list[str], btime: int | None, now: float | None) -> list[dict[str, object]]:
    """Events in order, as fields; a lost GPU whose three-line message names its bus on the first
    line gets it."""
    out: list[dict[str, object]] = []
    announced: str | None = None
    for line in lines:
        if _GPU_ANNOUNCE in line and (i := line[:MAX_LINE].find(_GPU_ANNOUNCE)) >= 0:
            announced = _find_pci(line[i:MAX_LINE])
            continue
        ev = _fields(line, btime, now)
        if ev is None:
            continue
        if ev["kind"] == "gpu-lost" and ev.get("pci") is None and announced is not None:
            ev["pci"] = announced
        announced = None
        out.append(ev)
    return out


def _enrich(events: list[dict[str, object]]) -> list[dict[str, object]]:
    """Fold the summary and memcg usage lines into the kill they introduce."""
    summary: dict[str, object] | None = None
    usage: dict[str, object] | None = None
    for ev in events:
        kind = ev["kind"]
        if kind == "oom-summary":
            summary = ev
        elif kind == "memcg-usage":
            usage = ev
        elif kind == "oom-kill":
            pid = ev.get("pid")
            if summary is not None and (summary.get("pid") in (None, pid)):
                ev["constraint"] = summary.get("constraint")
                ev["memcg"] = summary.get("memcg")
                ev["task_memcg"] = summary.get("task_memcg")
            if usage is not None:
                ev["usage_kb"] = usage.get("usage_kb")
                ev["limit_kb"] = usage.get("limit_kb")
            if (
                ev.get("uid") is None
                and summary is not None
                and summary.get("pid") == pid
                and summary.get("uid") is not None
            ):
                ev["uid"] = summary["uid"]
            summary = usage = None
    return events


#: KernelEvent's defaults, for _event_of.
_EVENT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(KernelEvent) if f.default is not dataclasses.MISSING}


def _event_of(fields: dict[str, object]) -> KernelEvent:
    """`KernelEvent(**fields)` without the frozen dataclass's `__init__`, which sets its 21 fields
    one `object.__setattr__` at a time: 2.2 us an event against 0.5, a fifth of the parse of a log of
    137 OOM lines. `_fields` writes every field without a default (tests/parsers/
    test_kmsg_fast_paths.py holds the two equal over every recorded log)."""
    event = object.__new__(KernelEvent)
    object.__setattr__(event, "__dict__", {**_EVENT_DEFAULTS, **fields})
    return event


def _events(fields: list[dict[str, object]]) -> tuple[KernelEvent, ...]:
    return tuple(map(_event_of, fields))


def parse_kernel_lines(text: str, btime: int | None = None, now: float | None = None) -> tuple[KernelEvent, ...]:
    """Events from plain log text (a saved dmesg, journal or kern.log excerpt)."""
    return _events(_enrich(_parse_lines([x for x in text.split("\n") if x], btime, now)))


#: The probe's bound on each kernel-log reader (script.sh: `tmo 10 dmesg`, journalctl, tail).
READER_TIMEOUT_S = 10
#: Exit statuses of a reader the probe's `timeout` ended: 124 (GNU timeout's own "timed out"),
#: 128 + 9 (`timeout -s KILL`, GNU and BusyBox), 128 + 15 (a TERM from a timeout without -s).
TIMED_OUT = frozenset({124, 137, 143})


def _unfinished(source: str, rc: int | None) -> str | None:
    """Why the reader's output is not the whole log, from its `@@exit` status; None when it
    finished (any status of its own: an error says so in `@@err`) or the probe gave no status
    (older probes; a reader cut at the probe's byte cap)."""
    if rc is None or (rc not in TIMED_OUT and rc < 128):
        return None
    if rc in TIMED_OUT:
        how = (
            f"not read in time (timed out: still running after the probe's {READER_TIMEOUT_S} s and killed, exit {rc})"
        )
    else:
        how = f"not read to its end (killed by signal {rc - 128})"
    return f"{source}: {how}; an OOM kill or Xid it holds could not be checked"


def parse_kmsg_sections(
    primary: str | None, fallback: str | None, btime: int | None, now: float | None = None
) -> KernelLog:
    """The kernel log as the probe saw it; a log that could not be read, or not in time, says so.
    A reader that timed out leaves the log not readable: what it printed before is kept as events
    (true as far as they go), never as a log read whole."""
    chunks: list[tuple[str, list[str], str | None, int, int | None]] = []
    for text in (primary, fallback):
        if not text:
            continue
        source, err, total, rc = "dmesg", None, 0, None
        lines: list[str] = []
        for line in text.split("\n"):
            if line[:2] != "@@":  # a log line: most of them
                if line:
                    lines.append(line)
            elif line.startswith("@@source "):
                if lines or err or total or rc is not None:
                    chunks.append((source, lines, err, total, rc))
                source, lines, err, total, rc = line[9:200], [], None, 0, None
            elif line.startswith("@@err "):
                err = line[6:MAX_LINE]
            elif line.startswith("@@exit "):
                rc = read_int(line[7:], 3)
            elif line.startswith("@@lines "):
                total = read_int(line[8:]) or 0
            elif line:
                lines.append(line)
        chunks.append((source, lines, err, total, rc))
    if not chunks:
        return KernelLog(
            readable=False, source="none", reason="the probe did not read the kernel log", total_lines=0, events=()
        )
    reasons = []
    partial: tuple[str, int, tuple[KernelEvent, ...]] | None = None  # the first reader that timed out
    for source, lines, err, total, rc in chunks:
        if (cut := _unfinished(source, rc)) is not None:
            reasons.append(cut)
            if partial is None:
                partial = (source, total, _events(_enrich(_parse_lines(lines, btime, now))))
            continue
        if err and total <= 3 and _ERR_WORDS.search(err):
            reasons.append(f"{source}: {err}")
            continue
        if total == 0:
            reasons.append(f"{source}: empty (cleared, or not readable in this container)")
            continue
        events = _events(_enrich(_parse_lines(lines, btime, now)))
        return KernelLog(readable=True, source=source, reason=None, total_lines=total, events=events)
    if partial is not None:
        source, total, events = partial
        return KernelLog(readable=False, source=source, reason="; ".join(reasons), total_lines=total, events=events)
    return KernelLog(readable=False, source=chunks[0][0], reason="; ".join(reasons), total_lines=0, events=())
