"""A wait with a deadline is a timer: a futex wait with a timeout (`Event.wait(3600)`, a scheduler
between hourly runs), `select` with a timeout, an event loop waiting for its next timer
(`asyncio.sleep`). Only nanosleep was read so, and each read STALLED, exit 1, beside a quiet log; a
flock holder sleeping so between steps made the next cron run STALLED with a "did nothing" proof
(found by a helper). The untimed twin stays STALLED: it waits for ever."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import analyze_recording, compiled_c, proc_state, proc_wchan, vastprobe_json, wait_for
from tests.paths import FIXTURES

WAITS = {
    "event": "import threading; threading.Event().wait(3600)",
    "select": "import select; select.select([], [], [], 3600)",
    "asyncio": "import asyncio; asyncio.run(asyncio.sleep(3600))",
    "untimed": "import threading; threading.Event().wait()",
}
ASLEEP = ("futex", "do_select", "core_sys_select", "poll_schedule_timeout", "do_epoll_wait", "ep_poll")


def quiet_log(tmp_path: Path) -> Path:
    log = tmp_path / "job.log"
    log.write_text("waiting for the next run\n")
    os.utime(log, (1, 1))
    return log


@pytest.mark.parametrize("how", sorted(WAITS))
def test_a_job_waiting_with_a_deadline_beside_a_quiet_log_is_not_stalled(reap, tmp_path: Path, how: str) -> None:
    log = quiet_log(tmp_path)
    job = subprocess.Popen([sys.executable, "-c", WAITS[how]], start_new_session=True)
    reap.append(job)
    wait_for(lambda: proc_wchan(job.pid).startswith(ASLEEP), what="the job asleep")
    rc, host = vastprobe_json("--pid", str(job.pid), "--log", str(log), "--sample", "0.5")
    said = [
        (f["rule"], f["severity"], f["summary"])
        for f in host["findings"]
        if job.pid in f["pids"] or f["rule"] == "missing-logs"
    ]
    if how == "untimed":  # nothing wakes it: the control
        assert host["verdict"] == "stalled" and rc == 1, said
        return
    assert host["verdict"] == "degraded" and rc == 0, said
    assert any(r == "missing-logs" and "sleeps on a timer" in s for r, _sev, s in said), said


#: timed waits the kernel resumes through restart_syscall once stopped and continued (or ptrace-attached:
#: `strace -p`, `gdb -p`), and an untimed one (restarted as the futex call itself): the control
RESUMED = {
    "sleep": ["sleep", "3600"],
    "event": [sys.executable, "-c", WAITS["event"]],
    "sigtimedwait": [sys.executable, "-c", "import signal; signal.sigtimedwait([signal.SIGUSR1], 3600)"],
    "untimed": [sys.executable, "-c", WAITS["untimed"]],
}


@pytest.mark.parametrize("how", sorted(RESUMED))
def test_a_timed_wait_resumed_after_a_stop_is_still_timed(reap, tmp_path: Path, how: str) -> None:
    """After `kill -STOP`/`-CONT`, Ctrl-Z and `bg`, or `gdb -p` (which vastprobe's own hints name), the
    kernel resumes a timed wait through restart_syscall: /proc shows that call (219 on x86-64) with the
    arguments of the one it resumes, and `sleep`'s wait channel becomes do_syscall_64. Each read as a
    wait with no deadline: STALLED, exit 1, "makes no progress" (found by a helper). A wait for a signal
    with a deadline (sigtimedwait) read so even unstopped: the probe did not read its system call."""
    log = quiet_log(tmp_path)
    job = subprocess.Popen(RESUMED[how], start_new_session=True)
    reap.append(job)
    asleep = ("futex", "hrtimer", "do_nanosleep", "do_sigtimedwait")
    wait_for(
        lambda: proc_wchan(job.pid).startswith(asleep), what=lambda: f"the job asleep, not {proc_wchan(job.pid)!r}"
    )
    if how != "sigtimedwait":
        os.kill(job.pid, signal.SIGSTOP)
        wait_for(lambda: proc_state(job.pid) == "T", what="the job stopped")
        os.kill(job.pid, signal.SIGCONT)
        wait_for(lambda: proc_state(job.pid) == "S", what="the job asleep again")
    call = Path(f"/proc/{job.pid}/syscall").read_text().split()[0]
    rc, host = vastprobe_json("--pid", str(job.pid), "--log", str(log), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    if how == "untimed":  # nothing wakes it: the control
        assert host["verdict"] == "stalled" and rc == 1, said
        return
    if how != "sigtimedwait" and call not in ("219", "128"):
        pytest.skip(f"the kernel resumed it otherwise here (system call {call}): the case not met")
    assert host["verdict"] == "degraded" and rc == 0, said
    assert any(r == "missing-logs" and "sleeps on a timer" in s for r, _sev, s in said), said


#: a launcher waiting on its workers in order (Popen.wait): the first sleeps on timers, the second is
#: killed below and stays a zombie until the launcher gets to it
IN_ORDER = """
import subprocess, sys
ps = [subprocess.Popen(["bash", "-c", "while :; do sleep 3; done"]), subprocess.Popen(["sleep", "3600"])]
print(ps[1].pid, flush=True)
for p in ps:
    p.wait()
"""


def test_a_job_asleep_on_timers_beside_a_killed_unreaped_child_is_not_stalled(reap, tmp_path: Path) -> None:
    """Someone SIGKILLs a worker (not the OOM killer) that its launcher, waiting on another first, has not
    reaped: the zombie waits on nothing, and the job still sleeps on timers. The zombie made the job
    "not all asleep on timers", and its quiet log STALLED, exit 1 (found by a helper)."""
    log = quiet_log(tmp_path)
    job = subprocess.Popen([sys.executable, "-c", IN_ORDER], stdout=subprocess.PIPE, text=True, start_new_session=True)
    reap.append(job)
    assert job.stdout is not None
    victim = int(job.stdout.readline())
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: proc_state(victim) == "Z", what="the killed worker a zombie")
    rc, host = vastprobe_json("--pid", str(job.pid), "--log", str(log), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert host["verdict"] == "degraded" and rc == 0, said
    assert any(r == "missing-logs" and "sleeps on a timer" in s for r, _sev, s in said), said


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock (util-linux)")
def test_the_next_cron_run_behind_a_holder_waiting_with_a_deadline_is_not_stalled(reap, tmp_path: Path) -> None:
    lock = tmp_path / "job.lock"
    holder = subprocess.Popen(["flock", str(lock), sys.executable, "-c", WAITS["event"]], start_new_session=True)
    reap.append(holder)
    wait_for(lambda: any(proc_wchan(int(d)).startswith("futex") for d in os.listdir("/proc") if d.isdigit()
                         and Path(f"/proc/{d}/stat").exists() and _ppid(int(d)) == holder.pid), what="the holder asleep")  # fmt: skip
    nxt = subprocess.Popen(["flock", str(lock), "true"], start_new_session=True)
    reap.append(nxt)
    wait_for(lambda: proc_wchan(nxt.pid).startswith(("flock", "locks_lock", "__flock")), what="the next run queued")
    rc, host = vastprobe_json("--pid", str(nxt.pid), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert host["verdict"] != "stalled" and rc == 0, said


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


#: A runtime's shape, in C (no JVM or Node in CI; recorded from both: fixtures/procfs/java-hourly,
#: node-hourly). `jvm`: the launcher's main thread joins the thread that runs main(), which sleeps an
#: hour (Thread.sleep: a condition wait with a deadline) beside service threads waiting for work with
#: none; `jvm-untimed`, the control: main() waits for ever. `node`: the main thread's event loop waits
#: an hour for its next timer (setInterval) beside four platform workers idle on one condition, one
#: thread on a semaphore and one in an epoll with no timeout.
RUNTIME_C = r"""
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static sem_t sem;
static int timed;
static void *idle(void *a) { pthread_mutex_lock(&mu); for (;;) pthread_cond_wait(&work, &mu); }
static void *own_idle(void *a) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER; pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&m); for (;;) pthread_cond_wait(&c, &m);
}
static void *sem_idle(void *a) { for (;;) sem_wait(&sem); }
static void *poll_idle(void *a) { struct epoll_event e; int fd = epoll_create1(0); for (;;) epoll_wait(fd, &e, 1, -1); }
static void *java_main(void *a) {
    pthread_t t;
    for (int i = 0; i < 3; i++) pthread_create(&t, 0, own_idle, 0);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER; pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&m);
    for (;;) {
        struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts); ts.tv_sec += 3600;
        if (timed) pthread_cond_timedwait(&c, &m, &ts); else pthread_cond_wait(&c, &m);
    }
}
static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both;
static void *ab(void *x) {
    pthread_mutex_t *first = x ? &a : &b, *then = x ? &b : &a;
    pthread_mutex_lock(first); pthread_barrier_wait(&both); pthread_mutex_lock(then); return 0;
}
static void *recheck(void *x) {  /* a supervisor re-checking every second for workers that never finish */
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER; pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&m);
    for (;;) { struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts); ts.tv_sec += 1; pthread_cond_timedwait(&c, &m, &ts); }
}
int main(int argc, char **argv) {
    pthread_t t;
    if (strcmp(argv[1], "deadlock") == 0) {
        pthread_barrier_init(&both, 0, 2);
        pthread_create(&t, 0, ab, (void *)1); pthread_create(&t, 0, ab, 0);
        pthread_create(&t, 0, recheck, 0);
        pthread_join(t, 0);
        return 0;
    }
    if (strncmp(argv[1], "jvm", 3) == 0) {
        timed = strcmp(argv[1], "jvm") == 0;
        pthread_create(&t, 0, java_main, 0);
        pthread_join(t, 0);
        return 0;
    }
    sem_init(&sem, 0, 0);
    for (int i = 0; i < 4; i++) pthread_create(&t, 0, idle, 0);
    pthread_create(&t, 0, sem_idle, 0);
    pthread_create(&t, 0, poll_idle, 0);
    struct epoll_event e; int fd = epoll_create1(0);
    for (;;) epoll_wait(fd, &e, 1, 3600 * 1000);
}
"""


@pytest.mark.parametrize("shape", ["jvm", "node", "jvm-untimed", "deadlock"])
def test_a_runtime_whose_flow_waits_with_a_deadline_beside_idle_threads_is_not_stalled(
    reap, tmp_path: Path, shape: str
) -> None:
    """A Java `Thread.sleep` job and a Node `setInterval` job, each logging once an hour, read STALLED, exit 1,
    on their quiet logs (found by a helper): the judgement looked at the main thread alone (Java's joins
    the thread that runs main()) and wanted every other thread on a timer or idle on I/O, while a runtime's
    pools wait for work on conditions with no deadline. The flow waiting with a deadline is enough for a
    quiet log; the control, main() waiting for ever, stays STALLED. `deadlock`: main joins a thread that
    re-checks every second while two workers hold each other's mutex: a thread on a contended mutex may
    be half of a deadlock, and it stays STALLED (it read DEGRADED in this change's first version; found by
    the session's regression hunt)."""
    exe = compiled_c(tmp_path, "runtime", RUNTIME_C, "-pthread")
    log = quiet_log(tmp_path)
    job = subprocess.Popen([str(exe), shape], start_new_session=True)
    reap.append(job)
    threads = {"jvm": 5, "jvm-untimed": 5, "node": 7, "deadlock": 4}[shape]

    def settled() -> bool:
        tids = os.listdir(f"/proc/{job.pid}/task")
        return len(tids) == threads and all(_wchan(f"/proc/{job.pid}/task/{t}") not in ("", "0") for t in tids)

    wait_for(settled, what="every thread asleep")
    rc, host = vastprobe_json("--pid", str(job.pid), "--log", str(log), "--sample", "0.5")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"] if job.pid in f["pids"] or f["rule"] == "missing-logs"]  # fmt: skip
    if shape in ("jvm-untimed", "deadlock"):
        assert host["verdict"] == "stalled" and rc == 1, said
        return
    assert any(r == "missing-logs" and s.endswith(": the job sleeps on a timer") for r, _sev, s in said), said
    assert host["verdict"] == "degraded" and rc == 0, said


@pytest.mark.parametrize("scene", ["java-hourly", "node-hourly"])
def test_an_hourly_job_on_a_real_runtime_beside_its_quiet_log_is_not_stalled(scene: str) -> None:
    """Recorded: OpenJDK 17 (`Thread.sleep(3600000)` in main()) and Node.js (`setInterval` of an hour),
    each a quarter of an hour after its last line. Both read STALLED, exit 1 (missing-logs' error, and
    no-progress' "java is alive but makes no progress"). Java's launcher thread joins main()'s thread,
    which waits with a deadline; Node's event loop waits with one."""
    rc, host = analyze_recording(FIXTURES / "procfs" / scene, "--pid", "3")
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert any(r == "missing-logs" and s.endswith(": the job sleeps on a timer") for r, _sev, s in said), said
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert host["verdict"] == "degraded" and rc == 0, said


def _wchan(task: str) -> str:
    try:
        return Path(f"{task}/wchan").read_text()
    except OSError:
        return ""
