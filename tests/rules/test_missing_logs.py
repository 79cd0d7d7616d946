"""missing-logs: absent, stale, deleted while open; a fresh log is fine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import children_of, descendants, favour_on_cpu, proc_text, vastprobe_json, wait_for

WRITER = (
    "import sys, time\nf = open(sys.argv[1], 'a')\nwhile True:\n    f.write('tick\\n'); f.flush(); time.sleep(0.05)\n"
)


def test_log_deleted_while_open(tmp_path: Path, reap) -> None:
    log = tmp_path / "run.log"
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(log)], start_new_session=True)
    reap.append(p)
    wait_for(lambda: log.exists() and log.stat().st_size > 0, what="log written")
    log.unlink()
    _rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3", "--log", str(log))
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert "deleted" in f["summary"] and str(p.pid) in f["summary"] and f["pids"] == [p.pid]


def test_absent_and_stale_logs(tmp_path: Path, reap) -> None:
    """The job is a quiet sleep of our own: PID 1's tree is the whole machine, whose other users may
    be stuck while this runs."""
    stale = tmp_path / "stale.log"
    stale.write_text("last words: CUDA error: an illegal memory access was encountered\n")
    os.utime(stale, (1000, 1000))
    job = subprocess.Popen(["sleep", "1000"])
    reap.append(job)
    rc, host = vastprobe_json(
        "--pid", str(job.pid), "--sample", "0", "--log", str(tmp_path / "nope.log"), "--log", str(stale)
    )
    found = {f["summary"]: f for f in host["findings"] if f["rule"] == "missing-logs"}
    absent = next(f for s, f in found.items() if "does not exist" in s)
    assert absent["severity"] == "warning"
    old = next(f for s, f in found.items() if "has not been written" in s)
    # one sample: a quiet log alone is evidence, not a verdict (no window to see the job not move)
    assert old["severity"] == "warning" and any("CUDA error" in e["detail"] for e in old["evidence"])
    assert any(e["detail"].startswith("one sample: no window") for e in old["evidence"]), old["evidence"]
    assert rc == 0 and host["verdict"] == "degraded"


def test_fresh_log_is_healthy(tmp_path: Path, reap) -> None:
    log = tmp_path / "run.log"
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(log)], start_new_session=True)
    reap.append(p)
    wait_for(lambda: log.exists() and log.stat().st_size > 0, what="log written")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3", "--log", str(log))
    assert host["verdict"] == "healthy" and rc == 0, host["findings"]


def test_a_fresh_log_ending_in_fatal_lines_says_when_it_was_written(tmp_path: Path, reap) -> None:
    """Its summary said "is being written" of a log last written 3 minutes before (found by a helper):
    it says its age now. A warning, exit 0."""
    log = tmp_path / "run.log"
    log.write_text("step 7\nKilled\n")
    then = time.time() - 200
    os.utime(log, (then, then))
    p = subprocess.Popen(["sleep", "600"], start_new_session=True)
    reap.append(p)
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0", "--log", str(log))
    (f,) = [f for f in host["findings"] if f["rule"] == "missing-logs"]
    assert f["summary"].startswith(f"{log} ends in fatal-looking lines (last written 20"), f["summary"]
    assert "is being written" not in f["summary"] and f["severity"] == "warning", f["summary"]
    assert host["verdict"] == "degraded" and rc == 0, host["findings"]


@pytest.mark.parametrize("named", [True, False], ids=["--log", "found-open"])
def test_a_stale_log_whose_writer_spins_says_so(tmp_path: Path, reap, named: bool) -> None:
    """The writer holds the log on stdout and stderr (named once, or found open with no --log) and
    burns a CPU without a line, its log 7 minutes old (an epoch that logs at its end): a quiet log
    is evidence, not a verdict; the job computes, so a warning saying so, never STALLED. One sample
    claims no window."""
    log = tmp_path / "train.log"
    spin = f"exec >>{log} 2>&1; echo training; exec {sys.executable} -c 'while True: pass'"
    p = subprocess.Popen(["sh", "-c", spin], start_new_session=True)
    reap.append(p)
    favour_on_cpu(p.pid)  # busy on a loaded machine too
    wait_for(lambda: os.path.realpath(f"/proc/{p.pid}/exe") == os.path.realpath(sys.executable), what="spinning")
    old = time.time() - 420
    os.utime(log, (old, old))
    given = ("--log", str(log)) if named else ()
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "1", *given)
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert f["severity"] == "warning" and f["pids"] == [p.pid] and "has not been written" in f["summary"]
    assert f["summary"].endswith("the log is quiet while it computes"), f["summary"]
    assert host["verdict"] == "degraded" and rc == 0, [(g["rule"], g["severity"]) for g in host["findings"]]
    details = [e["detail"] for e in f["evidence"]]
    assert any(d.startswith(f"{p.pid} (python") and "of CPU over the" in d for d in details), details
    assert "busy on the CPU" in f["hint"]
    assert any("size unchanged over the" in d for d in details)
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0", *given)
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert not any("over the" in e["detail"] for e in f["evidence"]) and "busy" not in f["hint"]
    assert f["severity"] == "warning" and host["verdict"] == "degraded" and rc == 0  # no window: no proof


def test_a_launcher_whose_child_computes_under_its_found_log_is_not_stalled(tmp_path: Path, reap) -> None:
    """A launcher script's `exec >> job.log 2>&1`, then a child that computes without a line, the log
    20 minutes old, no --log: the log is found open on both, and the child holds it too. Judged by the
    launcher alone (asleep waiting on the child) it read STALLED, exit 1, while the job computed."""
    log = tmp_path / "job.log"
    launcher = f"exec >>{log} 2>&1; echo starting; {sys.executable} -c 'while True: pass'; echo done"
    p = subprocess.Popen(["sh", "-c", launcher], start_new_session=True)
    reap.append(p)
    favour_on_cpu(p.pid)
    wait_for(lambda: (kids := children_of(p.pid)) != [] and cpu_seconds(kids[0]) > 0.05, what="the child computing")
    child = children_of(p.pid)[0]
    favour_on_cpu(child)
    old = time.time() - 1200
    os.utime(log, (old, old))
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "1")
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert "found open" in f["summary"] and sorted(f["pids"]) == sorted([p.pid, child]), f
    assert f["severity"] == "warning" and f["summary"].endswith("the log is quiet while it computes"), f["summary"]
    assert host["verdict"] == "degraded" and rc == 0, [(g["rule"], g["severity"]) for g in host["findings"]]


@pytest.mark.parametrize("how", ["tee", "launcher"])
def test_a_job_computing_behind_its_logs_writer_is_not_stalled(tmp_path: Path, reap, how: str) -> None:
    """`python train.py | tee -a job.log`: the log's only writer is tee, idle on its pipe while python
    computes; and a launcher holding job.log (`exec >> job.log`) whose child computes with its output
    elsewhere. Judged by the writer alone, both read STALLED, exit 1, with and without --log (found by a
    helper). The writer's pipe feeders and its children are the job that computes."""
    log = tmp_path / "job.log"
    spin = f"{sys.executable} -c 'while True: pass'"
    script = (f"echo starting | tee -a {log}; {spin} | tee -a {log}" if how == "tee"
              else f"exec >>{log} 2>&1; echo starting; {spin} >{tmp_path / 'train.out'} 2>&1")  # fmt: skip
    # at the default priority: a process runnable in both samples that got the CPU between them
    # computes, on a machine whose other spinners (this suite's) take most of it
    p = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    reap.append(p)

    def spinner() -> int | None:
        # (a name read only while it lives: `echo | tee` ends between the listing and the read)
        return next((k for k in descendants(p.pid) if "python" in proc_text(k, "comm")), None)

    wait_for(lambda: (k := spinner()) is not None and cpu_seconds(k) > 0.05, what="the job computing")
    old = time.time() - 1200
    os.utime(log, (old, old))
    for extra in (("--pid", str(p.pid)), ("--log", str(log), "--pid", str(p.pid))):
        rc, host = vastprobe_json(*extra, "--sample", "1")
        f = next(f for f in host["findings"] if f["rule"] == "missing-logs" and f["summary"].startswith(str(log)))
        assert f["severity"] == "warning" and f["summary"].endswith("the log is quiet while it computes"), f["summary"]
        assert host["verdict"] == "degraded" and rc == 0, [(g["rule"], g["severity"]) for g in host["findings"]]


