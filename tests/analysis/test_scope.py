"""`--match` is bounded: a tenant's processes with command lines of 64 KiB (the most the probe
reads: 64 arguments of 1 KiB) cannot make a backtracking pattern cost the host its diagnosis."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

from tests.helpers import children_of, vastprobe_json, wait_for
from vastprobe.analysis.scope import MATCH_PREFIX, match_text


def test_match_text_is_a_bounded_prefix() -> None:
    assert match_text(("python", "train.py"), "python3") == "python train.py"
    assert match_text((), "kworker") == "kworker"
    big = match_text(tuple("x" * 1024 for _ in range(64)), "sh")
    assert len(big) == MATCH_PREFIX and big.startswith("x" * 1024 + " x")


def test_a_hundred_64k_command_lines_against_a_backtracking_match(reap: list[subprocess.Popen]) -> None:
    """The issue's attack: 100 processes whose 64 arguments are `python python …` (1 KiB each)
    against `--match 'python.*train'`, which Python's regex engine tries from every `python` to
    the end of the line: 38 s of analysis, and the host went "not analysed". Now the job that
    matches is found and the analysis stays within a few seconds."""
    arg = ("python " * 146)[:1023]
    hostile = subprocess.Popen(
        ["sh", "-c", "i=0; while [ $i -lt 100 ]; do sh -c 'sleep 600; :' " + " ".join([shlex.quote(arg)] * 64)
         + " & i=$((i+1)); done; wait"],
        start_new_session=True,
    )  # fmt: skip
    reap.append(hostile)
    job = subprocess.Popen(["sh", "-c", "sleep 600; :", "python", "train.py"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: len(children_of(hostile.pid)) == 100, timeout=30, what="the 100 hostile processes")
    _rc, host = vastprobe_json("--sample", "0", "--match", "python.*train")
    assert host["status"] == "ok", host["error"]
    assert job.pid in host["scope"], host["scope"]
    assert not set(children_of(hostile.pid)) & set(host["scope"])
    one = next(p for p in host["snapshot"]["processes"] if p["ppid"] == hostile.pid)
    assert len(" ".join(one["cmdline"])) > 60_000  # the probe read them whole: 61 args of 1 KiB each
    assert host["timings"]["analysis"] < 10, host["timings"]  # 38 s before; ~1 s here


def test_a_match_that_backtracks_without_end_is_cut_with_one_line(reap: list[subprocess.Popen]) -> None:
    """The user's pattern `(x+x+)+y` against a tenant's command line of 3,000 `x`s: Python's `re`
    backtracks for hours inside the engine, where neither the analysis budget nor SIGTERM runs, so
    `diagnose` hung and ignored its kill (found by a helper). Each search is bounded now: the host is
    not diagnosed, one line says why, exit 3, in seconds."""
    sleeper = subprocess.Popen(["sh", "-c", "sleep 600; :", "x" * 3000], start_new_session=True)
    reap.append(sleeper)
    wait_for(lambda: children_of(sleeper.pid) != [], what="the tenant's process")
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--match", "(x+x+)+y", "--format",
                        "json", "--sample", "0"], capture_output=True, text=True, timeout=60)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    assert host["status"] == "probe-error" and host["verdict"] == "unknown" and r.returncode == 3, host
    assert "--match '(x+x+)+y' ran past 0.5 s on the command line of pid" in host["error"], host["error"]
    assert "please report" not in host["error"] and "Traceback" not in r.stderr
