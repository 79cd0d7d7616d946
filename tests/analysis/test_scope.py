"""`--match` is bounded: a tenant's processes with command lines of 64 KiB (the most the probe
reads: 64 arguments of 1 KiB) cannot make a backtracking pattern cost the host its diagnosis."""

from __future__ import annotations

import shlex
import subprocess

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