@pytest.mark.parametrize("holder", ["computes", "paused"])
def test_a_job_queued_on_the_lock_of_a_run_that_computes_is_not_stalled(tmp_path: Path, reap, holder: str) -> None:
    """A cron run waits its turn on the flock of the previous run, which still computes; its own log
    went quiet 20 minutes ago. Judged by the waiter alone (it did not move), it read STALLED, exit 1,
    the lock wait unsaid (found by a helper). What it waits on computes: a warning. A previous run
    that waits for a signal nothing sends still holds it for ever: the stall it was."""
    lock, log = tmp_path / "job.lock", tmp_path / "job.log"
    body = "while True: pass" if holder == "computes" else "signal.pause()"
    prev = subprocess.Popen(["flock", str(lock), sys.executable, "-c", f"import signal\n{body}"],
                            start_new_session=True)  # fmt: skip
    reap.append(prev)
    wait_for(lambda: any("python" in proc_text(k, "comm") for k in descendants(prev.pid)), what="the previous run")
    log.write_text("run 1 done\n")
    old = time.time() - 1200
    os.utime(log, (old, old))
    job = subprocess.Popen(["flock", str(lock), "sh", "-c", f"echo run 2 >> {log}"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_text(job.pid, "wchan") == "locks_lock_inode_wait", what="the job queued on the lock")
    rc, host = vastprobe_json("--pid", str(job.pid), "--log", str(log), "--sample", "1")
    if holder == "computes":
        f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
        # the job does not compute: what it waits on does (said so; "while it computes" was untrue of it)
        assert f["severity"] == "warning" and f["summary"].endswith("the job waits on what computes"), f
        assert any("python" in e["detail"] and "of CPU" in e["detail"] for e in f["evidence"]), f["evidence"]
        assert host["verdict"] == "degraded" and rc == 0, [(g["rule"], g["severity"]) for g in host["findings"]]
    else:
        assert host["verdict"] == "stalled" and rc == 1, [(g["rule"], g["severity"]) for g in host["findings"]]


def cpu_seconds(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def test_a_fifo_or_a_device_as_the_log_is_a_warning_not_a_silent_log(reap, tmp_path: Path) -> None:
    """`--log` on a FIFO or /dev/zero: read no further than stat (no wedge), and said to be no
    regular file; /dev/zero was "empty after 77187s", an error that made the host STALLED. The job is
    a quiet sleep of our own: PID 1's tree is the whole machine, whose other users may be stuck."""
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    os.utime(fifo, (1000, 1000))
    job = subprocess.Popen(["sleep", "1000"])
    reap.append(job)
    t0 = time.monotonic()
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3", "--log", str(fifo), "--log", "/dev/zero")
    assert time.monotonic() - t0 < 30
    found = {f["summary"]: f["severity"] for f in host["findings"] if f["rule"] == "missing-logs"}
    assert found == {
        f"{fifo} is not a regular file (fifo): no log is read there": "warning",
        "/dev/zero is not a regular file (character special file): no log is read there": "warning",
    }
    assert host["status"] == "ok" and rc == 0


def test_a_stale_log_the_job_holds_open_is_found_without_log(reap, tmp_path: Path) -> None:
    """No --log given: the trainer holds its log open for writing and has not written it for a long
    time while it sleeps. With --pid naming the job, that file is its log, judged as a given one and
    said to be found; with no scope it is not (a quiet daemon is no stall)."""
    log = tmp_path / "train.log"
    # it waits for a signal nothing sends: a sleep on a timer would wake by itself, no stall
    pause = f"{sys.executable} -c 'import signal; signal.pause()'"
    job = subprocess.Popen(["bash", "-c", f"exec >> {log} 2>&1; echo step 1; {pause}; true"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: log.exists() and log.read_text() == "step 1\n", what="the first line")
    os.utime(log, (1, 1))  # last written long ago
    for sample, severity, verdict, code in (("1", "error", "stalled", 1), ("0", "warning", "degraded", 0)):
        # two samples: the job holding the log did nothing over the window, a stall; one: only a quiet log
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
        f = next((f for f in host["findings"] if f["rule"] == "missing-logs"), None)
        assert f is not None, [(g["rule"], g["summary"]) for g in host["findings"]]
        assert f["summary"].startswith(f"{log} (the job's log, found open) has not been written for"), f["summary"]
        assert any("found: no --log named it" in e["detail"] for e in f["evidence"]) and f["severity"] == severity
        assert host["verdict"] == verdict and rc == code, [(g["rule"], g["severity"]) for g in host["findings"]]
    _rc, whole = vastprobe_json("--sample", "0")
    assert not [g for g in whole["findings"] if str(log) in g["summary"]]


FD3_JOB = (
    "exec 3>>{log}; exec >>{out} 2>&1; exec {py} -c 'import os, time\n"
    'os.write(3, b"epoch 1 done\\nwaiting for /shared/EVAL_READY from node 1\\n")\n'
    "import signal; signal.pause()'"
)


@pytest.fixture
def fd3_job(tmp_path: Path, reap) -> tuple[subprocess.Popen, Path, Path]:
    """A trainer that logs to train.log on fd 3 and nothing to its stdout (stdout.log, empty), its
    last line the one that says it all; both written 10 minutes ago. It waits for a signal nothing
    sends (a job asleep on a timer wakes by itself: no stall)."""
    log, out = tmp_path / "train.log", tmp_path / "stdout.log"
    job = subprocess.Popen(["sh", "-c", FD3_JOB.format(log=log, out=out, py=sys.executable)], start_new_session=True)
    reap.append(job)
    wait_for(lambda: log.exists() and log.read_text().endswith("node 1\n"), what="the job's last line")
    old = time.time() - 600
    for f in (log, out):
        os.utime(f, (old, old))
    return job, log, out


def test_the_jobs_own_log_is_ranked_over_an_empty_stdout(fd3_job) -> None:
    """No --log: the empty stdout.log is not the job's log when the job writes train.log (it was
    blamed: "check its stdout redirection")."""
    job, log, out = fd3_job
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    logs = [f for f in host["findings"] if f["rule"] == "missing-logs"]
    assert [f for f in logs if str(log) in f["summary"]], host["findings"]
    assert not [f for f in host["findings"] if str(out) in f["summary"]], host["findings"]
    assert host["verdict"] == "stalled" and rc == 1  # the job did nothing over the window, its log stale


@pytest.mark.parametrize("given", [True, False], ids=["--log", "found"])
@pytest.mark.parametrize("how", ["local", "ssh"])
def test_the_last_words_of_the_log_are_under_the_headline(fd3_job, how: str, given: bool, tmp_path: Path) -> None:
    """With --log, and without: the log the job holds open on fd 3 is found, and its tail read through
    /proc/PID/fd/3 (the job's own logs first, whatever other processes on the host wrote since)."""
    job, log, _out = fd3_job
    args = ["--pid", str(job.pid), "--sample", "1", *(["--log", str(log)] if given else [])]
    if how == "local":
        rc, host = vastprobe_json(*args)
        table = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", *args, "--format", "table"],
                               capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
        assert (
            f"  last lines of {log}:\n    epoch 1 done\n    waiting for /shared/EVAL_READY from node 1\n"
            in table.stdout
        ), table.stdout
    else:
        from tests.sshd import keygen, start_sshd

        key = keygen(tmp_path / "user")
        sshd = start_sshd(tmp_path / "sshd", user_key=key)
        try:
            r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", f"root@127.0.0.1:{sshd.port}", "-i",
                                str(key), "--known-hosts", str(sshd.known_hosts), "--format", "json", *args],
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        finally:
            sshd.stop()
        rc, host = r.returncode, json.loads(r.stdout)["hosts"][0]
    assert host["last_words"] == {
        "log": str(log),
        "lines": ["epoch 1 done", "waiting for /shared/EVAL_READY from node 1"],
    }
    assert host["verdict"] == "stalled" and rc == 1, host["headline"]


HEARTBEAT = "import sys, time\nf = open(sys.argv[1], 'a')\nwhile True:\n    f.write('heartbeat ok\\n'); f.flush(); time.sleep(0.3)\n"


@pytest.mark.parametrize("given", [False, True], ids=["found", "--log"])
def test_an_idle_job_logging_to_its_own_file_beside_an_empty_stdout_is_healthy(
    reap, tmp_path: Path, given: bool
) -> None:
    """`timeout 600 python job.py > out.txt 2>&1`, the job logging to job.log: out.txt, empty and old,
    is held by `timeout` too, which writes no log, so it was taken for the job's log, "silent", with a
    hint to kill the job: DEGRADED, and so with --log naming job.log (found by a new user's review)."""
    log, out = tmp_path / "job.log", tmp_path / "out.txt"
    with out.open("w") as f:
        job = subprocess.Popen(["timeout", "600", sys.executable, "-c", HEARTBEAT, str(log)], stdout=f,
                               stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: log.exists() and log.stat().st_size > 0, what="the job logging")
    old = time.time() - 1200
    os.utime(out, (old, old))
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.5", *(["--log", str(log)] if given else []))
    assert not [f for f in host["findings"] if str(out) in f["summary"]], host["findings"]
    assert host["verdict"] == "healthy" and rc == 0, [(f["rule"], f["summary"]) for f in host["findings"]]


PART_TIME = (
    "import time\nwhile True:\n    t = time.time()\n    while time.time() - t < 0.03: pass\n    time.sleep(0.07)\n"
)


def test_a_stale_log_beside_a_job_at_a_third_of_a_cpu_says_it_moved(reap, tmp_path: Path) -> None:
    """The job computes at about 30% of a CPU, under the share that counts as computing: the warning's
    hint said "did not move over the window" beside its own line "the job moved (context switches or a
    state change)", of a job that used CPU (found by a new user's review)."""
    log = tmp_path / "job.log"
    log.write_text("epoch 1\n")
    os.utime(log, (time.time() - 900, time.time() - 900))
    job = subprocess.Popen([sys.executable, "-c", PART_TIME], start_new_session=True)
    reap.append(job)
    rc, host = vastprobe_json("--pid", str(job.pid), "--log", str(log), "--sample", "1")
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    moved = [e["detail"] for e in f["evidence"] if e["source"] == "progress"]
    # (on a loaded machine its share of a CPU reads as computing: "quiet while it computes", as true)
    assert f["severity"] == "warning" and "did not move" not in f["hint"], f
    assert "moved over the window" in f["hint"] or f["summary"].endswith("while it computes"), f
    assert moved and "CPU" in moved[0], moved
    assert host["verdict"] == "degraded" and rc == 0


QUIET_DAEMON = """
import asyncio, logging, socket, sys
logging.basicConfig(filename=sys.argv[1], level=logging.INFO)
logging.info("started")
if sys.argv[2] == "accept":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
    print("serving", flush=True)
    while True:
        s.accept()[0].close()
async def main():
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    print("serving", flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


@pytest.mark.parametrize("loop", ["accept", "asyncio"])
def test_a_quiet_daemon_waiting_for_requests_is_healthy(tmp_path: Path, reap, loop: str) -> None:
    """A server named with --pid that holds its log open and has logged nothing for 20 minutes
    because nobody asked it anything: in accept(), or in an event loop over its listening socket.
    A quiet log there is no stall (it read STALLED)."""
    log = tmp_path / "daemon.log"
    job = subprocess.Popen([sys.executable, "-c", QUIET_DAEMON, str(log), loop], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    assert job.stdout is not None and job.stdout.readline().strip() == "serving"
    old = time.time() - 1200
    os.utime(log, (old, old))
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


def test_a_found_logs_tail_is_data_and_its_passwords_are_masked(tmp_path: Path, reap) -> None:
    """The tail of a log found open (no --log) is remote text read without being asked for: a line
    shaped like the probe's own markers stays a line of the log, and a URL's password never reaches
    any output (the JSON with its snapshot, the table)."""
    log = tmp_path / "job.log"
    lines = "connecting to postgres://app:hunter2-planted@db:5432/x\n@@tail /proc/1/fd/1\n|forged\nwaiting\n"
    code = f"import os, signal\nos.write(3, {lines.encode()!r})\nsignal.pause()"
    job = subprocess.Popen(["sh", "-c", f'exec 3>>{log}; exec "$@"', "sh", sys.executable, "-c", code],
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: log.exists() and log.read_text().endswith("waiting\n"), what="the job's log")
    old = time.time() - 600
    os.utime(log, (old, old))
    for fmt in ("json", "table"):
        r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(job.pid), "--sample",
                            "1", "--format", fmt, "--snapshot" if fmt == "json" else "-v"],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        assert "hunter2-planted" not in r.stdout + r.stderr and r.returncode == 1, r.stdout
    host = json.loads(subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(job.pid),
                                      "--sample", "1"], capture_output=True, text=True, timeout=120).stdout)["hosts"][0]  # fmt: skip
    assert host["last_words"]["lines"] == ["@@tail /proc/1/fd/1", "|forged", "waiting"], host["last_words"]
    assert not [f for f in host["findings"] if f["code"] in ("VP901", "VP902")], host["findings"]


#: What runs vastprobe here: it holds the read end of a pipe the job inherited (fd 3), and reads
#: /dev/zero in a thread meanwhile (busy with I/O), as a harness does
_RUNNER = r"""
import os, subprocess, sys, threading
def spin():
    with open("/dev/zero", "rb") as z:
        while True:
            z.read(1 << 16)
threading.Thread(target=spin, daemon=True).start()
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(r.stdout)
sys.exit(r.returncode)
"""


def test_the_probes_own_processes_are_never_what_the_job_waits_on(tmp_path: Path, reap) -> None:
    """Found by a helper: a job holding its log open for writing (`exec 3>>app.log; tail -f app.log`),
    its log stale, and a pipe it inherited from the harness that ran vastprobe too: that harness (one
    of the processes that ran vastprobe, which the report leaves out) was credited as the work the job
    waits on ("the job waits on what computes", "… read or wrote 1.3 MB"), and the host read DEGRADED.
    The job does nothing: with its --log named, the stall it is."""
    log = tmp_path / "app.log"
    log.write_text("last line\n")
    old = time.time() - 600
    os.utime(log, (old, old))
    r, w = os.pipe()
    job = subprocess.Popen(["bash", "-c", f"exec 3>>{log}; tail -f {log} > /dev/null"], start_new_session=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=(w,))  # fmt: skip
    reap.append(job)
    os.close(w)
    wait_for(lambda: any("tail" in proc_text(k, "comm") for k in descendants(job.pid)), what="tail following")
    os.utime(log, (old, old))
    cmd = [sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(job.pid), "--log", str(log),
           "--sample", "1", "--format", "json"]  # fmt: skip
    out = subprocess.run([sys.executable, "-c", _RUNNER, *cmd], capture_output=True, text=True, timeout=120,
                         pass_fds=(r,))  # fmt: skip
    os.close(r)
    host = json.loads(out.stdout)["hosts"][0]
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert not f["summary"].endswith("the job waits on what computes"), f
    assert f["severity"] == "error" and host["verdict"] == "stalled" and out.returncode == 1, f


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv (util-linux) to act as nobody"
)
def test_a_log_the_probe_cannot_open_is_said_so() -> None:
    """Run as a user who cannot read the --log (another user's file, or root squashed on an NFS mount),
    the probe stat'ed it and read no tail, and the report said nothing: HEALTHY, the tail "" (found by a
    new user's review). The probe now says it could not open it, and the report says so, in a note."""
    import tempfile

    from tests.helpers import local_snapshot
    from vastprobe.model import Unavailable
    from vastprobe.model.report import verdict
    from vastprobe.probe.script import ProbeParams
    from vastprobe.rules.base import RuleOptions
    from vastprobe.rules.engine import run_rules

    d = Path(tempfile.mkdtemp(prefix="vp-unreadable-", dir="/tmp"))
    try:
        d.chmod(0o755)
        log = d / "root-only.log"
        log.write_text("step 1\n")
        log.chmod(0o600)
        snap = local_snapshot(ProbeParams(sample=0, logs=(str(log),)),
                              shell=["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/bin/sh"])  # fmt: skip
        [got] = snap.logs
        assert isinstance(got.tail, Unavailable) and "could not be opened" in got.tail.reason, got.tail
        found = [f for f in run_rules(snap, (os.getpid(),), RuleOptions()) if f.rule == "missing-logs"]
        assert [f.severity for f in found] == ["info"] and "could not read it" in found[0].summary, found
        assert verdict(tuple(found)) == "healthy"
    finally:
        shutil.rmtree(d)
