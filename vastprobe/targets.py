"""Targets and inventories: what `diagnose` and `sweep` are pointed at.

A target is `local`, `[user@]host[:port]`, `ssh://[user@]host[:port]`, `[v6addr]:port`, a bare
IPv6 address, or a container: `docker://NAME`, `podman://NAME`, `kubectl://[NS/]POD[/CONTAINER]`
(which transport reaches which form: transport/registry.py; here only the scheme is split off). Inventories are plain lists (ClusterShell-style node sets like `gpu[01-16]`, ssh_config
aliases) or `vastai show instances --raw` JSON. vast.ai fields are remote-ish data (ssh_host is
whatever the platform says): an instance whose fields are unusable becomes a `skipped` row with the
reason, never a crash. Nothing here imports asyncssh.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from vastprobe import jsonnumbers
from vastprobe.untrusted.numbers import read_int
from vastprobe.untrusted.secrets import redact_cut, redact_text

MAX_EXPANSION = 100_000
MAX_TARGET_CHARS = 1024
_RANGE = re.compile(r"\[([0-9,\-\s]{1,4096})\]")
_RANGE_NUMBER_DIGITS = 9
_FILE_SUFFIXES = (".txt", ".json", ".lst", ".list", ".hosts", ".csv", ".conf", ".yaml", ".yml", ".ini", ".inv")
_V6 = re.compile(r"^[0-9A-Fa-f:.]{2,45}(%[A-Za-z0-9_.\-]{1,32})?$")
_BAD_HOST_CHARS = frozenset("@/[]\\,'\"`$;|&<>(){}*?!#")
# what inet_aton takes for an IPv4 address: 1-4 parts, each decimal, octal (leading 0) or hex (0x)
_NUMERIC_HOST = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)(\.(0[xX][0-9a-fA-F]*|[0-9]+)){0,3}$")
_DOTTED_QUAD = re.compile(r"^(0|[1-9][0-9]{0,2})(\.(0|[1-9][0-9]{0,2})){3}$")


_RUN = re.compile(r"([0-9]+)")


def natural_key(name: str) -> list[tuple[int, str, str]]:
    """Target names in natural order (gpu2 before gpu10): numbers compared as numbers, by their
    length and then their digits: a host name can hold a run of 5,000 digits, which int() refuses."""
    return [(len(p.lstrip("0")), p.lstrip("0"), p) if i % 2 else (0, p, "") for i, p in enumerate(_RUN.split(name))]


class InventoryError(ValueError):
    pass


class TargetError(ValueError):
    pass


@dataclass(frozen=True)
class SshTarget:
    user: str | None
    host: str
    port: int | None

    def display(self) -> str:
        """`user@host:port` with IPv6 addresses in brackets, as OpenSSH writes them."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"{self.user}@{host}" if self.user else host
        return f"{text}:{self.port}" if self.port is not None else text


@dataclass(frozen=True)
class InventoryEntry:
    target: str
    skip: str | None = None  # why it is not probed (a vast.ai instance that is not running)
    labels: dict[str, str] = field(default_factory=dict)  # instance id, label: travel into the report


def _unsafe_char(ch: str) -> bool:
    return ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def text_problem(text: str, what: str = "target") -> str | None:
    """Why `text` cannot be a target or host name at all (empty, too long, not valid UTF-8, holds
    control, format/bidi or space characters), or None. Checked before the text reaches any output."""
    if not text:
        return f"empty {what}"
    if len(text) > MAX_TARGET_CHARS:
        return f"{what} longer than {MAX_TARGET_CHARS} characters"
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        return f"{what} is not valid UTF-8"
    if any(_unsafe_char(ch) for ch in text):
        return f"{what} holds control, format or space characters"
    return None


