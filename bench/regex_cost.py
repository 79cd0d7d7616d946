"""What a line built to make regexes backtrack costs each parser, now and in earlier revisions.

Run by hand (not in CI), from the repository:

    .venv/bin/python bench/regex_cost.py [--length 8192] [--lines 60] [--old d336526:vastprobe/parsers/kmsg.py ...]

Now: every section parser is fed `--lines` lines of `--length` characters in many shapes (runs of
one character, of a field separator, of a word the parser looks for), behind the prefixes real
sections carry; the worst shape's total time is reported per parser. Then, for each `--old
REV:PATH`, the module-level regexes of that file at that revision (read with `git show`, nothing
else of the old module runs) are tried with `search` on the same lines: the cost of the parsers
the issue measured (an 8 KiB line cost 0.5 s).
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vastprobe.analysis.logs import FATAL  # noqa: E402
from vastprobe.parsers import (  # noqa: E402
    cgroup,
    cmdline,
    df,
    fd,
    files,
    host,
    kmsg,
    locks,
    mounts,
    net,
    nvidia_smi,
    proc_io,
    proc_stat,
    proc_status,
    syscall,
    threads,
    wchan,
)
from vastprobe.probe.sections import split_sections  # noqa: E402

SHAPES = ["a", " ", "0", "1 ", "1  ", "x 1 y", "(", ")", ":", "|", "[ ", "-> ", ", UID ", "Killed process ",
          "INFO: task ", " invoked oom-killer:", "NVRM: Xid (", "SXid (", "PCI:0000:", "/proc/1/", "oom-kill:",
          ",pid=", ",task=", "Task in ", "memory: usage ", "total-vm:", "0,", "=", "\\040", "\\", "avg10=", "0m",
          "0.", "x("]  # fmt: skip
HEADS = ["", "|", "@ss u_str ESTAB 0 0 ", "lr-x------ 1 0 0 64 Dec  2 16:25 ", "unix:", "tcp:", "/proc/1/stat:1 ",
         "/proc/1/status:", "1: ", "0:1 ", "[ 1.0] ", "Mar  2 17:35:10 host kernel: ", "6,1,1,-;", "/proc/uptime:"]  # fmt: skip
TAILS = ["", "z", "\x00"]

PARSERS: dict[str, Callable[[str], object]] = {
    "kmsg": lambda t: kmsg.parse_kmsg_sections("@@source dmesg\n" + t + "\n@@lines 400", None, 1700000000, 1.7e9),
    "fd": lambda t: fd.parse_fd_section("/proc/1/fd:\n" + t, escaped=True),
    "net": lambda t: net.parse_net_section(t),
    "artifacts": files.parse_artifacts,
    "logstats": lambda t: files.parse_logstats("@@log 0\n" + t),
    "locks": locks.parse_locks,
    "mounts": mounts.parse_fuse_mounts,
    "stat": proc_stat.parse_stat_section,
    "status": proc_status.parse_status_section,
    "cgroup": cgroup.parse_proc_cgroup_section,
    "cgmem": lambda t: cgroup.parse_cgmem(t, t),
    "df": df.parse_df,
    "host": lambda t: host.parse_host(t, host.parse_meta(t)),
    "times": host.parse_times,
    "gpu": nvidia_smi.parse_gpu_query,
    "gpuapps": nvidia_smi.parse_compute_apps,
    "syscall": lambda t: syscall.parse_syscall_section(t, "x86_64"),
    "threads": threads.parse_threads_section,
    "cmdline": cmdline.parse_cmdline_section,
    "wchan": wchan.parse_wchan_section,
    "io": proc_io.parse_io_section,
    "log tail (FATAL)": lambda t: [FATAL.search(x) for x in t.split("\n")],
    "sections": lambda t: split_sections(t, "ab" * 16),
}


def lines(head: str, shape: str, tail: str, length: int, n: int) -> str:
    one = head + (shape * (length // len(shape) + 1))[: length - len(head) - len(tail)] + tail
    return "\n".join([one] * n)


def worst(fn: Callable[[str], object], length: int, n: int) -> tuple[float, str]:
    """The slowest shape, timed on one line first and on `n` only when one line is slow."""
    best = (0.0, "")
    for head in HEADS:
        for shape in SHAPES:
            for tail in TAILS:
                text = lines(head, shape, tail, length, 1)
                t0 = time.perf_counter()
                fn(text)
                dt = time.perf_counter() - t0
                if dt > best[0]:
                    best = (dt, repr(head + shape + "…" + tail))
    t0 = time.perf_counter()
    fn(lines(*eval_shape(best[1]), length, n)) if best[1] else None
    return time.perf_counter() - t0, best[1]


def eval_shape(text: str) -> tuple[str, str, str]:
    s = ast.literal_eval(text)
    head_shape, _, tail = s.partition("…")
    for head in sorted(HEADS, key=len, reverse=True):
        if head_shape.startswith(head):
            return head, head_shape[len(head) :] or " ", tail
    return "", head_shape, tail


def old_patterns(spec: str) -> dict[str, re.Pattern[str]]:
    rev, _, path = spec.partition(":")
    source = subprocess.run(
        ["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    out = {}
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "re.compile"
        ):
            name = ast.unparse(node.targets[0])
            out[name] = eval(compile(ast.Expression(node.value), path, "eval"), {"re": re})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--lines", type=int, default=60)
    ap.add_argument("--old", action="append", default=[])
    args = ap.parse_args()
    print(f"{args.lines} lines of {args.length} characters, the slowest shape per parser (this checkout)")
    print("| parser | seconds for all lines | slowest shape |")
    print("|---|---:|---|")
    for name, fn in PARSERS.items():
        dt, shape = worst(fn, args.length, args.lines)
        print(f"| {name} | {dt:.3f} | {shape[:50]} |")
    for spec in args.old:
        print(f"\n{spec}: module-level regexes, `search` on one line of {args.length}, the slowest shape each")
        print("| regex | seconds per line | x lines | slowest shape |")
        print("|---|---:|---:|---|")
        for name, pat in old_patterns(spec).items():
            best = (0.0, "")
            for head in HEADS:
                for shape in SHAPES:
                    for tail in TAILS:
                        text = lines(head, shape, tail, args.length, 1)
                        t0 = time.perf_counter()
                        pat.search(text)
                        dt = time.perf_counter() - t0
                        if dt > best[0]:
                            best = (dt, repr(head + shape + "…" + tail))
            print(f"| {name} | {best[0]:.4f} | {best[0] * args.lines:.2f} | {best[1][:50]} |")


if __name__ == "__main__":
    main()
