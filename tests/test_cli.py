"""The CLI as a user runs it: a real subprocess, real exit codes, real output."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, wait_for

VP = [sys.executable, "-m", "vastprobe"]


def run(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VP, *args], capture_output=True, text=True, timeout=120, **kw)


def test_version() -> None:
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("vastprobe ")


def test_diagnose_local_json() -> None:
    r = run("diagnose", "local", "--format", "json", "--sample", "0.2", "--snapshot")
    doc = json.loads(r.stdout)
    assert doc["schema"] == "vastprobe.report/1"
    host = doc["hosts"][0]
    assert host["status"] == "ok" and host["target"] == "local"
    assert host["verdict"] in ("healthy", "degraded", "stalled")
    assert r.returncode == (1 if host["verdict"] == "stalled" else 0)
    assert set(host) >= {"target", "status", "error", "verdict", "findings", "snapshot", "timings"}
    assert host["snapshot"]["processes"]
    assert doc["summary"]["exit_code"] == r.returncode and doc["summary"]["verdict"][host["verdict"]] == 1


def test_a_pid_that_matches_nothing_beside_one_that_does_is_said() -> None:
    """Found by a helper: `--pid 1 --pid 4000000` diagnosed pid 1 alone and said nothing of the
    mistyped one. One line on stderr names it; the diagnosis of the rest stands."""
    job = subprocess.Popen(["sleep", "600"])
    try:
        free = next(p for p in range(4_000_000, 4_000_100) if not Path(f"/proc/{p}").exists())
        r = run("diagnose", "local", "--pid", str(job.pid), "--pid", str(free), "--format", "json", "--sample", "0.2")
    finally:
        job.kill()
        job.wait()
    host = json.loads(r.stdout)["hosts"][0]
    assert r.stderr == f"vastprobe: warning: local: --pid {free} matched no process; diagnosed the rest of the scope\n"
    assert host["verdict"] == "healthy" and r.returncode == 0 and host["scope"] == [job.pid], host["findings"]


def test_piped_json_leaves_the_snapshot_out() -> None:
    """`vastprobe diagnose local | jq` or a cron mail: the findings and the summary, not 0.1-0.6 MB of
    evidence on one line; --snapshot puts it in."""
    r = run("diagnose", "local", "--sample", "0")
    doc = json.loads(r.stdout)
    assert "snapshot" not in doc["hosts"][0] and doc["hosts"][0]["findings"] is not None
    assert doc["summary"] == {
        "hosts": 1,
        "status": {"ok": 1, "unreachable": 0, "auth-failed": 0, "host-key-rejected": 0, "timeout": 0,
                   "probe-error": 0, "skipped": 0},
        "verdict": {v: int(v == doc["hosts"][0]["verdict"]) for v in ("healthy", "degraded", "stalled", "unknown")},
        "exit_code": r.returncode,
        "complete": True,
        "groups": doc["summary"]["groups"],  # (this machine's own state: checked in tests/render/test_summary.py)
    }  # fmt: skip
    assert all(g["hosts"] == "local" for g in doc["summary"]["groups"])
    full = run("diagnose", "local", "--sample", "0", "--snapshot")
    # (not a size ratio: the findings of a busy shared machine ran to 99 KB, beside a 252 KB snapshot)
    assert json.loads(full.stdout)["hosts"][0]["snapshot"]["processes"] and len(full.stdout) > len(r.stdout)


def test_snapshot_and_brief_against_the_format() -> None:
    both = run("diagnose", "local", "--sample", "0", "--brief", "--snapshot")
    assert both.returncode == 2 and "give one of them" in both.stderr and not both.stdout
    table = run("analyze", "-", "--format", "table", "--snapshot", input="")
    assert table.returncode == 2 and "--snapshot is for --format json or ndjson" in table.stderr


def test_snapshot_on_a_terminal_chooses_json() -> None:
    """The table never shows the snapshot, so asking for it on a terminal means JSON (indented)."""
    import pty

    leader, follower = pty.openpty()
    p = subprocess.Popen([*VP, "diagnose", "local", "--sample", "0", "--snapshot"], stdout=follower,
                         stderr=subprocess.DEVNULL)  # fmt: skip
    os.close(follower)
    out = b""
    try:
        while chunk := os.read(leader, 1 << 16):  # read as it writes: a terminal holds a few KB
            out += chunk
    except OSError:  # EIO: the writer closed the terminal
        pass
    finally:
        os.close(leader)
    assert p.wait(120) in (0, 1)
    doc = json.loads(out.decode())
    assert doc["hosts"][0]["snapshot"]["processes"] and b'\n "hosts"' in out.replace(b"\r\n", b"\n")


def test_ndjson_lines_are_stamped_and_end_with_a_summary() -> None:
    r = run("diagnose", "local", "local", "--sample", "0", "--format", "ndjson")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(lines) == 2  # one host (the duplicate is probed once), then the summary
    host, summary = lines
    assert host["schema"] == summary["schema"] == "vastprobe.report/1" and host["generated_at"].endswith("Z")
    assert host["target"] == "local" and "snapshot" not in host and "target" not in summary
    assert summary["summary"]["hosts"] == 1 and summary["summary"]["exit_code"] == r.returncode


def test_diagnose_json_is_default_off_a_terminal() -> None:
    r = run("diagnose", "local", "--sample", "0")
    assert json.loads(r.stdout)["schema"] == "vastprobe.report/1"


def test_diagnose_local_table() -> None:
    r = run("diagnose", "local", "--format", "table", "--sample", "0.2")
    assert r.returncode in (0, 1), r.stderr
    assert "local" in r.stdout and "processes in scope" in r.stdout


def test_usage_error_exits_2() -> None:
    assert run("diagnose").returncode == 2
    assert run("diagnose", "local", "--format", "yaml").returncode == 2
    assert run("diagnose", "local", "--match", "(").returncode == 2


def test_collect_analyze_round_trip(tmp_path: Path) -> None:
    cap = tmp_path / "s.json"
    r = run("collect", "local", "-o", str(cap), "--sample", "0.2")
    assert r.returncode == 0, r.stderr
    data = json.loads(cap.read_text())
    assert data["schema"] == "vastprobe.capture/1" and data["raw_b64"]
    a = run("analyze", str(cap), "--format", "json", "--snapshot")
    doc = json.loads(a.stdout)
    host = doc["hosts"][0]
    assert host["status"] == "ok"
    # analyze re-parses the raw bytes: the same processes as the capture's own snapshot
    assert [p["pid"] for p in host["snapshot"]["processes"]] == [p["pid"] for p in data["snapshot"]["processes"]]


def test_analyze_rejects_non_capture(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something-else"}')
    assert run("analyze", str(bad)).returncode == 2


def test_probe_script_prints_portable_sh() -> None:
    r = run("probe-script", "--log", "/tmp/it's here.log")
    assert r.returncode == 0
    assert "'/tmp/it'\\''s here.log'" in r.stdout
    assert subprocess.run(["dash", "-n"], input=r.stdout, text=True).returncode == 0


def test_hostile_names_do_not_reach_the_terminal(tmp_path: Path, reap) -> None:
    """A process whose argv holds an escape sequence and rich markup is shown inert."""
    import os

    evil = "\x1b]0;pwned\x07[bold red]X[/bold red]\x1b[2J"
    # its own group, reaped whole: sh forks its sleep, which outlived a kill of sh alone for 120 s
    p = subprocess.Popen(["sh", "-c", "sleep 120", evil], start_new_session=True)
    reap.append(p)
    wide = {**os.environ, "COLUMNS": "400"}
    r = run("diagnose", "local", "--format", "table", "--sample", "0", "--pid", str(p.pid), "-v", env=wide)
    assert "\x1b" not in r.stdout
    assert "\\x1b]0;pwned\\x07[bold red]X[/bold red]" in r.stdout
    j = run("diagnose", "local", "--format", "json", "--sample", "0", "--pid", str(p.pid), "--snapshot")
    doc = json.loads(j.stdout)
    argv = next(x for x in doc["hosts"][0]["snapshot"]["processes"] if x["pid"] == p.pid)["cmdline"]
    assert argv[-1] == evil


def test_rules_catalogue_and_explain() -> None:
    r = run("rules", "--format", "json")
    rows = json.loads(r.stdout)
    assert r.returncode == 0 and len(rows) >= 8
    assert all(set(row) == {"rule", "code", "severity", "summary"} for row in rows)
    e = run("rules", "VP102")
    assert e.returncode == 0 and e.stdout.startswith("# oom-killed-child (VP102, error)")
    assert run("rules", "no-such-rule").returncode == 2


def test_collect_keeps_its_scope_for_analyze(tmp_path: Path) -> None:
    """`collect local --pid N -o c.json && analyze c.json` diagnoses N's tree; analyze may override."""
    import os

    p = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    other = subprocess.Popen(["sleep", "300"])
    try:
        from tests.helpers import children_of, wait_for

        wait_for(lambda: len(children_of(p.pid)) == 1, what="child")
        child = children_of(p.pid)[0]
        cap = tmp_path / "c.json"
        r = subprocess.run(["bash", "-c", f'"$0" -m vastprobe collect local --pid {p.pid} --sample 0 -o {cap} '
                            f'&& "$0" -m vastprobe analyze {cap} --json', sys.executable],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        host = json.loads(r.stdout)["hosts"][0]
        assert host["scope"] == sorted([p.pid, child])
        assert json.loads(cap.read_text())["scope"] == {"pids": [p.pid], "matches": []}
        a = run("analyze", str(cap), "--json", "--pid", str(other.pid))
        assert json.loads(a.stdout)["hosts"][0]["scope"] == [other.pid]  # the command line wins
        # stdin
        s = subprocess.run([*VP, "analyze", "-", "--json"], stdin=cap.open("rb"), capture_output=True, timeout=60)
        assert s.returncode == 0 and json.loads(s.stdout)["hosts"][0]["scope"] == sorted([p.pid, child])
        # a scope that matches nothing on the capture: unknown, exit 3
        u = run("analyze", str(cap), "--json", "--pid", "4194304")
        h = json.loads(u.stdout)["hosts"][0]
        assert u.returncode == 3 and h["verdict"] == "unknown" and "no process" in h["error"]
    finally:
        os.killpg(p.pid, 9)
        other.kill()
        p.wait()
        other.wait()


def test_a_flipped_byte_is_reported_not_analysed(tmp_path: Path) -> None:
    import base64

    cap = tmp_path / "c.json"
    assert run("collect", "local", "--sample", "0", "-o", str(cap)).returncode == 0
    doc = json.loads(cap.read_text())
    assert doc["raw_sha256"] and len(doc["raw_sha256"]) == 64
    raw = bytearray(base64.b64decode(doc["raw_b64"]))
    raw[len(raw) // 2] ^= 0x20
    doc["raw_b64"] = base64.b64encode(bytes(raw)).decode()
    cap.write_text(json.dumps(doc))
    r = run("analyze", str(cap), "--json", "--snapshot")
    host = json.loads(r.stdout)["hosts"][0]
    assert r.returncode == 3 and host["status"] == "probe-error" and "sha256" in host["error"]
    assert host["findings"] == [] and host["snapshot"] is None
    # a capture from before checksums (no raw_sha256) is still analysed
    del doc["raw_sha256"]
    doc["raw_b64"] = base64.b64encode(bytes(raw)).decode()
    cap.write_text(json.dumps(doc))
    assert json.loads(run("analyze", str(cap), "--json").stdout)["hosts"][0]["status"] in ("ok", "probe-error")


def test_duplicate_targets_are_probed_once() -> None:
    r = run("diagnose", "local", "local", "--sample", "0", "--json")
    assert len(json.loads(r.stdout)["hosts"]) == 1 and "1 duplicate target probed once" in r.stderr


def test_only_the_invoked_command_is_built() -> None:
    from vastprobe.cli import _click_group

    every = {"diagnose", "sweep", "collect", "analyze", "rules", "probe-script", "history", "watch"}
    assert set(_click_group(["sweep", "hosts.txt", "--log", "diagnose"]).commands) == {"sweep"}
    assert set(_click_group(["--version", "probe-script"]).commands) == {"probe-script"}
    for top_level in (["-h"], [], ["diagnos", "local"]):  # help and "No such command" list them all
        assert set(_click_group(top_level).commands) == every


def test_match_never_picks_the_command_line_that_ran_vastprobe(reap) -> None:
    """A wrapper (cron's sh, a script) holds --match's pattern in its own arguments; it and every
    other ancestor of vastprobe on `local` are the operator's, not the job."""
    import secrets

    tag = f"sleep {3000 + secrets.randbelow(1000)}.{secrets.randbelow(10**6)}"
    job = subprocess.Popen(tag.split(), start_new_session=True)
    reap.append(job)
    wrapper = f"{shlex.join(VP)} diagnose local --match {shlex.quote(tag)} --sample 0 --format json --snapshot; true"
    r = subprocess.run(["bash", "-c", wrapper], capture_output=True, text=True, timeout=120)
    host = json.loads(r.stdout)["hosts"][0]
    assert host["scope"] == [job.pid], [
        (p["pid"], p["cmdline"]) for p in host["snapshot"]["processes"] if p["pid"] in host["scope"]
    ]


def test_a_whole_host_has_no_job_to_date_files_against(reap, tmp_path: Path) -> None:
    """With no --pid/--match the scope is every process: no "job", so no file is "written since the
    job started" (each file newer than the oldest process would be), not even when a finding names
    processes (someone's stopped child here: its shell is no job of the host's)."""
    (tmp_path / "old.bin").write_text("x")
    os.utime(tmp_path / "old.bin", (1000, 1000))
    shell = subprocess.Popen(["bash", "-c", "sleep 1000 & wait"], start_new_session=True)
    reap.append(shell)
    wait_for(lambda: len(children_of(shell.pid)) == 1, what="the child")
    os.kill(children_of(shell.pid)[0], signal.SIGSTOP)
    wait_for(lambda: proc_state(children_of(shell.pid)[0]) == "T", what="the child stopped")
    (tmp_path / "new.log").write_text("y")
    later = time.time() + 5  # plainly after those processes started, whatever the clock's tick
    os.utime(tmp_path / "new.log", (later, later))
    r = run("diagnose", "local", "--format", "table", "--sample", "0", "--artifacts", f"{tmp_path}/*",
            env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert "stopped-child" in r.stdout
    # a host's files are nobody's job: only what is held open is listed, the rest on -v
    assert f"artifacts {tmp_path}/*: 2 matches, none held open (-v lists them)" in r.stdout
    r = run("diagnose", "local", "--format", "table", "--sample", "0", "--artifacts", f"{tmp_path}/*", "-v",
            env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    listing = r.stdout[r.stdout.index(f"artifacts {tmp_path}/*") :]
    assert "new.log" in listing and "since the job started" not in listing and "the job's first" not in listing


def test_a_named_jobs_listing_shows_its_own_files_not_everybodys(reap, tmp_path: Path) -> None:
    """With --pid, /tmp holds everybody's files: the listing shows the job's (held open by it, written
    by its user since it started; not a directory another process touched), the rest on -v."""
    job = subprocess.Popen(["bash", "-c", f"exec 3>>{tmp_path}/job.log; sleep 1000; true"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: (tmp_path / "job.log").exists(), what="the job's log")
    (tmp_path / "someone-else").mkdir()
    later = time.time() + 5
    os.utime(tmp_path / "someone-else", (later, later))  # a directory touched since the job started
    r = run("diagnose", "local", "--format", "table", "--sample", "0", "--pid", str(job.pid), "--artifacts",
            f"{tmp_path}/*", env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    listing = r.stdout[r.stdout.index(f"artifacts {tmp_path}/*") :]
    assert "1 the job's (-v lists all)" in listing and "job.log" in listing and "held open" in listing, listing
    assert "someone-else" not in listing


def test_fail_on_degraded_exits_1_on_a_warning(tmp_path: Path) -> None:
    """A job whose --log does not exist is degraded (a warning, nothing proven stuck): exit 0 by
    default, exit 1 with --fail-on degraded, in diagnose and in a sweep; the JSON summary carries
    the same exit code."""
    job = subprocess.Popen(["sleep", "600"])
    try:
        common = ("--pid", str(job.pid), "--log", str(tmp_path / "absent.log"), "--sample", "0", "--format", "json")
        for cmd, extra, stdin in (("diagnose", ("local",), None), ("sweep", ("-", "--no-history"), "local\n")):
            for fail_on, code in ((None, 0), ("degraded", 1), ("stalled", 0)):
                flag = ("--fail-on", fail_on) if fail_on else ()
                r = run(cmd, *extra, *common, *flag, input=stdin)
                assert r.returncode == code, (cmd, fail_on, r.returncode, r.stderr)
                doc = json.loads(r.stdout)
                assert doc["hosts"][0]["verdict"] == "degraded", doc["hosts"][0]["headline"]
                assert doc["summary"]["exit_code"] == code, doc["summary"]
    finally:
        job.kill()
        job.wait()


def test_this_machine_refusing_ssh_points_at_local() -> None:
    """`localhost` (or 127.0.0.1) refused: sshd is not running here; `local` needs none."""
    from tests.sshd import dead_port

    r = run("diagnose", f"root@127.0.0.1:{dead_port()}", "--sample", "0", "--format", "json", "--timeout", "10")
    host = json.loads(r.stdout)["hosts"][0]
    assert host["status"] == "unreachable" and r.returncode == 3
    assert host["error"].endswith("For this machine without SSH, use `local`."), host["error"]


def test_durations_take_units_everywhere() -> None:
    """--sample 500ms as --keep 30d: every option that takes seconds takes a unit too."""
    r = run("diagnose", "local", "--sample", "200ms", "--timeout", "1m", "--stale-after", "2h", "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    assert json.loads(r.stdout)["hosts"][0]["status"] == "ok"
    r = run("diagnose", "local", "--sample", "5x")
    assert r.returncode == 2 and "'5x' is not a duration" in r.stderr


def test_py_spy_missing_on_the_target_is_said_in_the_report(tmp_path: Path) -> None:
    """--py-spy with no py-spy on the probe's PATH: one line in the report says so and how to
    install it (it was only in --snapshot JSON)."""
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # the probe's own PATH search, without the venv's py-spy
    r = subprocess.run([*VP, "diagnose", "local", "--py-spy", "--sample", "0", "--format", "json"],
                       capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    found = [f for f in host["findings"] if f["code"] == "VP903"]
    if shutil.which("py-spy", path="/usr/bin:/bin"):
        pytest.skip("py-spy is installed system-wide here")
    assert found and "not on the target's PATH" in found[0]["summary"], host["findings"]
    assert found[0]["severity"] == "info" and "pip install py-spy" in found[0]["hint"]
    table = subprocess.run([*VP, "diagnose", "local", "--py-spy", "--sample", "0", "--format", "table"],
                           capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "200"})  # fmt: skip
    assert "py-spy is not on the target's PATH" in table.stdout, table.stdout[-2000:]