def host_problem(host: str) -> str | None:
    bad = text_problem(host, "host name")
    if bad:
        return bad
    if host.startswith("-"):
        return "host name starts with '-'"
    if any(ch in _BAD_HOST_CHARS for ch in host):
        return "host name holds characters a host name cannot have"
    if _NUMERIC_HOST.match(host) and not (_DOTTED_QUAD.match(host) and all(int(x) < 256 for x in host.split("."))):
        # the resolver reads "17244" as 0.0.67.92 and "010.0.0.1" as 8.0.0.1: an address nobody meant
        # (most often a second PID after --pid, which takes one)
        if host.isascii() and host.isdigit():
            return "a number, not a host; a second PID needs its own --pid"
        return "not an IPv4 address: want four decimal parts, 0-255, without leading zeros"
    return None


def port_number(text: str) -> int | None:
    """A port as written (spaces around it allowed): 1-65535, else None."""
    n = read_int(text, 5)
    return n if n is not None and 0 < n < 65536 else None


def typed_host(target: str) -> str:
    """The host a person types for a target: `user@host:port` -> host, `[::1]:22` -> ::1. Lenient:
    any text gives a word, for looking recorded targets up by host name."""
    t = target.rsplit("@", 1)[-1]
    if t.startswith("["):
        return t[1:].split("]", 1)[0]
    return t.rsplit(":", 1)[0] if t.count(":") == 1 else t


def _port(text: str, whole: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise TargetError(f"port {text[:20]!r} in {whole!r} is not a number (want 1-65535)")
    if not 0 < int(text) < 65536:
        raise TargetError(f"port out of range in {whole!r} (want 1-65535)")
    return int(text)


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]{0,31})://")


def split_scheme(text: str) -> tuple[str, str] | None:
    """`docker://gpu-job` -> ("docker", "gpu-job"): the scheme in lower case and the rest, or None
    when the text starts with no `SCHEME://`."""
    m = _SCHEME.match(text)
    return (m.group(1).lower(), text[m.end() :]) if m else None


def parse_target(text: str) -> SshTarget:
    """`[user@]host[:port]`, `ssh://[user@]host[:port]`, `[::1]:22`, `::1`. Raises TargetError."""
    bad = text_problem(text)
    if bad:
        raise TargetError(f"not a target: {bad}")
    rest = text
    scheme = split_scheme(text)
    if scheme is not None and scheme[0] != "ssh":
        raise TargetError(f"not an ssh target: {text!r} (a {scheme[0]}:// target)")
    if rest.lower().startswith("ssh://"):
        rest = rest[6:].rstrip("/")
        if not rest:
            raise TargetError(f"not a target: {text!r} (want ssh://[user@]host[:port])")
    user, at, hostport = rest.rpartition("@")
    if at and not user:
        raise TargetError(f"not a target: {text!r} (want [user@]host[:port])")
    port: int | None = None
    if hostport.startswith("["):
        inner, close, after = hostport[1:].partition("]")
        if not close or not inner:
            raise TargetError(f"not a target: {text!r} (an unclosed '[' in the host)")
        if after:
            if not after.startswith(":"):
                raise TargetError(f"not a target: {text!r} (want [host]:port)")
            port = _port(after[1:], text)
        host = inner
    elif hostport.count(":") >= 2 and _V6.match(hostport):  # a bare IPv6 address: no port
        host = hostport
    else:
        host, colon, port_text = hostport.partition(":")
        if colon:
            port = _port(port_text, text)
    if not host:
        raise TargetError(f"not a target: {text!r} (want [user@]host[:port])")
    bad = host_problem(host) if ":" not in host else (None if _V6.match(host) else "not an IPv6 address")
    if bad:
        raise TargetError(f"not a target: {text!r} ({bad})")
    return SshTarget(user or None, host, port)


def _range_values(spec: str, text: str) -> list[tuple[int, int, int]]:
    """`01-03,7` -> [(1, 3, 2), (7, 7, 0)]: (low, high, zero-pad width), checked, nothing expanded."""
    out = []
    for part in spec.replace(" ", "").split(","):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        hi = hi if dash else lo
        if not (0 < len(lo) <= _RANGE_NUMBER_DIGITS and 0 < len(hi) <= _RANGE_NUMBER_DIGITS):
            raise InventoryError(f"bad range [{spec}] in {text!r}")
        if not (lo.isascii() and lo.isdigit() and hi.isascii() and hi.isdigit()) or int(hi) < int(lo):
            raise InventoryError(f"bad range [{spec}] in {text!r}")
        out.append((int(lo), int(hi), len(lo) if lo.startswith("0") and len(lo) > 1 else 0))
    if not out:
        raise InventoryError(f"empty range [] in {text!r}")
    return out


