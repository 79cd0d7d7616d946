"""Shared test helpers: run the real probe on this machine, and poll for process states."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from vastprobe.model import HostSnapshot
from vastprobe.parsers.snapshot import build_snapshot
from vastprobe.probe.script import ProbeParams, render_script
from vastprobe.probe.sections import split_sections

#: A vfork() parent sleeps uninterruptibly until its child execs or exits: a real D state.
VFORK_C = "#include <unistd.h>\nint main(void) { if (vfork() == 0) { for (;;) pause(); } return 0; }\n"


def compiled_c(tmp_path: Path, name: str, source: str, *flags: str) -> Path:
    """`source` built as `tmp_path/name` with this machine's C compiler; the test is skipped where
    there is none (CI installs gcc)."""
    import shutil

    import pytest

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip(f"needs a C compiler to make {name}")
    src, exe = tmp_path / f"{name}.c", tmp_path / name
    src.write_text(source)
    subprocess.run([cc, *flags, "-o", str(exe), str(src)], check=True)
    return exe


#: An idle threaded program: its main thread joins a thread that waits on a condition nobody signals
#: (every task on a futex, as a Python program joining a worker on its queue looks); it writes a
#: newline once both are started. Seventy of them are more than the probe
#: reads the threads' system calls of (64 such processes).
IDLE_JOINER_C = r"""
#include <pthread.h>
#include <unistd.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static void *waits(void *a) { pthread_mutex_lock(&m); for (;;) pthread_cond_wait(&c, &m); return a; }
int main(void) { pthread_t t; pthread_create(&t, 0, waits, 0); write(1, "\n", 1); pthread_join(t, 0); return 0; }
"""


def idle_joiner(tmp_path: Path) -> Path:
    """IDLE_JOINER_C, built in `tmp_path`."""
    return compiled_c(tmp_path, "idle_joiner", IDLE_JOINER_C, "-pthread")


def run_probe_raw(params: ProbeParams, shell: list[str] | None = None, env: dict[str, str] | None = None) -> bytes:
    script = render_script(params)
    proc = subprocess.run(
        [*(shell or ["/bin/sh"]), "-s"],
        input=script.encode(),
        capture_output=True,
        timeout=params.deadline + 30,  # the probe's own deadline ends it first: its output says so
        env=env,
        start_new_session=True,
    )
    return proc.stdout + proc.stderr


def local_snapshot(params: ProbeParams | None = None, shell: list[str] | None = None) -> HostSnapshot:
    params = params or ProbeParams(sample=0.3)
    raw = run_probe_raw(params, shell)
    out = split_sections(raw, params.boundary)
    return build_snapshot(out, params, "local", "local", len(raw))


def cpu_throttled_cgroup(name: str) -> tuple[Path, Path]:
    """A cgroup allowed 1 ms of CPU a second: (the directory, its procs file). v1's cpu controller or
    v2's cpu.max; skips where neither can be made."""
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists():
        d = v1 / name
        d.mkdir()
        (d / "cpu.cfs_period_us").write_text("1000000")
        (d / "cpu.cfs_quota_us").write_text("1000")
        return d, d / "cgroup.procs"
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists() and "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
        d = v2 / name
        d.mkdir()
        (d / "cpu.max").write_text("1000 1000000")
        return d, d / "cgroup.procs"
    pytest.skip("no cgroup CPU controller to throttle a process with here")


def nginx_conf(d: Path, http: str, access_log: str = "off") -> str:
    """A one-worker nginx in the foreground whose files all lie in `d`; `http`: its servers and upstreams."""
    return f"""
daemon off;
master_process on;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {access_log};
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    {http}
}}
"""


def wait_for(cond: Callable[[], bool], timeout: float = 10.0, what: str | Callable[[], str] = "condition") -> None:
    """Polls `cond`; `what` may be a callable, called at the timeout, that says what was seen instead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def communicate_or_dump(p: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """`p.communicate(timeout)`, where `p` runs with PYTHONFAULTHANDLER=1: past the timeout it gets
    SIGABRT, and the failure shows where each of its threads was (a hang seen once in CI is then
    named by the run that shows it)."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGABRT)
        _out, err = p.communicate(timeout=30)
        raise AssertionError(f"{p.args!r} ran past {timeout} s; its threads:\n{err[-6000:]}") from None


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (the state first), or None when it is
    gone. Read as bytes: any process on this shared machine may have a name that is not UTF-8 (or
    that holds ") "), and a test must not fail because of someone else's process."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].decode("ascii", "replace").split()


