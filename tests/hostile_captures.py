"""Real probe captures and the ways a hostile or broken target can mangle them, for the fuzz test
(tests/test_pipeline_fuzz.py) and the hostile-input tests.

The corpus is what fixtures/ holds: every recorded probe output under fixtures/procfs, and
`host-vm-kthreads-stat-only` with its kernel-log and nvidia-smi sections replaced by the published
kernel logs (fixtures/kmsg) and nvidia-smi outputs (fixtures/nvidia-smi), in the probe's older and
its current (`|`-prefixed, format 2) framing. Every mutation takes a `random.Random`, so a failing
case is replayed from its seed.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.paths import FIXTURES
from vastprobe.probe.script import ProbeParams


@dataclass(frozen=True)
class Seed:
    name: str
    raw: bytes
    params: ProbeParams

    def __repr__(self) -> str:  # Hypothesis prints failing cases: the name says which capture
        return f"Seed({self.name!r})"


def _params(folder: Path) -> ProbeParams:
    p = json.loads((folder / "params.json").read_text())
    return ProbeParams(
        sample=p["sample"], logs=tuple(p["logs"]), artifacts=tuple(p["artifacts"]), boundary=p["boundary"]
    )


def _replace_section(raw: bytes, boundary: str, name: str, body: bytes) -> bytes:
    b = boundary.encode()
    start = b"\n@@" + b + b"@@ " + name.encode() + b"\n"
    end = b"\n@@" + b + b"@@ /" + name.encode() + b"\n"
    i = raw.find(start)
    j = raw.find(end, i + 1)
    if i < 0 or j < 0:
        return raw
    return raw[: i + len(start)] + body + b"\n@@rc=0\n" + raw[j:]


def _kernel_lines() -> list[bytes]:
    out: list[bytes] = []
    for f in sorted((FIXTURES / "kmsg").glob("*/*.log")):
        out += [line for line in f.read_bytes().split(b"\n") if line.strip()]
    return out


def _gpu_csv(kind: str) -> list[bytes]:
    return [f.read_bytes() for f in sorted((FIXTURES / "nvidia-smi").glob(f"*/{kind}*.csv"))]


def load_corpus() -> list[Seed]:
    seeds = []
    folders = sorted(p for p in (FIXTURES / "procfs").iterdir() if (p / "probe.out").exists())
    for folder in folders:
        seeds.append(Seed(folder.name, (folder / "probe.out").read_bytes(), _params(folder)))
    base = next((s for s in seeds if s.name == "host-vm-kthreads-stat-only"), seeds[-1])
    kernel = _kernel_lines()
    queries, apps = _gpu_csv("query-gpu"), _gpu_csv("compute-apps")
    for i, (query, app) in enumerate(zip(queries, apps * (len(queries) // max(1, len(apps)) + 1), strict=False)):
        lines = kernel[i * 40 % max(1, len(kernel)) :][:400] or kernel[:400]
        raw = base.raw
        b = base.params.boundary
        raw = _replace_section(raw, b, "kmsg", b"@@source dmesg\n" + b"\n".join(lines) + b"\n@@lines 400")
        for s in ("s0.gpu", "s1.gpu"):
            raw = _replace_section(raw, b, s, query.rstrip(b"\n"))
        raw = _replace_section(raw, b, "gpuapps", b"@@dev /dev/nvidia0\n" + app.rstrip(b"\n"))
        seeds.append(Seed(f"{base.name}+kmsg+gpu{i}", raw, base.params))
        if i == 0:  # the same in the current framing: meta says format 2, kernel lines come behind `|`
            fmt2 = raw.replace(b"\nuid=0\n", b"\nuid=0\nformat=2\narch=x86_64\nls=b\n", 1)
            body = b"@@source dmesg\n" + b"\n".join(b"|" + line for line in lines) + b"\n@@lines 400"
            seeds.append(Seed(f"{base.name}+kmsg+gpu-format2", _replace_section(fmt2, b, "kmsg", body), base.params))
    return seeds


# ---------------------------------------------------------------- mutations


def _sections(raw: bytes, boundary: str) -> list[tuple[int, int, bytes]]:
    """(start, end, name) of each framed section, end marker included."""
    b = re.escape(boundary.encode())
    out = []
    for m in re.finditer(rb"\n@@" + b + rb"@@ ([^/\n][^\n]{0,40})\n", raw):
        name = m.group(1)
        end = raw.find(b"\n@@" + boundary.encode() + b"@@ /" + name + b"\n", m.end())
        if end >= 0:
            out.append((m.start(), end + len(boundary) + len(name) + 8, name))
    return out


def _line_starts(raw: bytes, rng: random.Random, k: int) -> list[int]:
    starts = [0] + [m.end() for m in re.finditer(rb"\n", raw)]
    return sorted(rng.sample(starts, min(k, len(starts))))


def truncate(raw: bytes, b: str, rng: random.Random) -> bytes:
    return raw[: rng.randrange(len(raw) + 1)]


def flip_bytes(raw: bytes, b: str, rng: random.Random) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 64)):
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def drop_section(raw: bytes, b: str, rng: random.Random) -> bytes:
    secs = _sections(raw, b)
    if not secs:
        return raw
    s, e, _ = rng.choice(secs)
    return raw[:s] + raw[e:]


def duplicate_section(raw: bytes, b: str, rng: random.Random) -> bytes:
    secs = _sections(raw, b)
    if not secs:
        return raw
    s, e, _ = rng.choice(secs)
    at = rng.choice([s, e, len(raw)])
    return raw[:at] + raw[s:e] + raw[at:]


def swap_sections(raw: bytes, b: str, rng: random.Random) -> bytes:
    secs = _sections(raw, b)
    if len(secs) < 2:
        return raw
    (s1, e1, _), (s2, e2, _) = sorted(rng.sample(secs, 2))
    return raw[:s1] + raw[s2:e2] + raw[e1:s2] + raw[s1:e1] + raw[e2:]


def frame_lines(raw: bytes, b: str, rng: random.Random) -> bytes:
    """Lines that look like the probe's own framing and markers, inside content."""
    names = [n.decode() for _, _, n in _sections(raw, b)] or ["meta"]
    bogus = [
        f"@@{b}@@ {rng.choice(names)}",
        f"@@{b}@@ /{rng.choice(names)}",
        f"@@{b}@@ end",
        f"@@{b}@@ deadline",
        f"@@{b}@@ cut",
        f"@@{b}@@ s9.forged",
        "@@rc=0",
        "@@rc=99999999",
        "@@count ²",
        "@@count 99999999999999999999999999",
        "@@unlisted -1",
        "@@log ٣",
        "@@lines 1e9",
        "@@source \x1b]0;owned\x07",
        "@@err Operation not permitted",
        "@@dev /dev/nvidia\u202e0",
        "@@devs x",
        "@@more",
        "@@notregular",
        "@@absent",
        "@@skipped \x1b[2J",
        "@@inodes",
        "@ns net:[4026531833] /proc/1",
        "@ss u_str ESTAB 0 0 * 1 * 2",
        "/proc/1/fd:",
        "lr-x------ 1 0 0 64 Dec  2 16:25 3 -> pipe:[4242]",
        "l-wx------ 1 0 0 64 Dec  2 16:25 4 -> pipe:[4242]",
        "/proc/1/stat:1 (forged) T 0 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0",
        "|[ 1.000000] Memory cgroup out of memory: Killed process 1 (forged) total-vm:1kB, anon-rss:1kB",
        "[ 1.000000] NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=x, GPU has fallen off the bus.",
        "M\tv1\t/x\t/sys/fs/cgroup/memory/x",
        "1: POSIX  ADVISORY  WRITE 1 00:01:1 0 EOF",
        "1: -> POSIX  ADVISORY  WRITE 2 00:01:1 0 EOF",
        "[bold red]markup[/bold red]\x1b[31m\r\x00\x7f\u2028\u2029\ufeff",
    ]
    data = raw
    for at in reversed(_line_starts(raw, rng, rng.randint(1, 8))):
        data = data[:at] + rng.choice(bogus).encode("utf-8", "surrogateescape") + b"\n" + data[at:]
    return data