def expansion_size(text: str) -> int:
    """How many targets `text` expands to, computed without expanding it."""
    total = 1
    for m in _RANGE.finditer(text):
        total *= sum(hi - lo + 1 for lo, hi, _ in _range_values(m.group(1), text))
        if total > MAX_EXPANSION:
            return total
    return total


def expand_ranges(text: str) -> list[str]:
    """`gpu[01-03]` -> gpu01 gpu02 gpu03 (zero padding kept); `10.0.0.[1-2]:2222`; `n[1-2,7]`;
    several brackets multiply out. Text without brackets is returned as is. The size is checked
    before anything is allocated: `gpu[0-99999999]` is refused at once."""
    n = expansion_size(text)
    if n > MAX_EXPANSION:
        raise InventoryError(f"{text!r} expands to more than {MAX_EXPANSION} targets")
    m = _RANGE.search(text)
    if not m:
        return [text]
    head, tail = text[: m.start()], text[m.end() :]
    out: list[str] = []
    for lo, hi, width in _range_values(m.group(1), text):
        for i in range(lo, hi + 1):
            out += expand_ranges(head + str(i).zfill(width) + tail)
    return out


def split_nodeset(text: str) -> list[str]:
    """Split a ClusterShell-style node list on commas and spaces outside brackets:
    `gpu[01-03,07],other a` -> ['gpu[01-03,07]', 'other', 'a']."""
    words: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if depth == 0 and (ch == "," or ch.isspace()):
            if cur:
                words.append("".join(cur))
                cur = []
            continue
        cur.append(ch)
    if cur:
        words.append("".join(cur))
    return words


def expand_nodeset(text: str) -> list[str]:
    """Every target a node-set argument names, in order (duplicates kept; see unique_entries)."""
    out: list[str] = []
    for word in split_nodeset(text):
        out += expand_ranges(word)
        if len(out) > MAX_EXPANSION:
            raise InventoryError(f"{text!r} expands to more than {MAX_EXPANSION} targets")
    return out


def parse_plain(text: str, check: Callable[[str], None] | None = None) -> list[InventoryEntry]:
    """`check`: raises InventoryError for a target its transport would refuse, said with its line
    (a port out of range was said without the file or line it came from)."""
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            words = line.split()
            if len(words) > 1:  # "host slots=8" (MPI), "host 22", a pasted ssh_config: none is two targets
                raise InventoryError(
                    f"one target (or node set) a line, not {len(words)} words: {line[:80]!r}; "
                    "write a port as host:port, several hosts as a,b or one a line"
                )
            for word in split_nodeset(words[0]):
                for t in expand_ranges(word):
                    bad = text_problem(t)
                    if bad:
                        raise InventoryError(f"{bad}: {t!r}")
                    if check is not None:
                        check(t)
                    out.append(InventoryEntry(t))
        except InventoryError as exc:
            raise InventoryError(f"line {n}: {exc}") from exc
        if len(out) > MAX_EXPANSION:
            raise InventoryError(f"line {n}: more than {MAX_EXPANSION} targets")
    return out


def _clean(value: Any, limit: int = 256) -> str:
    """A JSON string as plain text: lone surrogates (JSON `\\udc80`) replaced, length bounded."""
    text = str(value)[:limit]
    return text.encode("utf-8", "replace").decode("utf-8")


def _instance_id(inst: dict[str, Any]) -> str:
    v = inst.get("id")
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if isinstance(v, str):
        return "".join(ch for ch in v[:64] if ch.isascii() and (ch.isalnum() or ch in "._-"))
    return ""


