"""do-wait-orphan on real process trees, and the waits it must leave alone."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import children_of, descendants, proc_wchan, vastprobe_json, wait_for


def test_tee_held_open_by_orphaned_sleep(tmp_path: Path, reap) -> None:
    out = tmp_path / "out.log"
    p = subprocess.Popen(["bash", "-c", f"sh -c 'sleep 1000 & echo x' | tee {out}"], start_new_session=True,
                         stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(p)
    wait_for(lambda: out.exists() and out.read_text() == "x\n", what="tee wrote x")
    wait_for(lambda: any(proc_wchan(c).endswith("pipe_read") for c in children_of(p.pid)), what="tee blocked")
    tee = next(c for c in children_of(p.pid) if proc_wchan(c).endswith("pipe_read"))
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5")
    f = next(f for f in host["findings"] if f["rule"] == "do-wait-orphan")
    assert f["severity"] == "error" and rc == 1
    assert f["pids"][:2] == [p.pid, tee]
    orphan = f["pids"][2]
    cmd = Path(f"/proc/{orphan}/cmdline").read_bytes().split(b"\0")
    assert cmd[:2] == [b"sleep", b"1000"]
    assert "orphan" in f["summary"] and "sleep" in f["summary"]
    assert any("pipe:[" in e["detail"] for e in f["evidence"])


def test_shell_waiting_on_busy_command_is_healthy(tmp_path: Path, reap) -> None:
    log = tmp_path / "work.log"
    busy = f"import time\nwhile True:\n    open({str(log)!r}, 'a').write('tick\\n'); sum(range(200000))\n"
    p = subprocess.Popen(["bash", "-c", f'{sys.executable} -c "{busy}"; echo end'], start_new_session=True)
    reap.append(p)
    wait_for(lambda: log.exists() and log.stat().st_size > 100, what="worker writing")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5", "--log", str(log))
    assert host["verdict"] == "healthy", host["findings"]
    assert rc == 0


def test_server_waiting_on_idle_workers_is_not_an_alarm(reap) -> None:
    """A parent waiting on workers that sleep (no progress) with nothing saying they should be busy."""
    p = subprocess.Popen(["bash", "-c", "for i in 1 2 3; do sleep 1000 & done; wait"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 3, what="workers started")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5")
    assert not [f for f in host["findings"] if f["severity"] in ("error", "critical")], host["findings"]
    assert rc == 0


PAUSE = f"{sys.executable} -c 'import signal; signal.pause()'"


def test_idle_wait_with_a_stale_log_is_a_stall(tmp_path: Path, reap) -> None:
    """The same idle wait becomes a stall when the job's log says it should be moving: its child
    waits for a signal nothing sends, so it does not wake by itself."""
    log = tmp_path / "job.log"
    log.write_text("started\n")
    os.utime(log, (1, 1))  # last written in 1970
    p = subprocess.Popen(["bash", "-c", f"{PAUSE} & wait"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: any(proc_wchan(c) for c in children_of(p.pid)), what="worker started")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5", "--log", str(log), "--stale-after", "60")
    f = next(f for f in host["findings"] if f["rule"] == "do-wait-orphan")
    assert f["severity"] == "error" and "makes no progress" in f["summary"], f
    assert host["verdict"] == "stalled" and rc == 1


@pytest.mark.parametrize("given", [True, False], ids=["log", "found"])
def test_a_job_asleep_on_a_timer_beside_a_quiet_log_is_not_stalled(tmp_path: Path, reap, given: bool) -> None:
    """A polling loop's pause (`until test -f ready; do sleep 5; done`) or `sleep 1000`: asleep on a
    timer, the job wakes by itself, so its quiet log is a warning, not a stall. It read STALLED,
    exit 1, with --log and with the log found open (found by a helper)."""
    log = tmp_path / "job.log"
    log.write_text("")
    p = subprocess.Popen(
        ["bash", "-c", f"exec >> {log}; until test -f {tmp_path}/never; do sleep 1000; done"], start_new_session=True
    )
    reap.append(p)
    wait_for(lambda: any(proc_wchan(c) == "hrtimer_nanosleep" for c in children_of(p.pid)), what="asleep")
    os.utime(log, (1, 1))
    rc, host = vastprobe_json(
        "--pid", str(p.pid), "--sample", "0.5", "--stale-after", "60", *(("--log", str(log)) if given else ())
    )
    f = next(f for f in host["findings"] if f["rule"] == "do-wait-orphan")
    assert f["severity"] == "warning" and "sleeps on a timer" in f["summary"], f
    logs = [f for f in host["findings"] if f["rule"] == "missing-logs"]
    assert logs and all(f["severity"] == "warning" and "sleeps on a timer" in f["summary"] for f in logs), logs
    assert host["verdict"] == "degraded" and rc == 0, host["findings"]


def test_a_consumer_of_a_loop_asleep_between_its_lines_is_not_stalled(tmp_path: Path, reap) -> None:
    """`(while :; do check; sleep 400; done) | consumer >> job.log`, six minutes after its last line: the
    consumer reads a pipe (no timer of its own), so the job was not "asleep on a timer", and read STALLED,
    exit 1, "sleep makes no progress" (found by a helper). Each of its processes waits, through the
    others, on the sleep: the job wakes by itself."""
    log = tmp_path / "job.log"
    consumer = "import sys\nfor line in sys.stdin: print('seen', line.strip(), flush=True)"
    p = subprocess.Popen(["bash", "-c", f"(while :; do echo tick; sleep 400; done) | {sys.executable} -u -c "
                                        f"{shlex.quote(consumer)} >> {log}"], start_new_session=True)  # fmt: skip
    reap.append(p)
    wait_for(lambda: any(proc_wchan(d) == "hrtimer_nanosleep" for d in descendants(p.pid)) and log.stat().st_size > 0,
             what="the loop asleep, its line read")  # fmt: skip
    os.utime(log, (time.time() - 360, time.time() - 360))
    rc, host = vastprobe_json("--pid", str(p.pid))
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert [f[1] for f in said if f[0] == "missing-logs"] == ["warning"], said
    assert host["verdict"] == "degraded" and rc == 0, said


#: The control's first stage: a program that waits for ever on a lock it holds (no file it follows)
SELF_LOCKED = "import threading\nlock = threading.Lock()\nlock.acquire()\nlock.acquire()"


@pytest.mark.parametrize("follower", ["tail", "locked"])
@pytest.mark.parametrize("named", [False, True], ids=["found", "named"])
def test_a_filter_of_what_tail_follows_is_not_stalled(tmp_path: Path, reap, follower: str, named: bool) -> None:
    """`tail -F app.log | grep ERROR >> alerts.log`, no ERROR in ten minutes: alerts.log is empty by
    design, and tail waits in a poll over its inotify instance for app.log to change. It read STALLED,
    exit 1, "grep waits on tail, which makes no progress" and "alerts.log is empty" (found by a helper).
    The control feeds grep from a program locked on itself: STALLED."""
    if shutil.which("tail") is None or shutil.which("grep") is None:
        pytest.skip("needs tail and grep")
    app, alerts = tmp_path / "app.log", tmp_path / "alerts.log"
    app.write_text("started\n")
    alerts.touch()
    first = f"tail -F {app}" if follower == "tail" else f"{sys.executable} -c {shlex.quote(SELF_LOCKED)}"
    p = subprocess.Popen(["bash", "-c", f"{first} | grep --line-buffered ERROR >> {alerts}"], start_new_session=True)
    reap.append(p)
    wait = "poll_schedule_timeout" if follower == "tail" else "futex"
    wait_for(lambda: any(proc_wchan(d).startswith(wait) for d in descendants(p.pid))
             and any(proc_wchan(d).endswith("pipe_read") for d in descendants(p.pid)),
             what="the first stage waiting, grep reading its pipe")  # fmt: skip
    old = time.time() - 600
    os.utime(alerts, (old, old))
    os.utime(app, (old, old))
    rc, host = vastprobe_json("--pid", str(p.pid), *(("--log", str(alerts)) if named else ()))
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    if follower == "locked":
        assert ("do-wait-orphan", "error") in [f[:2] for f in said], said
        assert host["verdict"] == "stalled" and rc == 1, said
        return
    assert not [f for f in said if f[1] in ("error", "critical")], said
    if named:  # the operator named it: said, and why it is quiet
        [summary] = [f[2] for f in said if f[0] == "missing-logs"]
        assert summary.endswith("the job waits for a file it follows to change"), summary
        assert host["verdict"] == "degraded" and rc == 0, said
    else:
        assert not [f for f in said if f[0] in ("missing-logs", "do-wait-orphan")], said
        assert host["verdict"] == "healthy" and rc == 0, said


def test_a_python_job_in_a_long_sleep_with_a_quiet_log_is_not_stalled(tmp_path: Path, reap) -> None:
    """`time.sleep(3600)` with its log quiet for ten minutes, no --log: no-progress called it alive
    but making no progress, an error (found by a helper). It wakes by itself: a warning."""
    log = tmp_path / "job.log"
    code = f"f = open({str(log)!r}, 'a'); f.write('start\\n'); f.flush(); import time; time.sleep(3600)"
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    reap.append(p)
    wait_for(lambda: proc_wchan(p.pid) == "hrtimer_nanosleep" and log.stat().st_size > 0, what="asleep")
    os.utime(log, (1, 1))
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5", "--stale-after", "60")
    assert not any(f["rule"] == "no-progress" for f in host["findings"]), host["findings"]
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert f["severity"] == "warning" and "sleeps on a timer" in f["summary"], f
    assert host["verdict"] == "degraded" and rc == 0


MANY_THREADS = """import sys, threading, time
for _ in range(80):
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
f = open(sys.argv[1], "a"); f.write("start\\n"); f.flush()
if sys.argv[2] == "sleep":
    time.sleep(3600)
