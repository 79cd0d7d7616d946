"""Every section the probe writes, declared once: its name, the script function that writes it,
its size bound, the parser that reads it, and what it is for; and, by its place in SOURCES, when
the probe writes it (ORDER, the order the section splitter checks, is derived from SOURCES).

A new source is its shell function in script.sh; its parser (a function in a vastprobe.parsers
module, named here as "module:function": this package sits below the parsers and imports none of
them); its builder, beside its parser, which reads the section with `sections.read(src.NEW, ...)`
and returns the part of the snapshot it fills; and one entry in SOURCES, in the place vp_main
(script.sh) writes it (marked `optional` when the probe may leave it out). parsers/snapshot.py
calls the builder, in one line. parsers/reading.py calls the parser: `Sections.read(source, ...)`
resolves the name when it calls it and, when it raises, names this source's section as
unreadable. tests/probe/test_sources.py checks that the script and this table agree and that every
parser named here resolves and is the one called, and the section splitter reports any section
not declared here as tampering.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from vastprobe.probe.script import MAX_NET_SECTION, MAX_PROC_SECTION
from vastprobe.untrusted.numbers import read_digits

Phase = Literal["once", "per-sample", "per-log", "per-artifact"]


@dataclass(frozen=True)
class Source:
    name: str  # as framed; "{sample}" / "{index}" stand for the sample (0, 1) or the item's index
    function: str  # the shell function that writes it (or the one whose awk emits it)
    cap: int | None  # bytes; None: its command bounds it (a grep pattern, tail -c, head -n, awk limits)
    phase: Phase
    parser: str  # "module:function" that reads it, called by parsers/reading.py (Sections.read)
    about: str
    #: Written only sometimes (kmsg.fallback), missing from captures of the same format made before
    #: it (env, fr, held), or asked for by an option (pystack): never missed when absent.
    optional: bool = False

    def section(self, n: int = 0) -> str:
        return self.name.replace("{sample}", str(n)).replace("{index}", str(n))

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(
            "^" + re.escape(self.name).replace(r"\{sample\}", "[01]").replace(r"\{index\}", "[0-9]+") + "$"
        )


META = Source(
    "meta", "vp_meta", None, "once", "vastprobe.parsers.host:parse_meta", "probe version, PIDs, kernel, tools found"
)
HOST = Source("host", "vp_host", None, "once", "vastprobe.parsers.host:parse_host", "uptime, load, memory, PSI, btime")
NOW = Source(
    "s{sample}.now", "vp_now", None, "per-sample", "vastprobe.parsers.host:parse_now", "the sample's uptime stamp"
)
PROC = Source(
    "s{sample}.proc",
    "vp_s0",
    MAX_PROC_SECTION,
    "per-sample",
    "vastprobe.parsers.proc_stat:parse_stat_section",
    "stat of every process; status, io, wchan, cgroup and threads of user processes (s1: stat, io)",
)
CGMAP = Source(
    "cgmap", "vp_s0", None, "once", "vastprobe.parsers.cgroup:parse_cgmap", "memory cgroups of the processes"
)
CGMEM = Source(
    "cgmem", "vp_s0", None, "once", "vastprobe.parsers.cgroup:parse_cgmem_section", "their memory and OOM counters"
)
SYSCALL = Source(
    "syscall",
    "vp_syscall",
    None,
    "once",
    "vastprobe.parsers.syscall:parse_syscall_section",
    "/proc/PID/syscall of sleeping processes whose wait channel leaves the fd open (needs root)",
)
MOUNTS = Source(
    "mounts", "vp_s0", None, "once", "vastprobe.parsers.mounts:parse_fuse_mounts", "FUSE mounts (at most 256)"
)
LOCKS = Source(
    "locks", "vp_s0", None, "once", "vastprobe.parsers.locks:parse_locks", "/proc/locks (at most 4096 lines)"
)
GPU = Source(
    "s{sample}.gpu",
    "vp_gpu",
    65536,
    "per-sample",
    "vastprobe.parsers.nvidia_smi:parse_gpu_query",
    "nvidia-smi --query-gpu, with a header (columns read by name)",
)
LOGSTAT = Source(
    "s{sample}.logs",
    "vp_logstats_sec",
    None,
    "per-sample",
    "vastprobe.parsers.files:parse_logstats",
    "stat of each --log",
)
CMDLINE = Source(
    "cmdline",
    "vp_cmdline",
    MAX_PROC_SECTION,
    "once",
    "vastprobe.parsers.cmdline:parse_cmdline_section",
    "argv of user processes",
)
ENV = Source(
    "env",
    "vp_env",
    256 * 1024,
    "once",
    "vastprobe.parsers.environ:parse_env_section",
    "distributed-training variables (RANK, WORLD_SIZE, MASTER_ADDR, NCCL_*, ...) of multi-threaded processes",
    optional=True,
)
HELD = Source(
    "held",
    "vp_held_stat",
    None,
    "once",
    "vastprobe.parsers.held:parse_held_section",
    "stat of files held open write-only named like logs, and of stdout/stderr files (at most 128)",
    optional=True,
)
FR = Source(
    "fr",
    "vp_fr",
    12 * 1024 * 1024,
    "once",
    "vastprobe.parsers.flight_recorder:parse_fr_section",
    "PyTorch flight recorder dumps (at most 8, 1 MiB each, base64), read without running pickle",
    optional=True,
)
PYSTACK = Source(
    "pystack",
    "vp_pystack",
    None,
    "once",
    "vastprobe.parsers.pystack:parse_pystack_section",
    "with --py-spy: py-spy dump --nonblocking of the newest Python programs (at most 8, 64 KiB each)",
    optional=True,
)
FD = Source(
    "fd",
    "vp_fd",
    MAX_PROC_SECTION,
    "once",
    "vastprobe.parsers.fd:parse_fd_section",
    "fd links and network namespace of user processes",
)
NET = Source(
    "net",
    "vp_fd",
    MAX_NET_SECTION,
    "once",
    "vastprobe.parsers.net:parse_net_section",
    "held sockets per network namespace; Unix peers from ss",
)
KMSG = Source(
    "kmsg",
    "vp_kmsg",
    None,
    "once",
    "vastprobe.parsers.kmsg:parse_kmsg_sections",
    "OOM, Xid, hung-task lines of dmesg (last 400)",
)
KMSG_FALLBACK = Source(
    "kmsg.fallback",
    "vp_kmsg_fallback",
    None,
    "once",
    "vastprobe.parsers.kmsg:parse_kmsg_sections",
    "journalctl -k, kern.log, messages",
    optional=True,
)
GPUAPPS = Source(
    "gpuapps",
    "vp_gpuapps",
    65536,
    "once",
    "vastprobe.parsers.nvidia_smi:parse_compute_apps",
    "the /dev/nvidia<N> nodes (@@dev lines), then nvidia-smi --query-compute-apps",
)
LOGTAIL = Source(
    "log.{index}",
    "vp_logtail",
    None,
    "per-log",
    "vastprobe.parsers.logs:log_tail",
    "tail -c of each --log that is a regular file",
)
DF = Source(
    "df", "vp_df", None, "once", "vastprobe.parsers.df:parse_df", "df -P and -P -i of /tmp and the logs' directories"
)
ARTIFACTS = Source(
    "art.{index}",
    "vp_glob",
    None,
    "per-artifact",
    "vastprobe.parsers.files:parse_artifacts",
    "stat of each --artifacts glob's first matches",
)
TIMES = Source("times", "vp_main", None, "once", "vastprobe.parsers.host:parse_times", "the probe's own CPU time")
#: Sections only older probe versions wrote; still read from their captures.
LEGACY_CLK = Source(
    "clk", "vp_clk", None, "once", "vastprobe.parsers.host:parse_meta", "CLK_TCK (first probe revision)"
)

#: Every source, in the order in which this version's probe writes it (vp_main in script.sh): a
#: per-sample source at its first sample's place; TIMES, written by the probe's own shell, last.
SOURCES: tuple[Source, ...] = (
    META, HOST, NOW, PROC, CGMAP, CGMEM, MOUNTS, LOCKS, SYSCALL, GPU, LOGSTAT, CMDLINE, ENV, FR, PYSTACK, FD, NET, HELD,
    KMSG, KMSG_FALLBACK, GPUAPPS, LOGTAIL, DF, ARTIFACTS, TIMES,
)  # fmt: skip
LEGACY: tuple[Source, ...] = (LEGACY_CLK,)
SAMPLES = (0, 1)


def _write_order(sources: tuple[Source, ...]) -> tuple[str, ...]:
    """The sections' names in the order the probe writes them: every source in turn (the first
    sample's sections in their place), then the second sample's in the same order, then the last
    source (times), which closes the run."""
    *body, closing = sources
    first = tuple(s.section(0) if s.phase == "per-sample" else s.name for s in body)
    second = tuple(s.section(1) for s in body if s.phase == "per-sample")
    return (*first, *second, closing.name)


#: The order in which this version's probe writes its sections (derived from SOURCES): a section
#: that arrives out of it was not written by the probe in turn. Per-item sections (log.N, art.N)
#: come in their index order; s1.* only with a second sample; kmsg.fallback only when dmesg failed.
ORDER: tuple[str, ...] = _write_order(SOURCES)
#: The sections never missed when absent (Source.optional), in the probe's order.
OPTIONAL: tuple[str, ...] = tuple(s.name for s in SOURCES if s.optional)


#: Section names up to this long are remembered by `declared` and `source_of` (the probe's own are
#: under 20 characters; a target can send a name of any length, and a cache must not keep them).
CACHED_NAME = 64


def _declared(name: str) -> bool:
    return any(s.pattern.match(name) for s in (*SOURCES, *LEGACY))


def _source_of(name: str) -> Source | None:
    return next((s for s in SOURCES if s.pattern.match(name)), None)


_declared_cached = functools.lru_cache(maxsize=1024)(_declared)
_source_of_cached = functools.lru_cache(maxsize=1024)(_source_of)


def declared(name: str) -> bool:
    return _declared_cached(name) if len(name) <= CACHED_NAME else _declared(name)


def source_of(name: str) -> Source | None:
    """The first source (in SOURCES' order) whose sections `name` is one of, or None. Both this and
    `declared` remember short names: every host's ~26 sections were matched against ~26 patterns
    each, twice (~150 us a host)."""
    return _source_of_cached(name) if len(name) <= CACHED_NAME else _source_of(name)


def rank(name: str) -> tuple[int, int] | None:
    """Where `name` comes in ORDER (with its item index), or None for a name not in it."""
    if name in _RANKS:
        return _RANKS[name], 0
    head, _, index = name.rpartition(".")
    n = read_digits(index, 6)
    if head in ("log", "art") and n is not None:
        return _RANKS[head + ".{index}"], n
    return None


_RANKS = {name: i for i, name in enumerate(ORDER)}


def expected_sections(n_logs: int, n_artifacts: int, two_samples: bool) -> tuple[str, ...]:
    """Every section this version's probe writes for these parameters, in order (optional ones
    left out)."""
    out: list[str] = []
    for name in ORDER:
        if name in OPTIONAL or (name.startswith("s1.") and not two_samples):
            continue
        if name == "log.{index}":
            out += [f"log.{i}" for i in range(n_logs)]
        elif name == "art.{index}":
            out += [f"art.{i}" for i in range(n_artifacts)]
        else:
            out.append(name)
    return tuple(out)
