"""Polling locks with --py-spy (issue 20): py-filelock and torch's FileBaton close or never open their
lock file between attempts, so nothing in /proc links a waiter to the holder; the waiter's Python
stack and the allow-listed locals py-spy reads (`--locals`) name the lock file.

- the probe's filter on real py-spy dumps (fixtures/py-spy): only allow-listed names leave, a planted
  secret never does, the stack lines stay as they were; with every awk this machine has;
- real PyTorch's FileBaton, recorded by hand (fixtures/procfs/torch-filebaton*: torch is never a CI
  dependency): the holder named, and the lock file nobody holds;
- end to end with the real filelock (a test extra), holder and waiter real processes: the holder and
  the path named, with one sample and with two; a holder that let go is no finding;
- end to end with a stand-in for torch's FileBaton (a plain file_baton.py with torch's wait loop,
  called from a `_jit_compile(name, build_directory)`: not torch), holder alive and holder killed;
- a py-spy that refuses --locals still gives the stacks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import pytest

from fixtures.procfs.record import parse_fixture
from tests.helpers import wait_for
from tests.paths import REPO
from vastprobe.analysis.scope import compute_scope
from vastprobe.analysis.waitgraph.pylocks import POLLING_LOCKS, polling_lock
from vastprobe.model import FrameLocal, PyThread
from vastprobe.parsers.pystack import ALLOWED_LOCALS, parse_pystack_section
from vastprobe.probe.script import ProbeParams, render_script, script_template
from vastprobe.rules.base import RuleOptions
from vastprobe.rules.engine import run_rules

SPY_FIXTURES = REPO / "fixtures" / "py-spy"
PROCFS = REPO / "fixtures" / "procfs"
SECRET = "hf_plantedtoken"


def _script_value(name: str) -> str:
    m = re.search(rf"^{name}='([^']*)'$", script_template(), re.MULTILINE)
    assert m is not None, name
    return m.group(1)


def _awks() -> list[list[str]]:
    found = [[a] for a in ("gawk", "mawk", "nawk") if shutil.which(a)]
    return found + ([["busybox", "awk"]] if shutil.which("busybox") else []) or [["awk"]]


def probe_filter(raw: str, awk: list[str] | None = None, pid: int = 4242) -> str:
    """What the probe sends for one program: py-spy's output through the script's own awk."""
    r = subprocess.run([*(awk or ["awk"]), "-v", "cap=65536", "-v", f"keep={_script_value('VP_PYLOCALS')}",
                        _script_value("VP_PYSPY_AWK")], input=raw, capture_output=True, text=True, check=True)  # fmt: skip
    return f"@pyspy {pid}\n{r.stdout}"


def test_the_probe_and_the_parser_allow_the_same_names() -> None:
    assert tuple(_script_value("VP_PYLOCALS").split()) == ALLOWED_LOCALS
    for decl in POLLING_LOCKS:
        assert {name for name, _ in decl.paths} <= set(ALLOWED_LOCALS), decl


@pytest.mark.parametrize("awk", _awks(), ids=lambda a: a[0])
@pytest.mark.parametrize(
    ("fixture", "frame", "local", "path"),
    [
        ("filelock-4.3-waiter.txt", "LockAcquisition._poll_until_acquired", "lock_filename",
         "/tmp/vastprobe-pylocks/x.lock"),
        ("filelock-3.16-waiter.txt", "BaseFileLock.acquire", "lock_filename", "/tmp/vastprobe-pylocks/x.lock"),
        ("torch-filebaton-waiter.txt", "FileBaton.wait", "build_directory", "/tmp/vastprobe-waits/baton/build/lock"),
    ],
)  # fmt: skip
def test_only_allowed_locals_leave_the_target(awk: list[str], fixture: str, frame: str, local: str, path: str) -> None:
    raw = (SPY_FIXTURES / fixture).read_text()
    assert SECRET in raw  # the recording holds it: the filter is what keeps it here
    sent = probe_filter(raw, awk)
    assert SECRET not in sent and "Arguments:" not in sent and "Locals:" not in sent
    names = set(re.findall(r"^\| {12}([A-Za-z_]+): ", sent, re.MULTILINE))
    assert local in names and names <= set(ALLOWED_LOCALS), names
    # every other line of py-spy's is sent as it was, in its order
    kept = [line for line in raw.splitlines() if not line.startswith("        ")]
    assert [line[1:] for line in sent.splitlines()[1:] if not line.startswith("|            ")] == kept
    (stack,), _ = parse_pystack_section(sent)
    (thread,) = stack.threads
    assert thread.frames[0].startswith(frame + " (") and len(thread.frame_locals) == len(thread.frames)
    found = polling_lock(thread)
    assert found is not None and found.named.name == local and found.path == path, found
    assert found.exclusive is (frame == "FileBaton.wait")  # the lock is the file itself: FileBaton's


def test_what_the_filter_drops() -> None:
    """A `self` that is not shown as an object's type (a str subclass prints its text), a value past
    512 characters, and the lines of a value a py-spy printed over several lines (one that does not
    escape newlines) that do not look like a frame: none of it passes."""
    raw = "\n".join([
        'Thread 7 (idle): "MainThread"',
        "    BaseFileLock.acquire (filelock/_api.py:344)",
        "        Arguments:",
        '            self: "sk-live-secret"',
        "            lock_file: " + '"/' + "a" * 600 + '"',
        "        Locals:",
        '            password: "{',
        '    \\"password\\": \\"hunter2\\",',
        '  }"',
        "            lock_filename: \"/tmp/l.lock\"",
        "    <module> (w.py:3)",
        "        Locals:",
        '            self: <SoftFileLock at 0x7f00deadbeef>',
    ])  # fmt: skip
    sent = probe_filter(raw + "\n")
    assert "secret" not in sent and "hunter2" not in sent and "password" not in sent
    (stack,), _ = parse_pystack_section(sent)
    (thread,) = stack.threads
    assert thread.frames == ("BaseFileLock.acquire (filelock/_api.py:344)", "<module> (w.py:3)")
    cut, named = thread.frame_locals[0]
    assert cut.name == "lock_file" and len(cut.repr) == 512 and cut.text is None  # cut short: no path
    assert named.text == "/tmp/l.lock"
    assert thread.frame_locals[1][0].type_name == "SoftFileLock"
    # a variable whose name holds a newline and a frame line (the program chose it: code.replace of
    # co_varnames): the block ended there, and the next line went out as an allow-listed local, the
    # value of `api_token` as `lock_file` (found by a hostile-tenant helper)
    smuggled = "\n".join([
        'Thread 7 (idle): "MainThread"',
        "    waiter (w.py:4)",
        "        Locals:",
        "            api_token",
        "    f (g.py:1)",
        '            lock_file: "PySpyLeak2"',
    ])  # fmt: skip
    sent = probe_filter(smuggled + "\n")
    assert "PySpyLeak2" not in sent, sent
    # a section that sends more than the list (forged, or another probe) is filtered again here
    (forged,), _ = parse_pystack_section('@pyspy 1\n|Thread 1 (idle)\n|    f (x.py:1)\n|            token: "x"\n')
    assert forged.threads[0].frame_locals == () and forged.threads[0].frames == ("f (x.py:1)",)


# ------------------------------------------------------------------ real PyTorch, recorded


def _findings(case: str) -> list:
    snap = parse_fixture(PROCFS / case)
    return [
        f for f in run_rules(snap, compute_scope(snap), RuleOptions(stale_after=10**9)) if f.rule == "file-lock-wait"
    ]


def test_torch_filebaton_waiter_names_the_holder_recorded() -> None:
    (f,) = _findings("torch-filebaton")
    lock = "/tmp/vastprobe-waits/baton/build/lock"
    assert f.summary == f"python (21) keeps retrying the lock on {lock}, held by 4 (python)", f.summary
    assert f.severity == "error" and f.pids[:2] == (21, 4)  # the holder idled over the window: proof
    assert "holds the lock file" in f.hint and "building in /tmp/vastprobe-waits/baton/build" in f.hint
    details = [e.detail for e in f.evidence]
    assert 'its lock file: build_directory = "/tmp/vastprobe-waits/baton/build" (+ lock)' in details, details
    assert any(d.startswith("21 (python) sleeps between attempts in FileBaton.wait (torch/utils/file_baton.py:")
               for d in details), details  # fmt: skip


def test_filelock_waiter_caught_running_recorded() -> None:
    """A polling waiter is caught between two sleeps now and then on a busy host (stat says R, the
    wchan read just after says hrtimer_nanosleep): it still waits. Recorded with four CPU hogs."""
    (f,) = _findings("filelock-caught-running")
    lock = "/tmp/vastprobe-waits/filelock/model.lock"
    assert f.summary == f"python (7) keeps retrying the lock on {lock}, held by 3 (python)", f.summary
    assert any(e.detail.startswith("7 (python) sleeps between attempts in LockAcquisition._poll_until_acquired")
               for e in f.evidence), f.evidence  # fmt: skip


def test_filelock_waiter_caught_awake_recorded() -> None:
    """Caught inside an attempt: stat says R and the wchan read after it says 0, so nothing in /proc
    says it sleeps; py-spy's polling frame says it is in the retry loop. Recorded with four CPU hogs."""
    snap = parse_fixture(PROCFS / "filelock-caught-awake")
    (waiter,) = [p for p in snap.processes if p.pid == 7]
    assert waiter.state == "R" and waiter.wchan == "0"  # what the fixture is for
    (f,) = _findings("filelock-caught-awake")
    lock = "/tmp/vastprobe-waits/filelock/model.lock"
    assert f.summary == f"python (7) keeps retrying the lock on {lock}, held by 3 (python)", f.summary
    # the recorded holder idled over the window asleep on a timer (time.sleep): it wakes by itself, so
    # no proof, a warning; what the fixture is for is that the waiter is followed at all
    assert f.severity == "warning" and not any(e.source == "proof" for e in f.evidence)