threading.Event().wait()  # no timeout: nothing wakes it
"""


@pytest.mark.parametrize("main", ["sleep", "event"])
def test_a_job_of_more_threads_than_the_probe_reads_asleep_on_a_timer_is_not_stalled(
    tmp_path: Path, reap, main: str
) -> None:
    """A trainer of 81 threads (the probe reads 64 a process), its main thread in `time.sleep(3600)`,
    its log quiet for ten minutes, named with --log: missing-logs and no-progress called it an error,
    STALLED, exit 1 (seen here: nothing said its unread threads sleep too). Its flow waits on a timer:
    a warning, DEGRADED, exit 0. The control waits on an Event with no timeout: still an error."""
    log = tmp_path / "job.log"
    p = subprocess.Popen([sys.executable, "-c", MANY_THREADS, str(log), main], start_new_session=True)
    reap.append(p)
    wanted = "hrtimer_nanosleep" if main == "sleep" else "futex_do_wait"
    # the log first: it is written once the threads run, and starting them waits on a futex too (a CI run)
    wait_for(lambda: log.exists() and log.stat().st_size > 0 and proc_wchan(p.pid) == wanted,
             what="its main thread waiting")  # fmt: skip
    os.utime(log, (time.time() - 600, time.time() - 600))
    rc, host = vastprobe_json("--pid", str(p.pid), "--log", str(log), "--stale-after", "60")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    proc = next(q for q in host["snapshot"]["processes"] if q["pid"] == p.pid)
    assert proc["threads"] == 81 and len(proc["threads_detail"]) < 80, "every thread read: the case not met"
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    if main == "event":
        assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, said
        return
    assert f["severity"] == "warning" and "sleeps on a timer" in f["summary"], said
    assert not [x for x in said if x[1] in ("error", "critical")], said
    assert host["verdict"] == "degraded" and rc == 0, said


CAPTURE = """import subprocess, sys
print("starting", flush=True)
r = subprocess.run(["sh", "-c", sys.argv[1] + " & echo launched"], capture_output=True)
print("never", r.stdout, flush=True)
"""


@pytest.mark.parametrize("stdout", ["file", "pipe"])
def test_capture_output_held_open_by_a_daemon_the_launcher_left(reap, tmp_path: Path, stdout: str) -> None:
    """`subprocess.run(..., capture_output=True)` of a launcher that starts a daemon and exits: the
    daemon inherits stdout and stderr, and communicate() polls both for ever. It read HEALTHY with
    --pid, --match and no scope (found by a helper): the pipes were among fds a loop polls. The job's
    own stdout a file, or a pipe to its supervisor (docker's shim): poll's 2 fds were taken for that
    pipe and the first of the child's."""
    daemon = f"{sys.executable} -c 'import signal; signal.pause()'"
    out = tmp_path / "job.out"
    with out.open("w") as f:
        p = subprocess.Popen([sys.executable, "-c", CAPTURE, daemon], start_new_session=True,
                             stdout=f if stdout == "file" else subprocess.PIPE)  # fmt: skip
    reap.append(p)
    if p.stdout is not None:
        assert p.stdout.readline() == b"starting\n"
    else:
        wait_for(lambda: out.read_text() == "starting\n", what="the job started")
    wait_for(lambda: "poll" in proc_wchan(p.pid) and _daemon(p.pid) is not None,
             what="communicate() polling, the daemon re-parented")  # fmt: skip
    orphan = _daemon(p.pid)
    assert orphan is not None
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.5")
    f = next(f for f in host["findings"] if f["rule"] == "do-wait-orphan")
    assert f["severity"] == "error" and f["pids"][0] == p.pid and orphan in f["pids"], f
    assert "orphan" in f["summary"] and rc == 1 and host["verdict"] == "stalled"


def _daemon(sid: int) -> int | None:
    """The daemon of session `sid`, once its launcher exited and it was re-parented out of the session."""
    for q in psutil.process_iter(["pid", "ppid", "cmdline"]):
        try:
            if q.pid != sid and os.getsid(q.pid) == sid and "signal.pause()" in " ".join(q.info["cmdline"] or ()):
                parent = q.info["ppid"]
                if parent <= 1 or os.getsid(parent) != sid:
                    return q.pid
        except (OSError, psutil.Error):
            continue
    return None


def test_command_substitution_held_open_by_an_orphan(reap) -> None:
    """`x=$(sh -c 'sleep 1000 & echo hi')`: bash reads the substitution to EOF, which never comes."""
    p = subprocess.Popen(["bash", "-c", "x=$(sh -c 'sleep 1000 & echo hi'); echo done"], start_new_session=True,
                         stdout=subprocess.DEVNULL)  # fmt: skip
    reap.append(p)
    wait_for(lambda: proc_wchan(p.pid).endswith("pipe_read"), what="bash reading the substitution")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    f = next(f for f in host["findings"] if f["rule"] == "do-wait-orphan")
    assert f["severity"] == "error" and f["pids"][0] == p.pid and rc == 1
    orphan = f["pids"][1]
    assert Path(f"/proc/{orphan}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"1000"]
    assert "waits for EOF" in f["summary"]


def test_live_producer_pipeline_is_not_an_orphan_trap(tmp_path: Path, reap) -> None:
    """`producer | consumer` where the producer keeps writing: no finding."""
    prod = "import time\nwhile True:\n    print('x', flush=True); time.sleep(0.02)\n"
    script = tmp_path / "producer.py"
    script.write_text(prod)
    p = subprocess.Popen(["bash", "-c", f"{sys.executable} {script} | cat > /dev/null"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 2, what="pipeline started")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    assert rc == 0
    assert not [f for f in host["findings"] if f["severity"] in ("error", "critical")], host["findings"]


ADOPTED = """{python} -c "
import os
import shutil
import subprocess
subprocess.Popen(['sleep', '600'])  # a daemon that inherits its launcher's stdout: the pipe
print('launched', flush=True)
" | cat > /dev/null
echo done
"""
LIVE = "sleep 600 | cat > /dev/null\necho done\n"


def _container(reap, tmp_path: Path, script: str) -> tuple[subprocess.Popen, int]:
    """A container's shell seen from the host: `sh` as the init of a PID namespace of its own."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (util-linux) for a PID namespace")
    path = tmp_path / "entrypoint.sh"
    path.write_text(script)
    top = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", str(path)], start_new_session=True)
    reap.append(top)
    wait_for(lambda: any(comm_of(k) == "sh" for k in children_of(top.pid)), what="the namespace's init")
    init = next(k for k in children_of(top.pid) if comm_of(k) == "sh")
    wait_for(lambda: sorted(comm_of(k) for k in children_of(init)) == ["cat", "sleep"], what="cat and sleep")
    return top, init


def comm_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.mark.parametrize("sample", ["1", "0"])
def test_an_orphan_adopted_by_a_containers_init_holding_the_pipe(reap, tmp_path: Path, sample: str) -> None:
    """The launcher's daemon, adopted by the namespace's init when the launcher ended, holds the
    pipe its reader waits on: the do-wait-orphan story with host PIDs (it read HEALTHY: the orphan
    is the reader's sibling, as a pipeline's producer is, but it started after the reader)."""
    top, init = _container(reap, tmp_path, ADOPTED.format(python=sys.executable))
    sleep = next(k for k in children_of(init) if comm_of(k) == "sleep")
    rc, host = vastprobe_json("--pid", str(top.pid), "--sample", sample)
    f = next((f for f in host["findings"] if f["rule"] == "do-wait-orphan"), None)
    assert f is not None, [(g["rule"], g["severity"], g["summary"]) for g in host["findings"]]
    assert f"the orphan {sleep} (sleep)" in f["summary"], f["summary"]
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1


def test_a_containers_live_pipeline_is_no_orphan(reap, tmp_path: Path) -> None:
    """The control: `sleep 600 | cat` in the same container; its producer started first."""
    top, _init = _container(reap, tmp_path, LIVE)
    rc, host = vastprobe_json("--pid", str(top.pid), "--sample", "1")
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


#: A spool service: a multiprocessing.Pool(2) kept warm while the main loop polls a directory every
#: 5 s (its workers wait for tasks: one reads the task pipe, the other waits on the pool's shared
#: lock). `--locked`: the main thread takes a lock twice instead of polling (the control)
POOL_SPOOL = r"""
import multiprocessing as mp, os, sys, threading, time
def work(p):
    return os.path.getsize(p)
if __name__ == "__main__":
    with mp.Pool(2) as pool:
        print("pool up", flush=True)
        if sys.argv[2:] == ["--locked"]:
            lock = threading.Lock(); lock.acquire(); lock.acquire()
        while True:
            fs = [os.path.join(sys.argv[1], f) for f in os.listdir(sys.argv[1])]
            if fs:
                print(pool.map(work, fs), flush=True)
            time.sleep(5)
"""


@pytest.mark.parametrize("main", ["polls", "locked"])
def test_an_idle_pool_beside_a_main_loop_asleep_on_its_timer_is_not_stalled(tmp_path: Path, reap, main: str) -> None:
    """A warm multiprocessing.Pool whose main loop sleeps 5 s between looks at its spool, its log 10
    minutes old: "python3 (worker) waits on python3 (pool), which makes no progress", STALLED, exit 1
    (found by a helper). The pool's flow sleeps on a timer, its workers wait on it (the task pipe, and
    the lock they share with each other): a warning. The control's main thread is locked: STALLED."""
    spool, log = tmp_path / "spool", tmp_path / "job.log"
    spool.mkdir()
    script = tmp_path / "spool_service.py"  # a file: the pool's workers re-import the main module
    script.write_text(POOL_SPOOL)
    with log.open("w") as out:
        job = subprocess.Popen([sys.executable, str(script), str(spool), *(["--locked"] if main == "locked" else [])],
                               stdout=out, stderr=out, start_new_session=True)  # fmt: skip
    reap.append(job)
    wait = "hrtimer_nanosleep" if main == "polls" else "futex_do_wait"
    wait_for(lambda: "pool up" in log.read_text() and proc_wchan(job.pid) == wait
             and len(children_of(job.pid)) == 2, timeout=30, what="the pool up, its main thread waiting")  # fmt: skip
    os.utime(log, (time.time() - 600, time.time() - 600))
    rc, host = vastprobe_json("--pid", str(job.pid))
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    if main == "locked":
        assert [f for f in said if f[1] == "error"] and host["verdict"] == "stalled" and rc == 1, said
        return
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert host["verdict"] == "degraded" and rc == 0, said