def _port_field(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 < value < 65536 else None
    return port_number(value) if isinstance(value, str) else None


def vast_target(inst: dict[str, Any]) -> tuple[str | None, str | None]:
    """(address, None), or (None, why there is no usable address). As the official CLI builds it:
    the direct port when `ports["22/tcp"]` exists, else the proxy `ssh_host:ssh_port`, plus one for
    jupyter run types."""
    ports = inst.get("ports")
    direct = ports.get("22/tcp") if isinstance(ports, dict) else None
    ip = inst.get("public_ipaddr")
    problems = []
    if direct and ip:
        entry = direct[0] if isinstance(direct, list) and direct and isinstance(direct[0], dict) else {}
        host_port = _port_field(entry.get("HostPort"))
        ip_text = ip.strip() if isinstance(ip, str) else ""
        if host_port is None:
            problems.append(f"ports 22/tcp HostPort {_clean(entry.get('HostPort'), 40)!r} is not a port")
        elif host_problem(ip_text):
            problems.append(f"public_ipaddr {_clean(ip, 80)!r} is not a host ({host_problem(ip_text)})")
        else:
            return f"root@{ip_text}:{host_port}", None
    host, port_value = inst.get("ssh_host"), inst.get("ssh_port")
    if host or port_value:
        port = _port_field(port_value)
        host_text = host if isinstance(host, str) else ""
        if port is None:
            problems.append(f"ssh_port {_clean(port_value, 40)!r} is not a port")
        elif host_problem(host_text):
            problems.append(f"ssh_host {_clean(host, 80)!r} is not a host ({host_problem(host_text)})")
        else:
            if "jupyter" in str(inst.get("image_runtype") or ""):
                port += 1
            if port < 65536:
                return f"root@{host_text}:{port}", None
            problems.append(f"ssh_port {port - 1} + 1 for jupyter is past 65535")
    return None, "; ".join(problems) or None


#: (label, vast.ai field, length bound): the instance's state as vast.ai reports it
VAST_STATE_FIELDS = (
    ("vast_status", "actual_status", 40),
    ("vast_intended", "intended_status", 40),
    ("vast_msg", "status_msg", 160),
)
#: actual_status values in the order a sweep lists unreachable hosts: the surprising ones first
VAST_STATUS_ORDER = ("running", "loading", "created", "offline", "stopped", "exited")


def vast_words(labels: dict[str, str], with_actual: bool = True) -> str:
    """` (vast.ai: running, intended running: "msg")`, from an instance's labels; "" without them."""
    actual, intended, msg = (labels.get(k, "") for k, _f, _n in VAST_STATE_FIELDS)
    parts = [actual] if with_actual and actual else []
    if intended and intended != actual:
        parts.append(f"intended {intended}")
    text = ", ".join(parts)
    if msg:
        text += f"{': ' if text else ''}{msg!r}"
    return f" (vast.ai: {text})" if text else ""


def vast_order(labels: dict[str, str]) -> int:
    status = labels.get("vast_status")
    return VAST_STATUS_ORDER.index(status) if status in VAST_STATUS_ORDER else len(VAST_STATUS_ORDER)


def vast_address(inst: dict[str, Any]) -> str | None:
    return vast_target(inst)[0]


def parse_vast(data: Any) -> list[InventoryEntry]:
    items = data.get("instances", data) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InventoryError("vast.ai JSON: expected a list of instances")
    out = []
    for n, inst in enumerate(items):
        if not isinstance(inst, dict):
            out.append(InventoryEntry(f"vast-item-{n}", f"inventory item {n} is not an instance object"))
            continue
        iid = _instance_id(inst)
        label = inst.get("label")
        labels = {"instance_id": iid, "label": _clean(label) if isinstance(label, str) else ""}
        # what vast.ai says of the instance: an unreachable host reports it (and rows sort by it)
        for key, field_name, limit in VAST_STATE_FIELDS:
            v = inst.get(field_name)
            # masked before the cut (a secret cut in half still shows its half) and after it (a URL whose
            # `@` the cut took): a registry password in a pull error reached the table and the history
            labels[key] = (
                redact_cut(" ".join(_clean(redact_text(v[:4096]), limit).split())) if isinstance(v, str) else ""
            )
        labels = {k: v for k, v in labels.items() if v}
        addr, problem = vast_target(inst)
        status = inst.get("actual_status")
        name = addr or f"vast-{iid or n}"
        who = f"vast.ai instance {iid or '#' + str(n)}"
        if status != "running":
            state = _clean(status, 40) if isinstance(status, str) and status else "provisioning"
            said = vast_words(labels, with_actual=False)
            out.append(InventoryEntry(name, f"{who} is {state}, not running{said}", labels))
        elif addr is None:
            why = f"has unusable fields: {problem}" if problem else "has no SSH address yet"
            out.append(InventoryEntry(name, f"{who} {why}", labels))
        else:
            out.append(InventoryEntry(addr, None, labels))
    return out


def _json_error(exc: json.JSONDecodeError) -> InventoryError:
    return InventoryError(f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")


def parse_inventory(text: str, check: Callable[[str], None] | None = None) -> list[InventoryEntry]:
    """Plain list or vast.ai JSON, told apart by the first characters (after a UTF-8 byte-order
    mark, which Windows editors write and which is no part of the first target). `check`: as
    parse_plain's (a vast.ai instance's unusable fields make it a skipped row instead)."""
    text = text.removeprefix("\ufeff")
    stripped = text.lstrip()
    if stripped[:1] == "{" or re.match(r"\[\s*[{\]]", stripped[:64]):
        try:
            data = jsonnumbers.loads(text)
        except json.JSONDecodeError as exc:
            raise _json_error(exc) from exc
        except RecursionError as exc:
            raise InventoryError("JSON nested too deeply") from exc
        return parse_vast(data)
    if stripped[:1] == "[":  # `[::1]:22` starts with a bracket too, but is no JSON
        try:
            data = jsonnumbers.loads(text)
        except (json.JSONDecodeError, RecursionError):
            data = None
        if isinstance(data, list) and data:  # `[1,2]`, `["a"]`: JSON, but no instance in it
            kinds = sorted({type(x).__name__ for x in data})
            raise InventoryError(f"vast.ai JSON: expected a list of instances (objects), not of {', '.join(kinds)}")
    return parse_plain(text, check)


def target_key(target: str) -> str:
    """One spelling of an ssh target for telling duplicates apart: `ssh://root@H:22/`, `root@[H]:22`
    and `root@h:22` are one host (probed twice, a run counted it twice and, holding both ends of a
    connection twice, joined neither). A user name keeps its case; a missing port or user stays
    missing (ssh_config may give that host another). Anything else (local, a container) as given."""
    try:
        t = parse_target(target)
    except TargetError:
        return target
    return SshTarget(t.user, t.host.lower(), t.port).display()


def unique_entries(entries: Iterable[InventoryEntry]) -> tuple[list[InventoryEntry], int]:
    """Each target once, first occurrence kept (a target listed twice would be probed twice and give
    duplicate series in the Prometheus textfile); returns the entries and how many were dropped."""
    seen: set[str] = set()
    out = []
    dropped = 0
    for e in entries:
        key = target_key(e.target)
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        out.append(e)
    return out, dropped


def _host_of(target: str) -> str | None:
    try:
        return parse_target(target).host
    except TargetError:
        return None


def exclude(entries: list[InventoryEntry], excluded: Iterable[str]) -> list[InventoryEntry]:
    """Drop entries named by `-x`: an exact target, or a host name (so `-x gpu03` also drops
    `root@gpu03:22`)."""
    names = set(excluded)
    if not names:
        return entries
    return [e for e in entries if e.target not in names and _host_of(e.target) not in names]


def looks_like_path(text: str) -> bool:
    """Whether a positional inventory that does not exist was meant as a file, not a host name."""
    return "/" in text or text.startswith(("~", ".")) or text.lower().endswith(_FILE_SUFFIXES)