def proc_state(pid: int | str) -> str | None:
    fields = stat_fields(pid)
    return fields[0] if fields else None


def all_stopped(pid: int) -> bool:
    """Every thread of `pid` stopped. SIGSTOP stops each thread as it next runs: the main thread's
    state can read T while a busy loaded machine has yet to run another that still writes (a
    threading server's handler)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return bool(tids) and all(proc_state(f"{pid}/task/{t}") in ("T", "t") for t in tids)


def proc_text(pid: int, name: str) -> str:
    """/proc/PID/NAME as text, or "" once the process is gone."""
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return ""


def proc_wchan(pid: int) -> str:
    return proc_text(pid, "wchan")


def children_of(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            fields = stat_fields(d)
            if fields and fields[1] == str(pid):
                out.append(int(d))
    return out


#: The nice a test's CPU spinner runs at (its session's autogroup and itself). At the default a spinner
#: on a loaded machine gets too little CPU to count as busy (the rules' right answer, not the test's
#: case); at -15 two of them left the suite's other worker a thirtieth of a CPU, and a probe there ran
#: past its 60 s deadline (a clean-clone CI at ffd42e1). -5 is three to one: enough for both.
SPINNER_NICE = -5


def favour_on_cpu(pid: int) -> None:
    """Run `pid` (a spinner in a session of its own) at SPINNER_NICE, where this user may."""
    import contextlib

    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, SPINNER_NICE)
        Path(f"/proc/{pid}/autogroup").write_text(str(SPINNER_NICE))


def vastprobe_json(*args: str, timeout: float = 120) -> tuple[int, dict]:
    """`diagnose local` as JSON, with the snapshot (--snapshot): tests read the evidence too."""
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot", *args],
                       capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)["hosts"][0]


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, breadth first."""
    out, frontier = [], [pid]
    while frontier:
        kids = [k for p in frontier for k in children_of(p)]
        out += kids
        frontier = kids
    return out


def vastprobe_json_acting_between_samples(
    action: Callable[[], None], *args: str, sample: float = 2.0, timeout: float = 120
) -> tuple[int, dict]:
    """diagnose local with two samples `sample` s apart, calling `action` once the probe sleeps
    between them (its `sleep` is running): what changes then is seen by the second sample only."""
    cmd = [sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot", "--sample",
           f"{sample:g}", *args]  # fmt: skip
    # The probe's shell leads a session of its own (the local transport starts it so): its sample's
    # `sleep` is the one process of that session named so. One /proc scan a poll, not one a level of
    # the tree: two CI runs missed the 2 s window (or the probe ran past the wait) with no clue which.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        want = [b"sleep", f"{sample:g}".encode()]

        def probe_sessions() -> set[str]:
            return {f[3] for k in children_of(proc.pid) if (f := stat_fields(k))}

        def sleeping() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the probe ended (rc {proc.returncode}) before its sample's sleep was seen")
            sessions = probe_sessions()
            for d in os.listdir("/proc"):
                fields = stat_fields(d) if d.isdigit() else None
                if fields and fields[3] in sessions:
                    try:
                        argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
                    except OSError:
                        continue
                    if argv[:2] == want:
                        return True
            return False

        try:
            wait_for(sleeping, timeout=timeout / 2, what="the probe sleeping between its samples")
        except AssertionError as e:
            tree = [(d, proc_text(d, "comm").strip(), proc_wchan(d)) for d in descendants(proc.pid)]
            raise AssertionError(f"{e}; the probe's processes: {tree}") from None
        action()
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out, err
    return proc.returncode, json.loads(out)["hosts"][0]


