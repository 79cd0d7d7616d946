"""Cost of one probe run on this machine, at 100, 500 and 2000 extra processes.

Run by hand (not in CI), as root, with strace and a C compiler installed:

    .venv/bin/python bench/probe_cost.py [--runs 5] [--sizes 100,500,2000] [--threads 4]
        [--previous bench/peers/probe-2026-12-04.sh | --previous git:REV] [--netlink K] [--gloo K]

For each size it spawns that many extra `sleep` processes (with --threads N: a small compiled
program with N threads, all asleep, as a host of Python and CUDA programs has), and with --netlink K
another K processes that each hold a netlink socket (as systemd, udev and NetworkManager do: a socket
no table the probe prints lists), and with --gloo K another K shaped as gloo ranks (a main thread and
two run loops named pt_gloo_runloop waiting on futexes, a thread in epoll_wait: the probe reads those
futex threads' names and system calls, at most 16 processes), then measures, alternating:
- the vastprobe probe with one sample (--sample 0) and with the default two samples 1 s apart
  (the sleep costs no CPU; its second sample re-reads stat and io of every process);
- a previous probe (--previous; bench/peers/probe-2026-12-02.sh is the script before the wait-for
  graph's sources, probe-2026-12-04.sh the one before threads' and pollers' system calls; or
  `git:REV`, the probe as commit REV had it, e.g. `git:5a17113` before found logs' tails), same
  parameters, --sample 0 and 1;
- the named peer, the loop people type by hand:
  `for p in /proc/[0-9]*; do cat $p/stat $p/status $p/wchan; ls -la $p/fd; done`;
- the floor: bench/proc_floor.c, one compiled process reading what the probe reads (six files
  and every fd link of every process) with no fork and no parsing; no shell tool can do it for less.
Reported per tool: forks (strace -ff), CPU seconds of the whole process tree (RUSAGE_CHILDREN),
wall seconds (minus the sample sleep) and output bytes; medians over --runs runs.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vastprobe.probe.script import ProbeParams, render_script  # noqa: E402

PEER = "for p in /proc/[0-9]*; do cat $p/stat $p/status $p/wchan 2>/dev/null; ls -la $p/fd 2>/dev/null; done\n"
FORK = re.compile(r"^(clone3?|fork|vfork)\(.*= (\d+)$")
PEER_NAME = "peer: per-PID cat/ls loop"
OLD_NAME = "previous probe, --sample 0"
OLD_NAME_1 = "previous probe, --sample 1"
THREADED_C = r"""
#include <pthread.h>
#include <stdlib.h>
/* every thread waits on a condition nobody signals: a futex wait, as idle Python and CUDA threads do */
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static void *nap(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    for (;;) pthread_cond_wait(&c, &m);
    return 0;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    pthread_t t;
    for (int i = 1; i < n; i++) pthread_create(&t, 0, nap, 0);
    nap(0);
}
"""

#: A process holding a netlink socket, asleep.
NETLINK_PY = (
    "import socket, time\ns = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\ns.bind((0, 0))\ntime.sleep(3600)"
)


#: A process shaped as a gloo rank, asleep: its main thread and two run loops (by name) on futexes with no
#: deadline, and a tcp loop in epoll_wait.
GLOO_PY = """import ctypes, select, threading
def loop():
    ctypes.CDLL(None).prctl(15, b"pt_gloo_runloop", 0, 0, 0)
    threading.Event().wait()
for _ in range(2):
    threading.Thread(target=loop, daemon=True).start()
