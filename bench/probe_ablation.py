"""Where the probe's CPU goes on this machine: each source switched off in turn (issue 36).

Run by hand (not in CI), as root, with a C compiler:

    .venv/bin/python bench/probe_ablation.py [--runs 9] [--size 500] [--threads 4] [--sample 0]
        [--template FILE | --template git:REV]

It spawns SIZE extra processes of THREADS threads each (bench/probe_cost.py's sleeper), renders the
probe once as it is and once per variant with one source switched off (a text edit of the template:
the call of a section in vp_main, or a file kind left out of a list), and runs them RUNS rounds: in
each round every variant runs right beside a run of the whole probe (which goes first alternates),
so a load that comes and goes on the machine moves both of a pair. Reported per variant: median CPU
seconds of the probe's whole process tree (RUSAGE_CHILDREN), the median over the rounds of what it
saves against the whole probe run beside it (the source's cost and share), and output bytes.
Switching a section off also switches off what it feeds (the syscall list comes from s0's awk, the
held files from the fd awk), so the shares overlap where sections share a pass; the rows say which.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from probe_cost import FLOOR_NAME, build_floor, build_threaded, measure, previous_template  # noqa: E402

from vastprobe.probe.script import ProbeParams, render_script, script_template  # noqa: E402

#: The list of the files the s0 pass reads (vp_lists), and how the probe before issue 36 built it
#: (bench/peers/probe-2026-12-05.sh, for --template).
L0 = 'vp_l0="$vp_ls $vp_li $vp_lw $vp_lg $vp_lthr"'
PRINTF = {k: f"printf '%s/{k} ' \"$@\"" for k in ("status", "io", "wchan", "cgroup")}

#: name -> (what it switches off, [(old, new) edits of script.sh]); an edit whose old text is not in
#: the template is an error (the variant would measure nothing).
VARIANTS: dict[str, list[tuple[str, str]]] = {
    "watchdog (vp_watch, its deadline sleep)": [("\tvp_watch &\n\tvp_wd=$!\n", "\tvp_wd=\n")],
    "meta, host, s0.now (builtins, one grep)": [
        ("\tsecn meta vp_meta\n\tsecn host vp_host\n\tsecn s0.now vp_now\n", "\tvp_meta >/dev/null\n")
    ],
    "s0: status files": [(L0, L0.replace("$vp_ls ", "")), (PRINTF["status"] + " && ", "")],
    "s0: io files": [(L0, L0.replace("$vp_li ", "")), (PRINTF["io"] + " && ", "")],
    "s0: wchan files (and the syscalls they pick)": [
        (L0, L0.replace("$vp_lw ", "")),
        (PRINTF["wchan"] + " &&\n\t\t", ""),
    ],
    "s0: cgroup files (and cgmap, cgmem)": [
        (L0, L0.replace("$vp_lg ", "")),
        (" &&\n\t\t" + PRINTF["cgroup"] + ")", ")"),
    ],
    "s0: threads' wchan (vp_threads)": [
        ('\t\t+*) vp_threads "${vp_w#+}" ;;\n', '\t\t+*) vp_lenv="$vp_lenv ${vp_w#+}/environ" ;;\n')
    ],
    "s0: the whole second grep and awk (vp_s0; syscall too)": [("\tvp_s0\n", "\tvp_lsys=\n")],
    "syscall (grep of picked syscall and thread stat files)": [("\tsecn syscall vp_syscall\n", "")],
    "GPU sections (no nvidia-smi here: builtins)": [
        ("\tvp_gpu_sec s0.gpu vp_gpu\n", ""),
        ("\tvp_gpu_sec gpuapps vp_gpuapps\n", ""),
    ],
    "cmdline (grep -z, tr, awk)": [("\tsecn cmdline vp_cmdline\n", "")],
    "env (environs: grep -z, tr, awk)": [("\tsecn env vp_env\n", "")],
    "fr (flight recorder dumps)": [("\tvp_fr_sec\n", "")],
    "fd and net (ls, awk, socket tables)": [("\tvp_fd\n", "")],
    "net only (socket tables in the fd awk)": [
        ('\t\t\t\treadns("/proc/self", "self")\n', ""),
        ("for (r = 0; r < 16; r++)", "for (r = 0; r < 0; r++)"),
    ],
    "held (stat of held logs, their tails)": [("\tvp_held_sec\n", "")],
    "kmsg (dmesg, head, awk)": [("\tvp_k=$(vp_kmsg)\n", "\tvp_k='@@lines 1'\n")],
    "files (guarded: df, artifacts glob, stat)": [("\tvp_guard vp_files\n", "")],
}

WHOLE = "the whole probe"


def variant(template: str, edits: list[tuple[str, str]]) -> str:
    """The template with the edits made; an edit whose text is not there is skipped when another
    one made (the same cut, as another version of the script wrote it)."""
    original = template
    for old, new in edits:
        if old in template:
            template = template.replace(old, new, 1)
        elif len(edits) == 1 or not any(o in original for o, _ in edits):
            sys.exit(f"edit not in the script: {old!r}")
    return template


def render(template: str, params: ProbeParams) -> str:
    whole = render_script(params)
    start = whole.index("# ---- parameters")
    end = whole.index("# ---- end of parameters ----")
    return template.replace("#@PARAMS@", whole[whole.index("\n", start) + 1 : end], 1)


def tcp_rows() -> int:
    return len(Path("/proc/net/tcp").read_text().splitlines()) - 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--size", type=int, default=500)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--sample", type=float, default=0)
    ap.add_argument("--only", default="", help="comma-separated substrings of variant names")
    ap.add_argument("--template", default="", help="another probe's template: a file, or git:REV")
    args = ap.parse_args()
    params = ProbeParams(sample=args.sample)
    template = previous_template(args.template) if args.template else script_template()
    scripts = {WHOLE: render(template, params)}
    for name, edits in VARIANTS.items():
        if not args.only or any(s in name for s in args.only.split(",")):
            scripts[name] = render(variant(template, edits), params)
    tcp_start = tcp_rows()
    with tempfile.TemporaryDirectory() as workdir:
        floor = build_floor(workdir)
        threaded = build_threaded(workdir) if args.threads > 1 else None
        argv = [threaded, str(args.threads)] if threaded else ["sleep", "3600"]
        sleepers = [subprocess.Popen(argv) for _ in range(args.size)]
        try:
            runs: dict[str, list[tuple[float, float, int]]] = {n: [] for n in scripts}
            saved: dict[str, list[float]] = {n: [] for n in scripts}
            floor_cpu: list[float] = []
            for r in range(args.runs):
                for name, script in scripts.items():
                    if name == WHOLE:
                        continue
                    pair = [(WHOLE, scripts[WHOLE]), (name, script)]
                    got = {n: measure(["dash", "-s"], s) for n, s in (pair if r % 2 == 0 else pair[::-1])}
                    runs[WHOLE].append(got[WHOLE])
                    runs[name].append(got[name])
                    saved[name].append(got[WHOLE][0] - got[name][0])
                if floor:
                    floor_cpu.append(measure([floor], "")[0])
        finally:
            for p in sleepers:
                p.kill()
            for p in sleepers:
                p.wait()
    tcp_end = tcp_rows()
    cpu = {n: statistics.median(c for c, _, _ in r) for n, r in runs.items()}
    out = {n: int(statistics.median(b for _, _, b in r)) for n, r in runs.items()}
    whole = cpu[WHOLE]
    print(f"{args.size} extra processes x {args.threads} threads, --sample {args.sample:g}, {args.runs} pairs each")
    if floor_cpu:
        print(f"{FLOOR_NAME}: {statistics.median(floor_cpu):.3f} CPU s")
    # the socket tables are read whole: another user's connections on this machine move the net row
    print(f"rows of /proc/net/tcp: {tcp_start} at the start, {tcp_end} at the end")
    print("| switched off | CPU s (median) | saves, CPU s | share of the whole | output bytes |")
    print("|---|---:|---:|---:|---:|")
    for name in scripts:
        cut = statistics.median(saved[name]) if saved[name] else 0.0
        share = f"{cut / whole:.0%}" if name != WHOLE else "-"
        print(f"| {name} | {cpu[name]:.3f} | {cut:+.3f} | {share} | {out[name]} |")


if __name__ == "__main__":
    main()