def test_torch_filebaton_lock_file_nobody_holds_recorded() -> None:
    (f,) = _findings("torch-filebaton-stale")
    lock = "/tmp/vastprobe-waits/baton/build/lock"
    assert f.severity == "error"
    assert f.summary == (f"python (19) keeps waiting for the lock file {lock} to go away, and no process here has it "
                         "open"), f.summary  # fmt: skip
    assert "Remove it only if no build is running" in f.hint and "/tmp/vastprobe-waits/baton/build" in f.hint
    assert any(e.detail == f"no process here has {lock} open" for e in f.evidence)


# ------------------------------------------------------------------ end to end, real processes


def _py_spy_path() -> str | None:
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    return path if shutil.which("py-spy", path=path) else None


@cache
def _py_spy_refusal() -> str | None:
    """Why py-spy cannot read a Python program here (not installed, no ptrace rights), or None."""
    path = _py_spy_path()
    if path is None:
        return "py-spy is not installed (the test extra brings it)"
    child = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True); import time; time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    last = ""
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = subprocess.run([shutil.which("py-spy", path=path) or "py-spy", "dump", "--nonblocking", "--pid",
                                str(child.pid)], capture_output=True, text=True, timeout=30)  # fmt: skip
            if r.returncode == 0 and "Thread " in r.stdout:
                return None
            last = (r.stdout + r.stderr)[:200]
            time.sleep(0.2)
    finally:
        child.kill()
        child.wait()
    return f"py-spy cannot read a Python program here (it needs ptrace rights: root): {last}"