ep = select.epoll()
threading.Thread(target=lambda: ep.poll(), daemon=True).start()
threading.Event().wait()
"""


def previous_template(where: str) -> str:
    """A previous probe's template: a file, or `git:REV` for the probe as that commit had it."""
    if where.startswith("git:"):
        return subprocess.run(["git", "show", f"{where[4:]}:vastprobe/probe/script.sh"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout  # fmt: skip
    return Path(where).read_text()


def render_old(params: ProbeParams, template: str) -> str:
    """A previous script with today's parameter block (it ignores the parameters it never had)."""
    new = render_script(params)
    start = new.index("# ---- parameters")
    end = new.index("# ---- end of parameters ----")
    block = new[new.index("\n", start) + 1 : end]
    return template.replace("#@PARAMS@", block, 1)


def run_probe(argv: list[str], script: str, prefix: list[str] | None = None) -> bytes:
    """`argv` with the script on its stdin as vastprobe's transports give it: a probe that ends its own
    shell (`; exit`) has its stdin held open until its output ends (its watchdog waits on it); an
    older one, which would read on for more script, gets stdin closed after the script."""
    p = subprocess.Popen([*(prefix or []), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(script.encode())
    if not script.rstrip().endswith("; exit"):
        p.stdin.close()
    else:
        p.stdin.flush()
    out = p.stdout.read()
    if not p.stdin.closed:
        p.stdin.close()
    p.wait()
    return out


FLOOR_NAME = "floor: compiled reader (proc_floor.c)"


def measure(argv: list[str], script: str) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = run_probe(argv, script)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, len(out)


def forks(argv: list[str], script: str) -> int:
    with tempfile.TemporaryDirectory() as d:
        run_probe(argv, script, ["strace", "-ff", "-qq", "-o", f"{d}/t", "-e", "trace=clone,clone3,fork,vfork"])
        n = 0
        for f in Path(d).iterdir():
            n += sum(1 for line in f.read_text().splitlines() if (m := FORK.search(line)) and int(m.group(2)) > 0)
        return n


def build_floor(workdir: str) -> str | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    exe = f"{workdir}/proc_floor"
    subprocess.run([cc, "-O2", "-o", exe, str(Path(__file__).with_name("proc_floor.c"))], check=True)
    return exe


def build_threaded(workdir: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("--threads needs a C compiler")
    src = Path(workdir) / "threaded.c"
    src.write_text(THREADED_C)
    exe = f"{workdir}/threaded"
    subprocess.run([cc, "-O2", "-pthread", "-o", exe, str(src)], check=True)
    return exe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="100,500,2000")
    ap.add_argument("--threads", type=int, default=1, help="threads per extra process (1: plain sleep)")
    ap.add_argument("--netlink", type=int, default=0, help="extra processes holding a netlink socket")
    ap.add_argument("--gloo", type=int, default=0, help="extra processes shaped as gloo ranks")
    ap.add_argument("--previous", default=str(Path(__file__).with_name("peers") / "probe-2026-12-04.sh"),
                    help="a previous probe's template: a file, or git:REV")  # fmt: skip
    args = ap.parse_args()
    if shutil.which("strace") is None:
        sys.exit("needs strace")
    previous = previous_template(args.previous)
    # name -> (argv, stdin script, sample sleep to take off the wall time)
    tools: dict[str, tuple[list[str], str, float]] = {
        "vastprobe probe, --sample 0": (["dash", "-s"], render_script(ProbeParams(sample=0)), 0.0),
        "vastprobe probe, --sample 1 (default)": (["dash", "-s"], render_script(ProbeParams(sample=1.0)), 1.0),
        OLD_NAME: (["dash", "-s"], render_old(ProbeParams(sample=0), previous), 0.0),
        OLD_NAME_1: (["dash", "-s"], render_old(ProbeParams(sample=1.0), previous), 1.0),
        PEER_NAME: (["dash", "-s"], PEER, 0.0),
    }
    with tempfile.TemporaryDirectory() as workdir:
        floor = build_floor(workdir)
        threaded = build_threaded(workdir) if args.threads > 1 else None
        print(
            f"previous probe: {Path(args.previous).name}; extra processes: "
            + (f"{args.threads} threads each" if threaded else "sleep")
            + (f"; {args.netlink} holding a netlink socket" if args.netlink else "")
            + (f"; {args.gloo} shaped as gloo ranks" if args.gloo else "")
        )
        if floor:
            tools[FLOOR_NAME] = ([floor], "", 0.0)
        print(
            "| extra processes | tool | forks | CPU s (median) | wall s (median) | output bytes | CPU vs peer "
            "| CPU vs floor | CPU vs previous probe |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for size in (int(s) for s in args.sizes.split(",")):
            argv = [threaded, str(args.threads)] if threaded else ["sleep", "3600"]
            sleepers = [subprocess.Popen(argv) for _ in range(size)]
            sleepers += [subprocess.Popen([sys.executable, "-c", NETLINK_PY]) for _ in range(args.netlink)]
            sleepers += [subprocess.Popen([sys.executable, "-c", GLOO_PY]) for _ in range(args.gloo)]
            time.sleep(0.5 if args.netlink or args.gloo else 0)
            try:
                results: dict[str, list[tuple[float, float, int]]] = {t: [] for t in tools}
                for _ in range(args.runs):
                    for name, (argv, script, _sleep) in tools.items():
                        results[name].append(measure(argv, script))
                fork_counts = {name: forks(argv, script) for name, (argv, script, _s) in tools.items()}
            finally:
                for p in sleepers:
                    p.kill()
                for p in sleepers:
                    p.wait()
            med = {
                n: (
                    statistics.median(c for c, _, _ in r),
                    statistics.median(w for _, w, _ in r) - tools[n][2],
                    int(statistics.median(b for _, _, b in r)),
                )
                for n, r in results.items()
            }
            peer_cpu = med[PEER_NAME][0]
            floor_cpu = med[FLOOR_NAME][0] if FLOOR_NAME in med else 0.0
            old = {"0": med[OLD_NAME][0], "1": med[OLD_NAME_1][0]}
            for name in tools:
                cpu, wall, size_b = med[name]
                vs_peer = f"{cpu / peer_cpu:.2f}x" if peer_cpu else "-"
                vs_floor = f"{cpu / floor_cpu:.2f}x" if floor_cpu else "-"
                same = old["1"] if "--sample 1" in name else old["0"]
                vs_old = f"{cpu / same:.2f}x" if name.startswith("vastprobe") and same else "-"
                print(
                    f"| {size} | {name} | {fork_counts[name]} | {cpu:.3f} | {wall:.3f} | {size_b} | {vs_peer} | {vs_floor} "
                    f"| {vs_old} |"
                )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
