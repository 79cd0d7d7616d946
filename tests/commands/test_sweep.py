"""`vastprobe sweep` over a loopback fleet of real sshd processes plus dead ports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import interruptible
from tests.ndjson import host_lines, hosts_and_summary
from tests.sshd import dead_port, dead_ports, keygen, start_sshd


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    key = keygen(d / "user")
    a = start_sshd(d / "a", user_key=key, addresses=[f"127.0.0.{i}" for i in range(1, 17)])  # 16 per sshd
    b = start_sshd(d / "b", user_key=key, addresses=[f"127.0.0.{i}" for i in range(17, 21)])
    kh = d / "known_hosts"
    kh.write_text(a.known_hosts.read_text() + b.known_hosts.read_text())
    live = [f"root@127.0.0.{i}:{a.port}" for i in range(1, 17)] + [f"root@127.0.0.{i}:{b.port}" for i in range(17, 21)]
    # the process every probe watches: a quiet sleep of our own, not PID 1 (whose tree is the whole machine)
    watched = subprocess.Popen(["sleep", "3600"])
    yield {"live": live, "key": key, "known_hosts": kh, "a": a, "b": b, "pid": str(watched.pid)}
    watched.kill()
    watched.wait()
    a.stop()
    b.stop()


def sweep(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vastprobe", "sweep", *args], input=stdin, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_forty_targets_twenty_dead(fleet, tmp_path: Path) -> None:
    dead = [f"root@127.0.0.1:{port}" for port in dead_ports(20)]
    inv = tmp_path / "hosts.txt"
    inv.write_text("# loopback fleet\n" + "\n".join(fleet["live"] + dead) + "\n")
    out = tmp_path / "sweep.ndjson"
    r = sweep(str(inv), "--format", "ndjson", "-i", str(fleet["key"]), "--known-hosts", str(fleet["known_hosts"]),
              "--sample", "0", "--pid", fleet["pid"], "--output", str(out))  # fmt: skip
    rows, summary = hosts_and_summary(r.stdout)
    assert len(rows) == 40 and summary["status"]["ok"] == summary["status"]["unreachable"] == 20
    statuses = sorted(row["status"] for row in rows)
    assert statuses.count("ok") == 20 and statuses.count("unreachable") == 20, [
        row["error"] for row in rows if row["status"] != "ok"
    ][:3]
    assert {row["target"] for row in rows} == set(fleet["live"] + dead)
    stalled = [(row["target"], row["findings"]) for row in rows if row["verdict"] == "stalled"]
    assert r.returncode == 3 == summary["exit_code"], stalled
    assert len(host_lines(out.read_text())) == 40


def test_vast_inventory(fleet, tmp_path: Path) -> None:
    port = fleet["a"].port
    data = [
        {"id": 101, "label": "direct", "actual_status": "running", "public_ipaddr": "127.0.0.3",
         "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]}, "ssh_host": "127.0.0.9", "ssh_port": 1},
        {"id": 102, "label": "proxy", "actual_status": "running", "ssh_host": "127.0.0.4", "ssh_port": port - 1,
         "image_runtype": "jupyter_direc"},
        {"id": 103, "label": "gone", "actual_status": "exited", "ssh_host": "127.0.0.5", "ssh_port": port},
        {"id": 104, "label": "dead", "actual_status": "running", "intended_status": "running",
         "status_msg": "Instance is not responding", "ssh_host": "127.0.0.6", "ssh_port": dead_port()},
    ]  # fmt: skip
    r = sweep("-", "--format", "json", "-i", str(fleet["key"]), "--known-hosts", str(fleet["known_hosts"]), "--sample", "0",
              "--pid", fleet["pid"], stdin=json.dumps(data))  # fmt: skip
    hosts = {h["labels"]["label"]: h for h in json.loads(r.stdout)["hosts"]}
    assert hosts["direct"]["status"] == "ok" and hosts["direct"]["target"] == f"root@127.0.0.3:{port}"
    assert hosts["proxy"]["status"] == "ok" and hosts["proxy"]["target"] == f"root@127.0.0.4:{port}"
    assert hosts["gone"]["status"] == "skipped" and "exited" in hosts["gone"]["error"]
    assert hosts["gone"]["labels"]["instance_id"] == "103"
    # an unreachable instance says what vast.ai says of it, besides the refused connection
    assert hosts["dead"]["status"] == "unreachable"
    assert hosts["dead"]["error"].endswith("(vast.ai: running: 'Instance is not responding')"), hosts["dead"]["error"]
    assert r.returncode == 3


def test_prometheus_textfile(fleet, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    prom = tmp_path / "vastprobe.prom"
    dead = f"root@127.0.0.1:{dead_port()}"
    r = sweep(f"{fleet['live'][0]},{dead}", "--format", "table", "-i", str(fleet["key"]), "--known-hosts",
              str(fleet["known_hosts"]), "--sample", "0", "--pid", fleet["pid"], "--prom", str(prom))  # fmt: skip
    assert r.returncode == 3
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    up = {s.labels["target"]: s.value for s in families["vastprobe_host_up"].samples}
    assert up == {fleet["live"][0]: 1.0, dead: 0.0}
    assert families["vastprobe_last_sweep_timestamp_seconds"].samples[0].value > 1.7e9
    assert "vastprobe_host_stalled" in families and "vastprobe_probe_duration_seconds" in families
    assert not any("pid" in s.labels for f in families.values() for s in f.samples)
    assert oct(prom.stat().st_mode & 0o777) == "0o644"
    assert "2 hosts: 1 ok, 1 unreachable" in r.stdout, r.stdout  # the summary table


@pytest.mark.parametrize(("signum", "code"), [(2, 130), (15, 143)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_prints_what_finished(tmp_path: Path, signum: int, code: int) -> None:
    """SIGTERM (`timeout` in a cron line, systemd) stops the sweep as Ctrl-C does, exit 143."""
    hang = start_sshd(tmp_path / "hang", force_command="sleep 600")
    try:
        dead = f"root@127.0.0.1:{dead_port()}"
        p = subprocess.Popen([sys.executable, "-m", "vastprobe", "sweep", f"{dead},{hang.target}", "--format", "ndjson",
                              "-i", str(hang.user_key), "--known-hosts", str(hang.known_hosts), "--timeout", "120"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=interruptible)  # fmt: skip
        assert p.stdout is not None
        first = json.loads(p.stdout.readline())  # the dead host streams out first
        assert first["status"] == "unreachable"
        assert first["error"].startswith(f"{dead}: connection refused")  # the target once, as typed
        p.send_signal(signum)
        rest, err = p.communicate(timeout=30)
        (end,) = (json.loads(line) for line in rest.splitlines())  # the summary says the stream is cut short
        assert end["summary"] == {**end["summary"], "hosts": 1, "exit_code": code, "complete": False, "unfinished": 1}
        assert "interrupted: 1 of 2 hosts finished; 1 did not: " + hang.target in err
        assert p.returncode == code
    finally:
        hang.stop()


def test_concurrency_lowered_to_what_the_fd_limit_carries(tmp_path: Path) -> None:
    dead = ",".join(f"root@127.0.0.1:{port}" for port in dead_ports(12))
    r = subprocess.run(["bash", "-c", f'ulimit -n 100 && exec "$0" -m vastprobe sweep {dead} --concurrency 64 --format ndjson',
                        sys.executable], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "--concurrency 64 lowered to 9" in r.stderr and "ulimit -n" in r.stderr
    assert len(host_lines(r.stdout)) == 12 and r.returncode == 3


@pytest.mark.slow
def test_nodes_hostfile_and_exclusions_probe_the_expected_set(fleet, tmp_path: Path) -> None:
    """`sweep -w 'gpu[01-04]' --hostfile fleet.txt -x gpu03`, as clush takes it: gpu01..06 are
    ssh_config aliases of six loopback addresses of one real sshd, whose own log says which
    addresses were contacted."""
    s = start_sshd(tmp_path / "six", user_key=fleet["key"], addresses=[f"127.0.0.{i}" for i in range(1, 7)],
                   log_level="VERBOSE")  # fmt: skip
    try:
        cfg = tmp_path / "ssh_config"
        cfg.write_text("".join(
            f"Host gpu0{i}\n  HostName 127.0.0.{i}\n  Port {s.port}\n  User root\n  IdentityFile {fleet['key']}\n"
            f"  UserKnownHostsFile {s.known_hosts}\n" for i in range(1, 7)))  # fmt: skip
        hosts = tmp_path / "fleet.txt"
        hosts.write_text("gpu05\ngpu06\ngpu02  # also named by -w: probed once\n")
        prom = tmp_path / "v.prom"
        r = sweep("-w", "gpu[01-04]", "--hostfile", str(hosts), "-x", "gpu03", "-F", str(cfg), "--format", "ndjson",
                  "--sample", "0", "--pid", fleet["pid"], "--prom", str(prom))  # fmt: skip
        rows = host_lines(r.stdout)
        assert sorted(row["target"] for row in rows) == ["gpu01", "gpu02", "gpu04", "gpu05", "gpu06"], r.stderr
        assert all(row["status"] == "ok" for row in rows), [row["error"] for row in rows]
        assert "1 duplicate target probed once" in r.stderr and r.returncode == 0
        up = [line for line in prom.read_text().splitlines() if line.startswith("vastprobe_host_up{")]
        assert len(up) == 5 and len({line.split('"')[1] for line in up}) == 5  # one series per host
        log = s.log.read_text() if s.log else ""
        import re

        contacted = set(re.findall(rf"Connection from \S+ port \d+ on (127\.0\.0\.\d+) port {s.port}\b", log))
        assert contacted == {"127.0.0.1", "127.0.0.2", "127.0.0.4", "127.0.0.5", "127.0.0.6"}, log[-2000:]
        # the positional form still takes an existing file
        r = sweep(str(hosts), "-F", str(cfg), "--format", "ndjson", "--sample", "0", "--pid", fleet["pid"])
        assert sorted(row["target"] for row in host_lines(r.stdout)) == ["gpu02", "gpu05", "gpu06"]
    finally:
        s.stop()


def test_hostile_vast_fields_are_skipped_rows_and_stay_inert(fleet, tmp_path: Path) -> None:
    """ssh_host with terminal escapes and a bidi override, a lone surrogate, a port that is not a
    number: skipped rows with the reason; nothing raw reaches the terminal or the textfile."""
    port = fleet["a"].port
    data = [
        {"id": 1, "label": "good", "actual_status": "running", "ssh_host": "127.0.0.6", "ssh_port": port},
        {"id": 2, "label": "esc", "actual_status": "running", "ssh_host": "\x1b]0;pwned\x07\x1b[2Jh", "ssh_port": 22},
        {"id": 3, "label": "bidi", "actual_status": "running", "ssh_host": "evil\u202etxt.exe", "ssh_port": 22},
        {"id": 4, "label": "sur\udc80", "actual_status": "running", "ssh_host": "h\udc80", "ssh_port": 22},
        {"id": 5, "label": "abc", "actual_status": "running", "ssh_host": "ssh4.vast.ai", "ssh_port": "abc"},
    ]
    prom = tmp_path / "v.prom"
    r = subprocess.run([sys.executable, "-m", "vastprobe", "sweep", "-", "--format", "table", "-i", str(fleet["key"]),
                        "--known-hosts", str(fleet["known_hosts"]), "--sample", "0", "--pid", fleet["pid"],
                        "--prom", str(prom)], input=json.dumps(data).encode(), capture_output=True, timeout=120)  # fmt: skip
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0, err
    for text in (out, err, prom.read_bytes().decode("utf-8")):
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "5 hosts: 4 skipped, 1 ok" in out
    assert "ssh_port 'abc' is not a port" in out and "\\x1b]0;pwned" in out
    assert 'vastprobe_sweep_hosts{status="skipped"} 4' in prom.read_text()


@pytest.mark.parametrize("stopped", [False, True])
def test_an_output_that_cannot_be_written_is_one_line_and_a_stall_still_exits_1(reap, stopped: bool) -> None:
    """Found by a helper: --output on a full disk was an "internal error", exit 4, whatever the sweep
    found. One line now, after the report; exit 2, or 1 where a target is stalled (cron acts on 1)."""
    import os
    import signal

    from tests.helpers import proc_state, wait_for

    job = subprocess.Popen(["sleep", "600"])
    reap.append(job)
    if stopped:
        os.kill(job.pid, signal.SIGSTOP)
        wait_for(lambda: proc_state(job.pid) == "T", what="the job stopped")
    r = subprocess.run([sys.executable, "-m", "vastprobe", "sweep", "local", "--pid", str(job.pid), "--no-history",
                        "--format", "json", "--output", "/dev/full", "--sample", "0.2"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    assert r.stderr == "vastprobe: error: --output /dev/full: cannot write it: No space left on device\n", r.stderr
    assert host["verdict"] == ("stalled" if stopped else "healthy"), host["findings"]
    assert r.returncode == (1 if stopped else 2)
