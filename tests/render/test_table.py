"""Golden tests of the terminal report, rendered by the real CLI (`vastprobe analyze`) from captures
recorded on real processes (fixtures/reports/NOTE.md): the seed case from inside its container and
from the host, an orphan holding a pipe, a stopped child, a healthy host. Recorded snapshots make
them exact on a shared host: PIDs, times and neighbours are the ones of the recording.

After a deliberate change to the report, rewrite the expected files with
`.venv/bin/python fixtures/reports/record.py --render-only` and review the diff."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fixtures.reports.record import WIDTHS, golden_path, read_capture, render
from tests.paths import REPO

CASES = [(case, w) for case, widths in WIDTHS.items() for w in widths]


@pytest.mark.parametrize(("case", "width"), CASES, ids=[f"{c}-{w}" for c, w in CASES])
def test_terminal_report_matches_its_golden(case: str, width: int) -> None:
    got = render(case, width)
    want = golden_path(case, width).read_text()
    assert got == want, f"{case} at {width} columns differs from {golden_path(case, width).name}"
    assert max(len(line) for line in got.splitlines()) <= width  # nothing runs past the edge


def analyze_json(case: str, *extra: str) -> tuple[bytes, dict]:
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", "-", "--format", "json", *extra],
                       input=read_capture(case), capture_output=True, timeout=60, cwd=REPO)  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    return r.stdout, json.loads(r.stdout)["hosts"][0]


@pytest.mark.parametrize("case", ["seed-inside", "seed-host"])
def test_seed_story(case: str) -> None:
    """The headline names the OOM kill and the waiting chain; the OOM incident comes first, the
    chain under it; sshd, a daemon in a session of its own, is in no finding."""
    _raw, host = analyze_json(case, "--snapshot")
    assert host["verdict"] == "stalled"
    assert "cuzk-bench was OOM-killed" in host["headline"] and "wait on cuzk-daemon" in host["headline"]
    first = host["incidents"][0]
    assert first["root"]["rule"] == "oom-killed-child"
    assert first["consequences"][0]["rule"] == "do-wait-orphan"
    assert first["headline"] == host["headline"]
    procs = host["snapshot"]["processes"]
    sshd = next(p for p in procs if p["comm"] == "sshd" and p["pid"] in host["scope"])
    assert sshd["session"] == sshd["pid"]  # a daemon in its own session, in scope: the test can fail
    text = json.dumps(host["findings"])
    assert "sshd" not in text and f"({sshd['pid']})" not in text
    # every finding of warning or worse lands in exactly one incident; info alone is a note
    grouped = sorted(json.dumps(f, sort_keys=True) for i in host["incidents"] for f in (i["root"], *i["consequences"]))
    serious = sorted(json.dumps(f, sort_keys=True) for f in host["findings"] if f["severity"] != "info")
    assert grouped == serious
    assert [f for f in host["findings"] if f["severity"] == "info"]  # the host's earlier OOM kills: notes


@pytest.mark.parametrize("case", ["seed-inside", "seed-host"])
def test_seed_tree_nests_entrypoint_benchmark_daemon(case: str) -> None:
    lines = golden_path(case, WIDTHS[case][-1]).read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if " entrypoint.sh  S do_wait" in line)
    assert "└─ waits for child → " in lines[i + 1] and " benchmark.sh  S do_wait" in lines[i + 1]
    assert lines[i + 2].index("└─") == lines[i + 1].index("└─") + 3  # one level deeper
    assert " cuzk-daemon  ◀ blocker (idle)  S inet_csk_accept" in lines[i + 2]


@pytest.mark.parametrize("case", ["seed-inside", "seed-host"])
def test_json_of_the_seed_case_is_small_unless_the_snapshot_is_asked_for(case: str) -> None:
    raw, host = analyze_json(case)
    assert len(raw) < 8 * 1024, len(raw)
    assert "snapshot" not in host and host["headline"] and host["incidents"]
    _, brief = analyze_json(case, "--brief")  # what --brief always did, now the default
    full, whole = analyze_json(case, "--snapshot")
    assert len(full) > 10 * len(raw) and whole["snapshot"]["processes"]  # the snapshot is the bulk

    def same(h: dict) -> dict:
        return {k: v for k, v in h.items() if k not in ("snapshot", "timings")}  # analysis times differ

    assert same(brief) == same(whole) == same(host)


def test_ndjson_and_brief_table(tmp_path) -> None:
    env = {**os.environ, "COLUMNS": "100"}
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", "-", "--format", "ndjson"],
                       input=read_capture("stopped-child"), capture_output=True, timeout=60, cwd=REPO)  # fmt: skip
    line, end = (json.loads(x) for x in r.stdout.splitlines())
    assert "snapshot" not in line and line["schema"] == "vastprobe.report/1" and line["verdict"] == "stalled"
    assert end["summary"]["verdict"]["stalled"] == 1 and end["summary"]["exit_code"] == r.returncode == 1
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", "-", "--format", "table", "--brief"],
                       input=read_capture("stopped-child"), capture_output=True, timeout=60, cwd=REPO, env=env)  # fmt: skip
    assert r.stdout.decode().splitlines()[0].startswith("local  STALLED  trainer (4) is stopped (T)")
    assert len(r.stdout.decode().splitlines()) == 1  # the headline alone (it printed the host's facts too)


def test_verbose_lists_every_process_and_all_evidence() -> None:
    quiet = render("healthy", 100)
    loud = render("healthy", 100, "-v")
    assert "none named by a finding" in quiet and "processes in scope (4)" in loud
    assert "worker worker.py" in loud and "worker worker.py" not in quiet
    assert "hint:" in loud and "hint:" not in quiet  # the folded notes, in full


def test_a_cut_command_line_keeps_its_script_name() -> None:
    """At 80 columns the tree's and the table's command lines give up their middle, not their end:
    `/bin/bash /tmp/…seed/entrypoint.sh`, not `/bin/bash /tmp/vastprobe-golden/s…`."""
    text = golden_path("seed-inside", 80).read_text()
    tree = next(line for line in text.splitlines() if " entrypoint.sh  S do_wait" in line)
    assert tree.endswith("…seed/entrypoint.sh") and "/bin/bash /tmp/" in tree, tree
    row = next(line for line in text.splitlines() if line.lstrip().startswith("1       0 S  do_wait"))
    assert row.endswith("entrypoint.sh") and "…" in row, row


@pytest.mark.parametrize(
    ("command", "keep", "want"),
    [
        ("/usr/bin/python3 /workspace/train.py --batch-size 64 --lr 3e-4 --epochs 90 --output /workspace/runs/exp12",
         40, "…/python3 …/train.py…workspace/runs/exp12"),
        ("/usr/bin/python3 /workspace/train.py --batch-size 64 --lr 3e-4 --epochs 90 --output /workspace/runs/exp12",
         60, "/usr/bin/python3 /workspace/train.py…ut /workspace/runs/exp12"),
        ("/bin/bash /tmp/vastprobe-golden/seed/entrypoint.sh", 33, "/bin/bash /tmp/…seed/entrypoint.sh"),
        ("sh -c cd /tmp/vastprobe-golden/stopped-child; ./entrypoint.sh; echo exited", 50,
         "sh -c cd /tmp/vastprobe-…entrypoint.sh; echo exited"),
    ],
)  # fmt: skip
def test_middle_cut(command: str, keep: int, want: str) -> None:
    from vastprobe.render.layout import middle_cut

    got = middle_cut(command, keep)
    assert got == want and len(got) == keep + 1


def test_a_pid_that_matches_nothing_counts_only_the_others_processes() -> None:
    """The N of "no process matches … (N processes seen)" leaves out the probe's own processes (its
    shell, its reads): they are in every snapshot."""
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", "-", "--format", "json", "--pid", "999999",
                        "--snapshot"], input=read_capture("healthy"), capture_output=True, timeout=60, cwd=REPO)  # fmt: skip
    assert r.returncode == 3, r.stderr
    host = json.loads(r.stdout)["hosts"][0]
    own = set(host["snapshot"]["excluded_pids"])
    seen = [p["pid"] for p in host["snapshot"]["processes"]]
    assert own & set(seen), "the capture holds none of the probe's own processes: this test would prove nothing"
    others = len([p for p in seen if p not in own])
    assert f"matches --pid 999999 ({others} processes seen)" in host["error"], host["error"]


def test_one_process_in_scope_is_one_process() -> None:
    """The headline, the facts line and the process note all say "1 process", never "1 processes"."""
    env = {**os.environ, "COLUMNS": "100"}
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", "-", "--format", "table", "--pid", "4"],
                       input=read_capture("healthy"), capture_output=True, timeout=60, cwd=REPO, env=env)  # fmt: skip
    text = r.stdout.decode()
    assert "1 process in scope" in text and "1 processes" not in text, text
