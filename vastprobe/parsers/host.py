"""Host facts: the probe's `meta` and `host` sections, sample stamps and `times`."""

from __future__ import annotations

import re

from vastprobe.model import HostFacts, Pressure, Unavailable
from vastprobe.parsers.procfs_lines import to_int
from vastprobe.untrusted.numbers import is_digits, read_float, read_int

_TIMES = re.compile(r"([0-9]{1,9})m([0-9]{1,12}(?:\.[0-9]{1,9})?)s", re.ASCII)
_NS = re.compile(r"/proc/(\w{1,10})/ns/pid -> '?pid:\[([0-9]{1,20})\]", re.ASCII)
_UPTIME = re.compile(r"uptime=([0-9.]{1,32})", re.ASCII)
_AVG10 = re.compile(r"avg10=([0-9.]{1,32})", re.ASCII)
#: The /proc/meminfo lines HostFacts keeps.
_MEMINFO_KEYS = frozenset({"MemTotal", "MemAvailable"})


def parse_meta(text: str) -> dict[str, str]:
    out = {}
    for line in text.split("\n"):
        key, sep, value = line.partition("=")
        if sep and key.isidentifier():
            out[key] = value
    return out


def parse_now(text: str) -> float | None:
    m = _UPTIME.search(text)
    return read_float(m.group(1)) if m else None


def parse_times(text: str) -> float | None:
    """Total user+sys of the probe shell and its children, from the `times` builtin."""
    values = [(read_int(m) or 0) * 60 + (read_float(s) or 0.0) for m, s in _TIMES.findall(text)]
    return round(sum(values), 3) if values else None


# USER_HZ is 100 on every architecture Linux runs GPUs on; 1024 was alpha and ia64.
_CLK_TCK_CANDIDATES = (100, 250, 300, 1000, 1024)


def infer_clk_tck(shell_starttime: int | None, uptime: float | None) -> int:
    """Ticks per second from the probe shell's start time against the uptime read just after it:
    the probe no longer forks getconf for this. Too early after boot to tell: 100."""
    if shell_starttime is None or not uptime or uptime < 2:
        return 100
    ratio = shell_starttime / uptime
    return min(_CLK_TCK_CANDIDATES, key=lambda c: abs(c - ratio))


def parse_host(text: str, meta: dict[str, str], clk_tck: int | None = None, shell_uid: int | None = None) -> HostFacts:
    """`clk_tck` and `shell_uid` are used when the meta section lacks them: probes since 0.1 leave
    CLK_TCK to be inferred and the uid to the shell's own status line."""
    files: dict[str, list[str]] = {}
    ns: dict[str, str] = {}
    for line in text.split("\n"):
        n = _NS.search(line) if "/ns/pid -> " in line else None  # the pattern's own words
        if n:
            ns[n.group(1)] = n.group(2)
            continue
        if line.startswith("/proc/") and ":" in line:
            path, _, value = line.partition(":")
            files.setdefault(path, []).append(value)

    def first(path: str) -> str | None:
        v = files.get(path)
        return v[0] if v else None

    uptime_text = first("/proc/uptime")
    uptime = (read_float(uptime_text.split()[0]) if uptime_text and uptime_text.split() else None) or 0.0
    load_text = first("/proc/loadavg")
    loadavg: tuple[float, float, float] | Unavailable = Unavailable("/proc/loadavg not readable")
    if load_text:
        a = [read_float(x) for x in load_text.split()[:3]]
        if len(a) == 3 and None not in a:
            loadavg = (a[0] or 0.0, a[1] or 0.0, a[2] or 0.0)
    btime_text = first("/proc/stat")
    btime: int | Unavailable = Unavailable("no btime line in /proc/stat")
    if btime_text and btime_text.startswith("btime "):
        bt = read_int(btime_text[6:], 12)  # seconds since 1970: 12 digits reach past the year 30000
        if bt is not None:
            btime = bt
    mem: dict[str, int] = {}
    for line in files.get("/proc/meminfo", []):
        k, _, v = line.partition(":")
        if k not in _MEMINFO_KEYS:
            continue  # ~55 lines, two read: a number parsed per line was a tenth of this parser
        kb = to_int(v.split()[0]) if v.split() else None
        if kb is not None:
            mem[k] = kb
    pressure = []
    for res in ("cpu", "memory", "io"):
        some = full = None
        for line in files.get(f"/proc/pressure/{res}", []):
            m = _AVG10.search(line)
            if m and line.startswith("some"):
                some = read_float(m.group(1))
            elif m and line.startswith("full"):
                full = read_float(m.group(1))
        if some is not None:
            pressure.append(Pressure(resource=res, some_avg10=some, full_avg10=full))
    own_ns: bool | Unavailable
    if is_digits(meta.get("selfpid", "")) and is_digits(meta.get("shell_pid", "")):
        # /proc names the probe shell by the PID it has in its own namespace: /proc is that namespace's.
        own_ns = meta["selfpid"] == meta["shell_pid"]
    elif "self" in ns and "1" in ns:  # captures of older probes: the two ns/pid links
        own_ns = ns["self"] == ns["1"]
    else:
        own_ns = Unavailable("/proc/self/stat not readable" if "selfpid" in meta else "/proc/1/ns/pid not readable")
    pid_max = first("/proc/sys/kernel/pid_max")
    restrict = first("/proc/sys/kernel/dmesg_restrict")
    return HostFacts(
        hostname=meta.get("hostname", ""),
        kernel=meta.get("kernel", ""),
        uid=to_int(meta["uid"]) if "uid" in meta else shell_uid,
        clk_tck=to_int(meta.get("clk_tck", "")) or clk_tck or 100,
        uptime=uptime,
        btime=btime,
        loadavg=loadavg,
        mem_total_kb=mem.get("MemTotal"),
        mem_available_kb=mem.get("MemAvailable"),
        pressure=tuple(pressure),
        pid_max=to_int(pid_max) if pid_max else None,
        own_pid_namespace=own_ns,
        dmesg_restrict=to_int(restrict) if restrict else None,
        arch=meta.get("arch", "")[:32],
    )