@pytest.fixture
def spy() -> str:
    why = _py_spy_refusal()
    if why is not None:
        pytest.skip(why)
    path = _py_spy_path()
    assert path is not None
    return path


def _dump(path: str, pid: int) -> str:
    r = subprocess.run(["py-spy", "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True,
                       env=dict(os.environ, PATH=path), timeout=30)  # fmt: skip
    return r.stdout


def diagnose(path: str, pid: int, *extra: str) -> tuple[int, dict]:
    """`vastprobe diagnose local --py-spy --pid PID --format json`, py-spy on PATH."""
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--py-spy", "--pid", str(pid),
                        "--format", "json", *extra], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PATH=path))  # fmt: skip
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)["hosts"][0]


def lock_findings(host: dict) -> list[dict]:
    return [f for f in host["findings"] if f["rule"] == "file-lock-wait"]


#: a holder waits for SIGUSR1 (not on a pipe from the test: the chain would go on to the test)
FILELOCK = """import signal, sys
import filelock
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
with filelock.FileLock(sys.argv[1]):
    print("held", flush=True)
    signal.sigwait({signal.SIGUSR1})  # until the test lets go
"""


def _filelock_process(reap: list, lock: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", FILELOCK, str(lock)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         text=True, start_new_session=True)  # fmt: skip
    reap.append(p)
    return p


@pytest.mark.parametrize("sample", [("--sample", "0"), ()], ids=["one-sample", "default-sample"])
def test_filelock_waiter_names_the_holder_and_the_path(reap, spy: str, tmp_path: Path, sample: tuple[str, ...]) -> None:
    pytest.importorskip("filelock")
    lock = tmp_path / "model.lock"
    holder = _filelock_process(reap, lock)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    waiter = _filelock_process(reap, lock)
    wait_for(lambda: "_poll_until_acquired" in _dump(spy, waiter.pid) or "BaseFileLock.acquire" in _dump(spy, waiter.pid),
             timeout=30, what="the waiter in filelock's polling loop")  # fmt: skip
    # `py-spy dump --nonblocking` reads a running process's memory without stopping it: now and then
    # (a loaded clean-clone CI run) it reads no stack, and the wait is not seen; diagnose again then
    for _ in range(3):
        _rc, host = diagnose(spy, waiter.pid, *sample)
        if lock_findings(host):
            break
    found = lock_findings(host)
    assert found, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    f = found[0]
    assert f"({waiter.pid}) keeps retrying the lock on {lock}, held by {holder.pid} (python" in f["summary"], f[
        "summary"
    ]
    # one sample: a note; two: the holder did nothing while it held the lock, a stall (exit 1)
    assert f["severity"] == ("info" if sample else "error")
    assert host["verdict"] == ("healthy" if sample else "stalled") and _rc == (0 if sample else 1)
    assert "Do not delete the lock file" in f["hint"]
    assert any(e["source"] == "/proc/locks" and f"by {holder.pid} (" in e["detail"] for e in f["evidence"])


def test_filelock_released_is_no_finding(reap, spy: str, tmp_path: Path) -> None:
    """The control: the holder lets go, the waiter takes the lock and holds it in turn, waiting for a
    signal; neither keeps trying anything."""
    pytest.importorskip("filelock")
    lock = tmp_path / "model.lock"
    holder = _filelock_process(reap, lock)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    waiter = _filelock_process(reap, lock)
    wait_for(lambda: "acquire" in _dump(spy, waiter.pid), timeout=30, what="the waiter trying the lock")
    os.kill(holder.pid, signal.SIGUSR1)
    assert waiter.stdout is not None and waiter.stdout.readline().strip() == "held"
    rc, host = diagnose(spy, waiter.pid, "--sample", "0")
    assert not lock_findings(host) and rc == 0, host["findings"]


BATON = """import os
import sys
import time


class FileBaton:
    # torch.utils.file_baton.FileBaton's code shape (a stand-in: torch is not a test dependency)
    def __init__(self, lock_file_path, wait_seconds=0.1):
        self.lock_file_path = lock_file_path
        self.wait_seconds = wait_seconds
        self.fd = None

    def try_acquire(self):
        try:
            self.fd = os.open(self.lock_file_path, os.O_CREAT | os.O_EXCL)
            return True
        except FileExistsError:
            return False

    def wait(self):
        while os.path.exists(self.lock_file_path):
            time.sleep(self.wait_seconds)

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
        os.remove(self.lock_file_path)
"""
JIT = """import os
import signal
import sys

from file_baton import FileBaton


def _jit_compile(name, build_directory):
    # torch.utils.cpp_extension._jit_compile's use of the baton
    baton = FileBaton(os.path.join(build_directory, "lock"))
    if baton.try_acquire():
        try:
            print("held", flush=True)
            signal.sigwait({signal.SIGUSR1})  # "building", until the test lets go
        finally:
            baton.release()
    else:
        baton.wait()


signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
_jit_compile("vpext", sys.argv[1])
"""


def _baton_process(reap: list, tmp: Path) -> subprocess.Popen:
    (tmp / "file_baton.py").write_text(BATON)
    (tmp / "jit.py").write_text(JIT)
    p = subprocess.Popen([sys.executable, str(tmp / "jit.py"), str(tmp / "build")], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, text=True, cwd=tmp, start_new_session=True)  # fmt: skip
    reap.append(p)
    return p


@pytest.mark.parametrize("holder_alive", [True, False], ids=["holder", "left-behind"])
def test_filebaton_stand_in_waiter(reap, spy: str, tmp_path: Path, holder_alive: bool) -> None:
    """Not torch: a plain file_baton.py with FileBaton's wait loop, called from _jit_compile with a
    build_directory, looks to py-spy as torch's does. A live holder is named; a holder killed
    before releasing leaves the lock file, which nobody has open: an error."""
    (tmp_path / "build").mkdir()
    lock = tmp_path / "build" / "lock"
    holder = _baton_process(reap, tmp_path)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    waiter = _baton_process(reap, tmp_path)
    wait_for(lambda: "FileBaton.wait" in _dump(spy, waiter.pid), timeout=30, what="the waiter in FileBaton.wait")
    if not holder_alive:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        assert lock.exists()
    rc, host = diagnose(spy, waiter.pid, "--sample", "0")
    (f,) = lock_findings(host)
    if holder_alive:
        assert f"({waiter.pid}) keeps retrying the lock on {lock}, held by {holder.pid} (python" in f["summary"], f[
            "summary"
        ]
        assert "holds the lock file" in f["hint"]
    else:
        comm = Path(sys.executable).name[:15]  # python, or python3 where pytest's own script started it
        assert f["summary"] == (f"{comm} ({waiter.pid}) keeps waiting for the lock file {lock} to go away, and no "
                                "process here has it open"), f["summary"]  # fmt: skip
        assert f["severity"] == "error" and rc == 1
        assert "Remove it only if no build is running" in f["hint"]


def test_a_py_spy_without_locals_still_gives_stacks(reap, spy: str, tmp_path: Path) -> None:
    """A py-spy that refuses --locals (as one before it had the option would): the probe asks again
    without it, and the program's stack arrives, with no locals."""
    real = shutil.which("py-spy", path=spy)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "py-spy"
    fake.write_text(f"""#!/bin/sh
for a; do [ "$a" = --locals ] && {{ echo "error: Found argument '--locals' which wasn't expected" >&2; exit 1; }}; done
exec {real} "$@"
""")
    fake.chmod(0o755)
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.DEVNULL,
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: "Thread " in _dump(spy, job.pid), timeout=30, what="the program readable by py-spy")
    _rc, host = diagnose(f"{bindir}:{spy}", job.pid, "--sample", "0", "--snapshot")
    (stack,) = [s for s in host["snapshot"]["python_stacks"] if s["pid"] == job.pid]
    assert stack["error"] is None and stack["threads"], stack
    assert stack["threads"][0]["frame_locals"] == []


