"""Fleet memory end to end: real OpenSSH sshds on 127.0.0.1, each in its own PID namespace with
its own job (`vp-job`, a link to sleep), so every "host" sees its own processes. A job is stalled
by SIGSTOP (rule stopped-child) and cleared by SIGCONT, between sweeps.

The job is one process with no parent of its own waiting on it: a stranger's OOM kill on this
shared machine can then make a host degraded (a warning), never stalled, so which hosts are
stalled is decided by the test alone."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.helpers import proc_state, wait_for
from tests.ndjson import host_lines
from tests.sshd import Sshd, dead_port, keygen, start_sshd


@dataclass
class NsHost:
    sshd: Sshd

    @property
    def target(self) -> str:
        return self.sshd.target

    def has_job(self) -> bool:
        with contextlib.suppress(AssertionError):
            return bool(self.job_pid())
        return False

    def job_pid(self) -> int:
        for child in psutil.Process(self.sshd.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                if child.name() == "vp-job":
                    return child.pid
        raise AssertionError(f"no job in {self.target}'s namespace")

    def stall(self, stalled: bool) -> None:
        pid = self.job_pid()
        os.kill(pid, signal.SIGSTOP if stalled else signal.SIGCONT)
        want = "T" if stalled else "S"
        wait_for(lambda: proc_state(pid) == want, what=f"job state {want} on {self.target}")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for one PID namespace per host")
    d = tmp_path_factory.mktemp("nsfleet")
    key = keygen(d / "user")
    job = d / "vp-job"
    job.symlink_to(shutil.which("sleep") or "/bin/sleep")  # comm "vp-job"
    hosts: list[NsHost] = []
    try:
        for i in range(12):
            wrap = [
                "unshare",
                "--pid",
                "--kill-child",
                "--mount-proc",
                "--",
                "sh",
                "-c",
                f'{job} 100000 & exec "$@"',
                "sh",
            ]
            hosts.append(NsHost(start_sshd(d / f"h{i:02d}", user_key=key, wrap=wrap)))
        for h in hosts:
            wait_for(h.has_job, what="the job to start")  # type: ignore[misc]
        kh = d / "known_hosts"
        kh.write_text("".join(h.sshd.known_hosts.read_text() for h in hosts))
        yield {"hosts": hosts, "ssh": ["-i", str(key), "--known-hosts", str(kh)], "dir": d}
    finally:
        for h in hosts:
            h.sshd.stop()


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vastprobe", *args], capture_output=True, text=True, timeout=300,
        env={**os.environ, "TZ": "UTC", **(env or {})},
    )  # fmt: skip


def sweep_args(fleet: dict, targets: list[str], *extra: str) -> list[str]:
    return ["sweep", ",".join(targets), *fleet["ssh"], "--sample", "0", "--match", "vp-job", *extra]


def procs(host: dict) -> list[tuple[str, str, str]]:
    """The job's processes in a JSON HostReport, for assertion messages."""
    snap = host.get("snapshot") or {}
    return sorted(
        (p["comm"], p["state"], str(p["wchan"])) for p in snap.get("processes", []) if p["pid"] in host["scope"]
    )