_ODD_DIGITS = "²³¹٠١٢٣٤٥٦٧٨٩०१२३४५६७८९０１２３߀𝟎𝟗"


def odd_digits(raw: bytes, b: str, rng: random.Random) -> bytes:
    """ASCII digits replaced by digits of other scripts (str.isdigit() says yes, int() may too)."""
    text = raw.decode("utf-8", "surrogateescape")
    spots = [m.start() for m in re.finditer(r"[0-9]", text)]
    chars = list(text)
    for i in rng.sample(spots, min(len(spots), rng.randint(1, 200))):
        chars[i] = rng.choice(_ODD_DIGITS)
    return "".join(chars).encode("utf-8", "surrogateescape")


def huge_numbers(raw: bytes, b: str, rng: random.Random) -> bytes:
    big = ["9" * 5000, "9" * 25, str(2**62), str(2**63), str(2**64), "-1", "-9223372036854775808", "0", "1e999",
           "nan", "inf", "1_000", "0x7fffffffffffffff", "4611686018427387904.5", "1" + "0" * 400]  # fmt: skip
    text = raw.decode("utf-8", "surrogateescape")
    runs = list(re.finditer(r"[0-9]+", text))
    for m in sorted(rng.sample(runs, min(len(runs), rng.randint(1, 40))), key=lambda m: -m.start()):
        text = text[: m.start()] + rng.choice(big) + text[m.end() :]
    return text.encode("utf-8", "surrogateescape")