def analyze_recording(scene: Path, *args: str) -> tuple[int, dict]:
    """`vastprobe analyze` of a recorded probe output (fixtures/procfs/SCENE: probe.out, params.json), as
    a capture of it: the verdict and the exit code a user gets from that host."""
    import base64
    import hashlib
    import tempfile

    raw = (scene / "probe.out").read_bytes()
    params = json.loads((scene / "params.json").read_text())
    doc = {"schema": "vastprobe.capture/1", "target": "local", "transport": "local", "status": "ok", "params": params,
           "raw_b64": base64.b64encode(raw).decode(), "raw_sha256": hashlib.sha256(raw).hexdigest()}  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        cap = Path(d) / "capture.json"
        cap.write_text(json.dumps(doc))
        r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", str(cap), "--format", "json", *args],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)["hosts"][0]


def interruptible() -> None:
    """preexec_fn for a child a test interrupts with SIGINT: a suite run under nohup or by a CI
    runner in the background inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt for it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def child_waiting(parent: int, comm: str, wchan: str) -> int | None:
    """A child of `parent` named `comm` whose wait channel starts with `wchan`, if any."""
    for k in children_of(parent):
        try:
            name = Path(f"/proc/{k}/comm").read_bytes().decode("utf-8", "replace").strip()
        except OSError:
            continue
        if name == comm and proc_wchan(k).startswith(wchan):
            return k
    return None


def stopped_child(reap: list) -> tuple[subprocess.Popen, int]:
    """`sh -c 'sleep 1000 & wait'` whose sleep is stopped by SIGSTOP: a parent waiting on a child
    that cannot finish. Returns the shell and the stopped child."""
    p = subprocess.Popen(["sh", "-c", "sleep 1000 & wait"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 1, what="child started")
    child = children_of(p.pid)[0]
    # the fork is the shell's until it execs sleep: stopped before that, it reads `sh (N) is stopped`
    wait_for(lambda: Path(f"/proc/{child}/comm").read_text().strip() == "sleep", what="the child become sleep")
    os.kill(child, signal.SIGSTOP)
    wait_for(lambda: proc_state(child) == "T", what="child stopped")
    return p, child


def crossed_flocks(reap: list, tmp_path: Path) -> tuple[subprocess.Popen, subprocess.Popen]:
    """Two `flock` holders, each then blocked taking the other's lock: a real lock deadlock."""
    a, b = tmp_path / "a.lock", tmp_path / "b.lock"
    one = subprocess.Popen(["flock", str(a), "sh", "-c", f"sleep 0.3; exec flock {b} true"], start_new_session=True)
    two = subprocess.Popen(["flock", str(b), "sh", "-c", f"sleep 0.3; exec flock {a} true"], start_new_session=True)
    reap.extend([one, two])
    for p in (one, two):
        wait_for(lambda p=p: child_waiting(p.pid, "flock", "locks_lock") is not None, what="both blocked")
    return one, two


FUSE_SERVER = Path(__file__).resolve().parent / "fuse_server.py"


def mount_fuse(reap: list, where: Path, serve_until: Path | None = None) -> subprocess.Popen:
    """The test FUSE server (tests/fuse_server.py: it answers INIT and nothing else; with
    `serve_until`, a `job.log` until that file exists) mounted on `where`, which it makes; the test
    skips, saying why, where this machine cannot mount one."""
    import pytest

    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("needs root and /dev/fuse")
    where.mkdir()
    until = ["--serve-until", str(serve_until)] if serve_until is not None else []
    server = subprocess.Popen([sys.executable, str(FUSE_SERVER), str(where), *until], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    reap.append(server)
    assert server.stdout is not None
    if server.stdout.readline().strip() != "ready":
        pytest.skip("could not mount a FUSE file system here")
    return server


#: A quiet process with a second thread: the probe reads the environ of multi-threaded processes
#: (ranks are), so one with a rank's variables (a dump prefix) stands in for a rank.
THREADED_SLEEPER = (
    "import threading, time\n"
    "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    "print(flush=True); time.sleep(600)"
)


def threaded_sleeper(**env: str) -> subprocess.Popen:
    """THREADED_SLEEPER with `env` added to this environment, returned once its thread runs; the
    caller ends it."""
    holder = subprocess.Popen([sys.executable, "-c", THREADED_SLEEPER], stdout=subprocess.PIPE,
                              env={**os.environ, **env})  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == b"\n"
    return holder
