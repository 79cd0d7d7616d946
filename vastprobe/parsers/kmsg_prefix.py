"""What a log reader put in front of the kernel's text in a kernel-log line, and the clock readings
in it (parsers/kmsg.py's module docstring lists the forms: dmesg's own stamp, `-T`, `--time-format
iso`, `--decode`, /dev/kmsg records, syslog files, journalctl). A module of its own, beside the
events' parser, so each stays short: this one knows stamps and dates, that one the kernel's messages.
Every pattern is anchored or a bounded run of one character class: matching stays linear."""

from __future__ import annotations

import calendar
import re

from vastprobe.clock import utc_struct
from vastprobe.untrusted.numbers import read_float, read_int

#: Longest line read; the kernel's own records are at most ~1 KiB, a syslog prefix adds little.
MAX_LINE = 2048

_MONTHS = {
    m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)
}

# ---------------------------------------------------------------- prefixes
_KMSG_RECORD = re.compile(r"(\d{1,3}),(\d{1,20}),(\d{1,20}),[^;]{0,32};", re.ASCII)
_DECODE = re.compile(r"[a-z]{2,8} *:[a-z]{3,6} *: ")
_STAMP = re.compile(r"\[ {0,12}(\d{1,12}\.\d{1,9})\] ?", re.ASCII)
_CTIME = re.compile(r"\[[A-Z][a-z]{2} ([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\] ?", re.ASCII)
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,]\d{1,9})?(Z|[+-]\d\d:?\d\d)? ", re.ASCII)
_SYSLOG = re.compile(r"(\S{1,12}) {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.\d{1,9})? ", re.ASCII)
_HOST_KERNEL = re.compile(r"\S{1,255} kernel: ")
#: dmesg's own "[ 1234.5] " with no "host kernel: " after it: most lines of a log read by dmesg. A
#: line that opens with "[ " can match no other prefix (a syslog stamp would need a digit right
#: after the space), so strip_prefix takes it in one match. The space is possessive (`?+`), as the
#: general path's stamp takes it before it looks for "host kernel: ".
_DMESG_ONLY = re.compile(r"\[ {1,12}(\d{1,12}\.\d{1,9})\] ?+(?!\S{1,255} kernel: )", re.ASCII)


def _timegm(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float | None:
    if not (1970 <= y <= 9999 and 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        return None
    return float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))


def _n(digits: str) -> int:
    """A date field the regex already bounded to ASCII digits."""
    return read_int(digits, 4) or 0


def _year_for(mo: int, d: int, h: int, mi: int, s: int, now: float | None) -> float | None:
    """Syslog stamps have no year: the latest one not after the target's clock (plus a day)."""
    if now is None:
        return None
    t_now = utc_struct(now)  # a target's clock can say anything: no year then
    if t_now is None:
        return None
    year = t_now.tm_year
    t = _timegm(year, mo, d, h, mi, s)
    if t is not None and t > now + 86400:
        t = _timegm(year - 1, mo, d, h, mi, s)
    return t


def strip_prefix(line: str, now: float | None) -> tuple[str, float | None, float | None, float | None]:
    """The kernel's own text and the clock readings found in front of it: (text, seconds since
    boot, wall time, local time)."""
    if line[:2] == "[ " and len(line) <= MAX_LINE and (m := _DMESG_ONLY.match(line)):
        return line[m.end() :], read_float(m.group(1)), None, None
    s = line[:MAX_LINE]
    pos = 0
    uptime = wall = local = None
    # dmesg's own "[ 1234.5] " opens most lines: no record, decode, ISO or ctime prefix starts so
    stamp_first = s[:1] == "[" and not "A" <= s[1:2] <= "Z"
    if not stamp_first and (m := _KMSG_RECORD.match(s)):
        uptime = (read_int(m.group(3)) or 0) / 1e6
        pos = m.end()
    if not stamp_first and (m := _DECODE.match(s, pos)):
        pos = m.end()
    dated = False
    if not stamp_first and (m := _ISO.match(s, pos)):
        t = _timegm(*(_n(m.group(i)) for i in range(1, 7)))
        zone = m.group(7)
        if t is not None and zone:
            if zone != "Z":
                sign = -1 if zone[0] == "-" else 1
                z = zone[1:].replace(":", "")
                t -= sign * (_n(z[:2]) * 3600 + _n(z[2:]) * 60)
            wall = t
        else:
            local = t
        pos, dated = m.end(), True
    elif not stamp_first and (m := _CTIME.match(s, pos)):
        mo = _MONTHS.get(m.group(1))
        if mo is not None:
            local = _timegm(_n(m.group(6)), mo, *(_n(m.group(i)) for i in range(2, 6)))
        pos = m.end()
    elif (m := _SYSLOG.match(s, pos)) and _HOST_KERNEL.match(s, m.end()):
        mo = _MONTHS.get(m.group(1))  # a localised month name ("апр") leaves the time unknown
        if mo is not None:
            d, h, mi, sec = (_n(m.group(i)) for i in range(2, 6))
            local = _year_for(mo, d, h, mi, sec, now)
        pos, dated = m.end(), True
    if dated and (m := _HOST_KERNEL.match(s, pos)):
        pos = m.end()
    if m := _STAMP.match(s, pos):
        uptime = read_float(m.group(1))
        pos = m.end()
        if m := _HOST_KERNEL.match(s, pos):  # journalctl -o short-monotonic
            pos = m.end()
    return s[pos:], uptime, wall, local