def _thread(*frames: tuple[str, tuple[FrameLocal, ...]]) -> PyThread:
    return PyThread("1", "MainThread", "idle", tuple(f for f, _ in frames), tuple(v for _, v in frames))


def _str(name: str, text: str) -> FrameLocal:
    return FrameLocal(name, f'"{text}"', text)


def test_polling_frames_and_what_runs_inside_them() -> None:
    """The polling frame is the innermost one, or near it when py-spy caught an attempt in progress
    (filelock's own frames, os.path.exists of the standard library inside it); a program's own code
    inside it, or a polling frame further out, is no polling wait. filelock's SoftFileLock is a lock
    that is the file itself, as FileBaton's."""
    poll = (
        "LockAcquisition._poll_until_acquired (filelock/_core/_acquire.py:177)",
        (FrameLocal("self", "<SoftFileLock at 0x7f00>", None, "SoftFileLock"), _str("lock_filename", "/l/x.lock")),
    )
    attempt = ("UnixFileLock._acquire (filelock/_native/_unix.py:40)", ())
    found = polling_lock(_thread(attempt, poll))
    assert found is not None and found.path == "/l/x.lock" and found.exclusive and found.frame == poll[0]
    assert polling_lock(_thread(("cancel (mine.py:3)", ()), poll)) is None
    assert polling_lock(_thread(("cancel (mine.py:3)", ()), ("a (mine.py:4)", ()), ("b (mine.py:5)", ()),
                                ("c (mine.py:6)", ()), poll)) is None  # fmt: skip
    wait = ("FileBaton.wait (torch/utils/file_baton.py:50)", ())
    jit = ("_jit_compile (torch/utils/cpp_extension.py:2400)", (_str("build_directory", "/b/ext/"),))
    found = polling_lock(_thread(("exists (genericpath.py:19)", ()), wait, jit))
    assert found is not None and found.path == "/b/ext/lock" and found.named.name == "build_directory"
    assert polling_lock(_thread(wait, ("load (torch/utils/cpp_extension.py:1927)", ()), jit)) is None  # too far out


