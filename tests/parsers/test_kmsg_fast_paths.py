"""The kernel-log parser's fast paths (a dmesg stamp read in one match, a modern kill line read in
one match, events built without the dataclass's `__init__`) give what its general path gives, line
for line: over every recorded kernel log and capture, and over lines mutated from them at random
with the very texts the paths look for."""

from __future__ import annotations

import random
import re

import pytest

from tests.paths import FIXTURES
from vastprobe.capture import load_captures
from vastprobe.model import KernelEvent
from vastprobe.parsers import kmsg, kmsg_prefix

NEVER = re.compile(r"(?!)")
BTIME = 1_700_000_000
NOW = 1.7e9
INSERTS = (
    "(", ")", ") total-vm:1kB", "anon-rss:9kB", "file-rss:", "shmem-rss:0kB", "vsz:3kB", "), UID 5,", " UID:12345678901",
    "[", "[ ", "] ", "]", "host kernel: ", "kernel: ", "0", ".5", "Killed process ", "Memory cgroup out of memory: ",
    " pgtables:4kB oom_score_adj:-1000", "Jan  1 00:00:00 ", " invoked oom-killer: ", "memory: usage ", "kB, limit ",
    "Out of memory: ", "kern.err ", "[12]: ", "<3>", "\t", "a kernel: ", "123456789.5 ",
)  # fmt: skip


def _recorded_lines() -> list[str]:
    texts = [p.read_text(errors="replace") for p in (FIXTURES / "kmsg").glob("*/*.log")]
    for name in ("healthy", "seed-inside"):
        texts.append(
            load_captures(FIXTURES / "reports" / "captures" / f"{name}.json")[0].output.decode(errors="replace")
        )
    lines = [line.lstrip("|") for text in texts for line in text.split("\n") if kmsg._EVENT_TEXT.search(line)]
    assert len(lines) > 300
    return lines


def _mutated(lines: list[str], n: int) -> list[str]:
    rng = random.Random(36)
    out = []
    for _ in range(n):
        line = rng.choice(lines)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(line) + 1)
            r = rng.random()
            if r < 0.4:
                line = line[:i] + rng.choice(INSERTS) + line[i:]
            elif r < 0.7:
                line = line[:i] + line[i + rng.randint(1, 6) :]
            else:
                line = line[:i] + rng.choice("0123456789 ()[]:,.kB-") + line[i:]
        out.append(line)
    return out


def _variants(lines: list[str]) -> list[str]:
    """Each recorded line with its kill's head swapped for the kernel's others, and its stamp as a host
    up for more than a day writes it (no space after the bracket): forms few recorded logs hold."""
    heads = ("Memory cgroup out of memory: ", "Out of memory: ", "Out of memory (oom_kill_allocating_task): ", "")
    out = []
    for line in lines:
        for head in heads[:1]:
            if head + "Killed process " in line:
                out += [line.replace(head + "Killed process ", other + "Killed process ") for other in heads[1:]]
        if line.startswith("[ "):
            out.append("[" + line.lstrip("[ "))
            out.append("[1" + line.lstrip("[ "))
    return out


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kmsg_prefix, "_DMESG_ONLY", NEVER)
    monkeypatch.setattr(kmsg, "_KILL_LINE", NEVER)
    monkeypatch.setattr(kmsg, "_OOM_LINE", NEVER)
    monkeypatch.setattr(kmsg, "_SUMMARY_STAMP", NEVER)
    monkeypatch.setattr(kmsg, "_event_of", lambda fields: KernelEvent(**fields))


def test_fast_paths_read_every_line_as_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = _recorded_lines()
    lines = recorded + _variants(recorded) + _mutated(recorded, 20_000)
    fast = [kmsg._events(kmsg._parse_lines([line], BTIME, NOW)) for line in lines]
    took = sum(1 for line in recorded if kmsg_prefix._DMESG_ONLY.match(line) and "Killed process " in line)
    assert took > 40  # the fast paths did read lines
    whole = [line for line in lines if kmsg._OOM_LINE.fullmatch(line)]
    kinds = {e.kind for line in whole for e in kmsg._events(kmsg._parse_lines([line], BTIME, NOW))}
    assert len(whole) > 1000 and kinds == {"oom-kill", "memcg-usage", "oom-invoked"}, (len(whole), kinds)
    assert sum(1 for line in lines if kmsg._SUMMARY_STAMP.match(line) and " kernel" not in line) > 500
    _general(monkeypatch)
    general = [kmsg._events(kmsg._parse_lines([line], BTIME, NOW)) for line in lines]
    differ = [(line, f, g) for line, f, g in zip(lines, fast, general, strict=True) if f != g]
    assert not differ, differ[:3]


def test_a_whole_log_parses_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _recorded_lines()
    text = f"@@lines {len(lines)}\n" + "\n".join(lines)
    fast = kmsg.parse_kmsg_sections(text, None, BTIME, NOW)
    _general(monkeypatch)
    assert kmsg.parse_kmsg_sections(text, None, BTIME, NOW) == fast
    assert len(fast.events) > 100


def test_an_event_built_without_init_is_the_dataclass() -> None:
    line = "[ 6976.036463] Memory cgroup out of memory: Killed process 11224 (python) total-vm:116396kB, " \
        "anon-rss:24320kB, file-rss:6152kB, shmem-rss:0kB, UID:0 pgtables:112kB oom_score_adj:0"  # fmt: skip
    (fields,) = kmsg._parse_lines([line], BTIME, NOW)
    built, made = kmsg._event_of(dict(fields)), KernelEvent(**fields)  # type: ignore[arg-type]
    assert built == made and hash(built) == hash(made) and repr(built) == repr(made)
    assert (built.pid, built.comm, built.uid, built.anon_rss_kb, built.detail) == (11224, "python", 0, 24320, "memcg")
    with pytest.raises(AttributeError):
        built.pid = 1  # type: ignore[misc]