def non_utf8(raw: bytes, b: str, rng: random.Random) -> bytes:
    junk = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xed\xb2\x80", b"\x80\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x00"]
    data = raw
    for _ in range(rng.randint(1, 32)):
        at = rng.randrange(len(data) + 1)
        data = data[:at] + rng.choice(junk) + data[at:]
    return data


_STAT_LINE = re.compile(rb"^(/proc/[0-9]+/stat:([0-9]+) \(.*\) [A-Za-z] )([0-9]+)", re.M)


def ppid_loops(raw: bytes, b: str, rng: random.Random) -> bytes:
    """Parent links that form cycles (a -> b -> a), point at themselves, or at absent PIDs."""
    found = list(_STAT_LINE.finditer(raw))
    if not found:
        return raw
    pids = [m.group(2) for m in found]
    choice: dict[int, bytes] = {}
    for m in rng.sample(found, min(len(found), rng.randint(1, 20))):
        choice[m.start()] = rng.choice([m.group(2), rng.choice(pids), b"0", b"99999999"])
    if len(found) > 2:  # one sure two-cycle
        a, c = rng.sample(found, 2)
        choice[a.start()], choice[c.start()] = c.group(2), a.group(2)
    out, last = [], 0
    for m in found:
        if m.start() in choice:
            out += [raw[last : m.start(3)], choice[m.start()]]
            last = m.end(3)
    out.append(raw[last:])
    return b"".join(out)


def terminal_junk(raw: bytes, b: str, rng: random.Random) -> bytes:
    """Escape sequences, bidi overrides and rich markup in names, paths and log lines."""
    junk = ["\x1b[2J", "\x1b]0;owned\x07", "\u202e", "\u2066", "[bold]x[/bold]", "\r", "\x08", "\x9b31m", "\u0085",
            "\ud800", "\x1b[?1049h"]  # fmt: skip
    text = raw.decode("utf-8", "surrogateescape")
    spots = [m.start() for m in re.finditer(r"[(/|a-z]", text)]
    for i in sorted(rng.sample(spots, min(len(spots), rng.randint(1, 30))), reverse=True):
        text = text[:i] + rng.choice(junk) + text[i:]
    return text.encode("utf-8", "surrogatepass")