def test_the_probe_with_py_spy_writes_nothing(reap, spy: str, tmp_path: Path) -> None:
    """The probe with --py-spy --locals, py-spy dumping a real filelock waiter, under strace: no call
    opens a file for writing (but /dev/null), creates, unlinks or renames one."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    pytest.importorskip("filelock")
    lock = tmp_path / "model.lock"
    holder = _filelock_process(reap, lock)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    waiter = _filelock_process(reap, lock)
    wait_for(lambda: "acquire" in _dump(spy, waiter.pid), timeout=30, what="the waiter trying the lock")
    params = ProbeParams(sample=0, python_stacks=True, job_pids=(waiter.pid,))
    trace = tmp_path / "trace"
    r = subprocess.run(["strace", "-f", "-qq", "-o", str(trace), "-e",
                        "trace=openat,open,creat,unlink,unlinkat,rename,renameat,mkdir", "dash", "-s"],
                       input=render_script(params).encode(), capture_output=True, timeout=60,
                       env=dict(os.environ, PATH=spy))  # fmt: skip
    assert b"lock_filename" in r.stdout  # py-spy ran, with --locals
    bad = [line for line in trace.read_text().splitlines()
           if any(c in line for c in ("creat(", "unlink", "rename", "mkdir("))
           or ("open" in line and ("O_WRONLY" in line or "O_RDWR" in line) and "/dev/null" not in line)]  # fmt: skip
    assert not bad, bad[:5]