def utc_minute(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


H, S = False, True
PLAN = {  # a stays healthy, b stalls at sweep 3, c clears at 5, d flaps, e stalls at 5
    "a": [H, H, H, H, H],
    "b": [H, H, S, S, S],
    "c": [S, S, S, S, H],
    "d": [S, H, S, H, S],
    "e": [H, H, H, H, S],
}


@pytest.mark.slow
def test_five_sweeps_history_and_the_fifth_summary(fleet: dict, tmp_path: Path) -> None:
    hosts = dict(zip(PLAN, fleet["hosts"][:5], strict=True))
    name = {h.target: n for n, h in hosts.items()}
    db = tmp_path / "history.sqlite"
    prom = tmp_path / "fleet.prom"
    try:
        for i in range(5):
            for n, h in hosts.items():
                h.stall(PLAN[n][i])
            fmt = "table" if i == 4 else "json"
            r = run(*sweep_args(fleet, [h.target for h in hosts.values()], "--history", str(db), "--format", fmt,
                                "--prom", str(prom)))  # fmt: skip
            assert r.stderr == "", r.stderr
            assert r.returncode == 1, r.stdout
            if fmt == "json":
                doc = json.loads(r.stdout)["hosts"]
                stalled = {name[h["target"]] for h in doc if h["verdict"] == "stalled"}
                why = [(name[h["target"]], [f["summary"] for f in h["findings"]]) for h in doc]
                assert stalled == {n for n in PLAN if PLAN[n][i]}, (i, why)
    finally:
        for h in hosts.values():
            h.stall(False)
    with sqlite3.connect(db) as con:
        starts = [row[0] for row in con.execute("SELECT started_at FROM sweeps ORDER BY id")]
    assert len(starts) == 5 and starts == sorted(starts)

    # the fifth summary: new / still stalled since sweep 3 / recovered (stalled since sweep 1)
    summary = r.stdout
    flat = re.sub(r"\s+", " ", summary)  # the summary wraps at the terminal's width
    t = {n: h.target for n, h in hosts.items()}
    assert "STALLED (3): " in summary, summary
    # d and e stalled anew the same way: one folded line with both (issue 26)
    new_line = next(line for line in summary.splitlines() if line.startswith("  new ["))
    assert new_line.startswith("  new [2: ") and all(t[n].rsplit(":", 1)[1] in new_line for n in "de"), summary
    assert f" still {t['b']} stalled since {utc_minute(starts[2])} (" in flat and ", 3 sweeps): " in flat, summary
    assert f"RECOVERED (1): {t['c']} (stalled since {utc_minute(starts[0])})" in flat, summary
    assert t["a"] not in summary.split("RECOVERED")[0].split("STALLED")[1].split("\n")[0]

    # history: since, transitions, the flapping host
    r = run("history", "--history", str(db), "--format", "json", "--since", "1h")
    assert r.returncode == 0, r.stderr
    by = {name[h["target"]]: h for h in json.loads(r.stdout)["hosts"]}
    assert by["b"]["state"]["verdict"] == "stalled" and by["b"]["state"]["rules"] == ["stopped-child"]
    assert by["b"]["since"]["unix"] == round(starts[2], 3) and by["b"]["sweeps"] == 3
    assert by["c"]["state"]["verdict"] != "stalled"
    assert [
        (x["to"]["verdict"] == "stalled", x["at"]["unix"]) for x in by["c"]["transitions"] if x["kind"] == "verdict"
    ][-1] == (False, round(starts[4], 3))
    assert by["d"]["flapping"] and by["d"]["stalls"] == 2 and by["d"]["since"]["unix"] == round(starts[4], 3)
    d_stall_changes = [x["to"]["verdict"] == "stalled" for x in by["d"]["transitions"] if x["kind"] == "verdict"]
    assert d_stall_changes[-4:] == [False, True, False, True]
    assert [n for n, h in by.items() if h["flapping"]] == ["d"]
    assert by["e"]["since"]["unix"] == round(starts[4], 3) and by["e"]["sweeps"] == 1
    if by["a"]["state"]["verdict"] == "healthy":  # a stranger's OOM kill meanwhile would make it degraded
        assert by["a"]["last_healthy"]["unix"] == round(starts[4], 3) and by["a"]["transitions"] == []
    assert by["b"]["last_healthy"] is None or by["b"]["last_healthy"]["unix"] <= round(starts[1], 3)

    table = run("history", t["b"], t["d"], "--history", str(db), "--format", "table").stdout
    assert f"{t['b']}  STALLED since {utc_minute(starts[2])}, " in table and ", 3 sweeps" in table, table
    assert "VP105 stopped-child: vp-job (" in table
    assert table.count("FLAPPING") == 1 and table.index("FLAPPING") > table.index(t["d"]), table

    # the textfile of the fifth sweep
    from prometheus_client.parser import text_string_to_metric_families

    fam = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    since = {s.labels["target"]: s.value for s in fam["vastprobe_host_stalled_since_timestamp_seconds"].samples}
    assert since == {t["b"]: round(starts[2], 3), t["d"]: round(starts[4], 3), t["e"]: round(starts[4], 3)}
    total = {s.labels["target"]: s.value for s in fam["vastprobe_host_transitions"].samples}
    assert fam["vastprobe_host_transitions"].type == "counter" and total[t["d"]] >= 4
    healthy = {s.labels["target"]: s.value for s in fam["vastprobe_host_last_healthy_timestamp_seconds"].samples}
    assert t["c"] not in healthy or healthy[t["c"]] == round(starts[4], 3)


@pytest.mark.slow
def test_two_sweeps_at_once_share_one_history(fleet: dict, tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    targets = [h.target for h in fleet["hosts"]]
    args = sweep_args(fleet, targets, "--history", str(db), "--format", "ndjson")
    cmd = [sys.executable, "-m", "vastprobe", *args]
    procs = [
        subprocess.Popen(
            [*cmd, "--prom", str(tmp_path / f"{i}.prom")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert err == "" and p.returncode in (0, 3), err
        assert sorted(row["target"] for row in host_lines(out)) == sorted(targets)
    for i in range(2):
        assert (tmp_path / f"{i}.prom").read_text().count("vastprobe_host_transitions_total{") == 12
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*), sum(hosts) FROM sweeps").fetchone() == (2, 24)
        assert con.execute("SELECT count(*) FROM observations").fetchone()[0] == 24
        latest = con.execute("SELECT max(started_at) FROM sweeps").fetchone()[0]
        # each host's state is the newer run's, whichever of the two wrote last
        assert con.execute("SELECT count(*) FROM hosts WHERE last_seen = ?", (latest,)).fetchone()[0] == 12


@pytest.mark.parametrize("damage", ["corrupt", "a directory"])
def test_a_broken_history_costs_no_result(fleet: dict, tmp_path: Path, damage: str) -> None:
    hosts = fleet["hosts"][:3]
    targets = [h.target for h in hosts]
    db = tmp_path / "history.sqlite"
    if damage == "corrupt":
        db.write_bytes(os.urandom(64 * 1024))
    else:
        db.mkdir()
    hosts[0].stall(True)
    try:
        runs = {}
        for label, hist in (("broken", ["--history", str(db)]), ("none", ["--no-history"])):
            out, prom = tmp_path / f"{label}.txt", tmp_path / f"{label}.prom"
            runs[label] = (run(*sweep_args(fleet, targets, *hist, "--format", "table", "--output", str(out),
                                          "--prom", str(prom))), out, prom)  # fmt: skip
    finally:
        hosts[0].stall(False)
    (broken, out, prom), (clean, _, _) = runs["broken"], runs["none"]
    assert broken.returncode == clean.returncode == 1
    assert broken.stderr.count("\n") == 1 and broken.stderr.startswith(f"vastprobe: warning: history {db}"), (
        broken.stderr
    )
    assert "Traceback" not in broken.stderr and "not recorded" in broken.stderr
    assert clean.stderr == ""
    assert "3 hosts: 3 ok" in broken.stdout and f"STALLED (1): {targets[0]}" in broken.stdout
    assert out.read_text() == broken.stdout
    assert "vastprobe_host_stalled{" in prom.read_text() and "stalled_since" not in prom.read_text()
    if damage == "corrupt":
        r = run("history", "--history", str(db))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


@pytest.mark.slow
def test_group_by_flags_exactly_the_stuck_host(fleet: dict, tmp_path: Path) -> None:
    hosts = fleet["hosts"]
    odd = hosts[7]
    inventory = [
        {
            "id": 500 + i,
            "label": "train-a",
            "actual_status": "running",
            "ssh_host": "127.0.0.1",
            "ssh_port": h.sshd.port,
        }
        for i, h in enumerate(hosts)
    ]
    (tmp_path / "vast.json").write_text(json.dumps(inventory))
    odd.stall(True)
    try:
        by_label = run("sweep", str(tmp_path / "vast.json"), *fleet["ssh"], "--sample", "0.3", "--match", "vp-job",
                       "--group-by", "label", "--format", "json", "--no-history")  # fmt: skip
        by_regex = run(*sweep_args(fleet, [h.target for h in hosts], "--group-by", r"^root@(127\.0\.0\.1):",
                                   "--format", "table", "--no-history"))  # fmt: skip
    finally:
        odd.stall(False)
    assert by_label.returncode == 1, by_label.stderr
    reports = json.loads(by_label.stdout)["hosts"]
    flagged = [h for h in reports if "outlier_of" in h]
    assert [h["target"] for h in flagged] == [odd.target], [(h["target"], h["verdict"], procs(h)) for h in reports]
    o = flagged[0]["outlier_of"]
    assert (o["group"], o["group_size"], o["majority_size"]) == ("train-a", 12, 11)
    assert "verdict stalled (the group: healthy)" in o["differences"] or any(
        "verdict stalled" in x for x in o["differences"]
    )
    assert any(x.startswith("processes: vp-job T in do_signal_stop") for x in o["differences"]), o["differences"]
    assert (
        "OUTLIERS (1):" in by_regex.stdout
        and f"  {odd.target} in 127.0.0.1 (11 of 12 hosts alike): " in by_regex.stdout
    )
    assert by_regex.stdout.count(" in 127.0.0.1 (") == 1


def test_group_by_ndjson_waits_for_the_group(fleet: dict) -> None:
    hosts = fleet["hosts"][:3]
    hosts[1].stall(True)
    try:
        r = run(
            *sweep_args(fleet, [h.target for h in hosts], "--group-by", r"(127)", "--format", "ndjson", "--no-history")
        )
    finally:
        hosts[1].stall(False)
    rows = host_lines(r.stdout)
    assert len(rows) == 3 and [row["target"] for row in rows if "outlier_of" in row] == [hosts[1].target]


def test_shards_cover_the_fleet_exactly_once(tmp_path: Path) -> None:
    targets = sorted({f"root@127.0.0.{i % 5 + 1}:{dead_port()}" for i in range(24)})  # refused at once: fast
    inventory = tmp_path / "fleet.txt"
    inventory.write_text("\n".join(targets) + "\n")
    seen: list[str] = []
    for k in (1, 2, 3):
        prom = tmp_path / f"{k}.prom"
        r = run("sweep", str(inventory), "--format", "ndjson", "--shard", f"{k}/3", "--prom", str(prom),
                "--history", str(tmp_path / f"{k}.sqlite"))  # fmt: skip
        assert r.returncode in (0, 3), r.stderr
        seen += [row["target"] for row in host_lines(r.stdout)]
        assert f'vastprobe_sweep_shard_info{{shard="{k}",shards="3"}} 1' in prom.read_text()
    assert sorted(seen) == sorted(targets)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard", "4/3"], "K must be between 1 and N"),
        (["--shard", "x"], "want K/N"),
        (["--group-by", "gpu-\\d+"], "needs a group"),
        (["--group-by", "("], "--group-by"),
        (["--keep", "forever"], "not a duration"),
    ],
)
def test_bad_fleet_options_are_usage_errors(args: list[str], message: str) -> None:
    r = run("sweep", f"root@127.0.0.1:{dead_port()}", *args, "--format", "json")
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_history_command_errors_are_one_line(tmp_path: Path) -> None:
    missing = run("history", "--history", str(tmp_path / "none.sqlite"))
    assert missing.returncode == 2 and "no such file" in missing.stderr and missing.stderr.count("\n") == 1
    r = run("history", "--history", str(tmp_path / "none.sqlite"), "--since", "yesterday-ish")
    assert r.returncode == 2 and "not a time" in r.stderr


def test_diagnose_records_only_when_asked(tmp_path: Path) -> None:
    def imported(*args: str) -> set[str]:
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "vastprobe", *args], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
        return {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if "|" in line}

    plain = imported("diagnose", "local", "--format", "json", "--sample", "0")
    assert "vastprobe.cli" in plain and not {m for m in plain if m.startswith("vastprobe.history") or m == "sqlite3"}
    db = tmp_path / "d.sqlite"
    asked = imported("diagnose", "local", "--format", "json", "--sample", "0", "--history", str(db))
    assert "vastprobe.history.store" in asked
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT kind, hosts FROM sweeps").fetchall() == [("diagnose", 1)]
        assert con.execute("SELECT target FROM hosts").fetchall() == [("local",)]


def test_sweep_records_by_default_under_xdg_state_home(tmp_path: Path) -> None:
    state = tmp_path / "state"
    dead = f"root@127.0.0.1:{dead_port()}"
    r = run("sweep", dead, "--format", "json", env={"XDG_STATE_HOME": str(state)})
    assert r.returncode == 3 and r.stderr == "", r.stderr
    db = state / "vastprobe" / "history.sqlite"
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT target FROM hosts").fetchall() == [(dead,)]
    again = run("sweep", dead, "--format", "table", "--no-history", env={"XDG_STATE_HOME": str(tmp_path / "other")})
    assert again.returncode == 3 and not (tmp_path / "other").exists()
    shown = run("history", dead, "--format", "table", env={"XDG_STATE_HOME": str(state)})
    assert shown.returncode == 0 and shown.stdout.startswith(f"{dead}  UNKNOWN (unreachable) since "), shown.stdout