def long_lines(raw: bytes, b: str, rng: random.Random) -> bytes:
    """Lines of 8-64 KiB shaped to make a backtracking regex work hard."""
    shapes = [" ", "0", "a", "1 ", "@@ss u_str ", "/proc/1/", "Killed process ", "(", ")", "PCI:0000:", ", UID ",
              "lr-x------ 1 0 0 64 ", "[ ", "-> ", ":", "|"]  # fmt: skip
    data = raw
    for at in reversed(_line_starts(raw, rng, rng.randint(1, 3))):
        head = rng.choice(["", "@@ss u_str ESTAB 0 0 ", "/proc/1/fd/", "|", "lr-x------ 1 0 0 64 Dec  2 16:25 "])
        line = head + rng.choice(shapes) * (rng.choice([8, 16, 64]) * 1024 // 4)
        data = data[:at] + line.encode() + b"\n" + data[at:]
    return data


Mutation = Callable[[bytes, str, random.Random], bytes]
MUTATIONS: dict[str, Mutation] = {
    f.__name__: f
    for f in (
        truncate, flip_bytes, drop_section, duplicate_section, swap_sections, frame_lines, odd_digits,
        huge_numbers, non_utf8, ppid_loops, terminal_junk, long_lines,
    )
}  # fmt: skip


def mutate(seed: Seed, ops: list[tuple[str, int]]) -> bytes:
    raw = seed.raw
    for name, n in ops:
        raw = MUTATIONS[name](raw, seed.params.boundary, random.Random(n))
    return raw


def many_processes(n: int, boundary: str, loops: bool = False) -> bytes:
    """A capture of a host with `n` processes (stat, status, fd and cmdline of each): built from one
    real process's records, as the probe frames them. With `loops`, the parent links form one cycle
    through every process."""
    b = boundary
    stat, status, fds, cmd = [], [], [], []
    for pid in range(2, n + 2):
        ppid = (pid + 1 if pid < n + 1 else 2) if loops else (1 if pid % 50 == 2 else pid - 1)
        stat.append(f"/proc/{pid}/stat:{pid} (python3) S {ppid} {pid} {pid} 0 -1 4194304 1 0 0 0 5 3 0 0 20 0 1 0 "
                    f"{1000 + pid} 1 1 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0")  # fmt: skip
        status.append(f"/proc/{pid}/status:Uid:\t0\t0\t0\t0\n/proc/{pid}/status:VmRSS:\t  1024 kB")
        fds.append(f"/proc/{pid}/fd:\nlr-x------ 1 0 0 64 Dec  2 16:25 0 -> pipe:[{pid}]\n"
                   f"l-wx------ 1 0 0 64 Dec  2 16:25 1 -> pipe:[{pid + 1}]")  # fmt: skip
        cmd.append(f"/proc/{pid}/cmdline:python3\n/proc/{pid}/cmdline:train.py")

    def sec(name: str, body: str) -> str:
        return f"\n@@{b}@@ {name}\n{body}\n@@rc=0\n\n@@{b}@@ /{name}\n"

    text = (
        sec("meta", "version=0.1.0\nshell_pid=1\nshell_ppid=0\nkernel=6.1\nhostname=big\nformat=2\narch=x86_64")
        + sec("host", "/proc/uptime:1000.00 1000.00\n/proc/stat:btime 1700000000")
        + sec("s0.now", "uptime=1000.00")
        + sec("s0.proc", "\n".join(stat) + "\n" + "\n".join(status))
        + sec("cmdline", "\n".join(cmd))
        + sec("fd", "\n".join(fds))
        + sec("s1.now", "uptime=1001.00")
        + sec("s1.proc", "\n".join(stat))
        + f"\n@@{b}@@ end\n"
    )
    return text.encode()
