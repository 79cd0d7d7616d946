"""Records the golden cases from real processes on this machine, then renders their expected
terminal reports. Run by hand, as root, on Linux (unshare, nsenter, a memory cgroup):

    .venv/bin/python tests/golden/record.py [case ...]        # record captures, then render
    .venv/bin/python tests/golden/record.py --render-only      # after a deliberate renderer change

Each case is a small container: a PID namespace with its own /proc, PID 1 a shell (as on vast.ai),
its files under /tmp/vastprobe-golden/<case>. `vastprobe collect local` runs inside it (nsenter), so
the capture holds only the container's processes; `seed-host` is the same seed container seen from
the host with --pid. Captures keep the probe's raw bytes (`raw_b64`), which `analyze` re-parses;
the parsed snapshot is dropped (it is derived), and a capture over 100 KB is gzipped.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers import children_of, proc_state, proc_wchan, wait_for  # noqa: E402
from vastprobe.capture import capture_from_dict  # noqa: E402
from vastprobe.fanout import skipped_report  # noqa: E402
from vastprobe.model import HostReport  # noqa: E402
from vastprobe.pipeline import DiagnoseOptions, report_of  # noqa: E402
from vastprobe.render.summary import render_summary  # noqa: E402
from vastprobe.targets import InventoryEntry  # noqa: E402

BASE = Path("/tmp/vastprobe-golden")
#: Widths each case is rendered at (COLUMNS); the seed at the three the docs show.
WIDTHS = {"seed-inside": (80, 120, 200), "seed-host": (120,), "orphan-pipe": (100,), "stopped-child": (100,),
          "healthy": (100,)}  # fmt: skip
VASTPROBE = [sys.executable, "-m", "vastprobe"]


def capture_path(case: str) -> Path:
    gz = HERE / "captures" / f"{case}.json.gz"
    return gz if gz.exists() else HERE / "captures" / f"{case}.json"


def read_capture(case: str) -> bytes:
    path = capture_path(case)
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def render(case: str, width: int, *extra: str) -> str:
    """The terminal report of a recorded case, as `vastprobe analyze` prints it at this width."""
    env = {**os.environ, "COLUMNS": str(width), "NO_COLOR": "1", "TZ": "UTC"}
    env.pop("FORCE_COLOR", None)
    r = subprocess.run([*VASTPROBE, "analyze", "-", "--format", "table", *extra], input=read_capture(case),
                       capture_output=True, env=env, timeout=60, cwd=REPO)  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    return r.stdout.decode()


def golden_path(case: str, width: int) -> Path:
    return HERE / f"{case}.{width}.txt"


# ---------------------------------------------------------------- recording


def _save(case: str, raw: bytes) -> None:
    doc = json.loads(raw)
    doc.pop("snapshot", None)  # derived from raw_b64; analyze re-parses it
    text = json.dumps(doc, indent=1) + "\n"
    (HERE / "captures").mkdir(exist_ok=True)
    for old in (HERE / "captures" / f"{case}.json", HERE / "captures" / f"{case}.json.gz"):
        old.unlink(missing_ok=True)
    if len(text) > 100_000:
        (HERE / "captures" / f"{case}.json.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        (HERE / "captures" / f"{case}.json").write_text(text)
    print(f"recorded {case}: {len(text)} bytes of capture")


def _collect(init: int, *args: str, inside: bool = True) -> bytes:
    ns = ["nsenter", f"--target={init}", "--pid", "--mount", "--"] if inside else []
    r = subprocess.run([*ns, *VASTPROBE, "collect", "local", "-o", "-", *args], capture_output=True, timeout=120,
                       cwd=REPO)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def _container(root: Path, entrypoint: str) -> tuple[subprocess.Popen, int]:
    """PID 1 is `sh -c ./entrypoint.sh; …` (the shell a container image's CMD runs)."""
    (root / "entrypoint.sh").write_text(entrypoint)
    (root / "entrypoint.sh").chmod(0o755)
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", f"cd {root}; ./entrypoint.sh; echo exited"]
    p = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    wait_for(lambda: children_of(p.pid) != [], what="the container's init")
    return p, children_of(p.pid)[0]


def _stop(p: subprocess.Popen) -> None:
    for pid in _descendants(p.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    p.kill()
    p.wait()


def _descendants(pid: int) -> list[int]:
    out, stack = [], [pid]
    while stack:
        kids = children_of(stack.pop())
        out += kids
        stack += kids
    return out


def _find(init: int, comm: str) -> int | None:
    for pid in _descendants(init):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                return pid
        except OSError:
            continue
    return None


def _program(root: Path, name: str, code: str) -> None:
    (root / name).symlink_to(sys.executable)
    (root / f"{name}.py").write_text(code)


def _fresh(case: str) -> Path:
    root = BASE / case
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


def record_seed() -> None:
    from tests.seed_lab import start_seed

    root = BASE / "seed"
    shutil.rmtree(root, ignore_errors=True)
    seed = start_seed(root)
    try:
        args = ("--log", str(seed.log), "--artifacts", f"{root}/*")
        _save("seed-inside", _collect(seed.entry, *args))
        _save("seed-host", _collect(seed.entry, *args, "--pid", str(seed.entry), inside=False))
    finally:
        seed.stop()


def record_orphan_pipe() -> None:
    """The entrypoint pipes a start script into tee; the script starts a server in the background
    without redirecting it, and exits: the server, re-parented to PID 1, holds tee's pipe forever."""
    root = _fresh("orphan-pipe")
    _program(root, "notebook", "import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
                               "print('notebook listening', flush=True)\ns.accept()\n")  # fmt: skip
    (root / "start.sh").write_text("#!/bin/sh\n./notebook notebook.py &\necho 'notebook started'\n")
    (root / "start.sh").chmod(0o755)
    p, init = _container(root, "#!/bin/sh\n./start.sh | tee start.log\necho 'starting the job'\n")
    try:
        wait_for(lambda: (tee := _find(init, "tee")) is not None and proc_wchan(tee).endswith("pipe_read"),
                 what="tee blocked on the pipe")  # fmt: skip
        wait_for(lambda: "notebook listening" in (root / "start.log").read_text(), what="the server's line in the log")
        _save("orphan-pipe", _collect(init, "--artifacts", f"{root}/*"))
    finally:
        _stop(p)


def record_stopped_child() -> None:
    """A training script's worker stopped by SIGSTOP (a debugger, a stray Ctrl-Z): the script
    waits for it forever."""
    root = _fresh("stopped-child")
    _program(root, "trainer", "import time\nstep = 0\nwhile True:\n    step += 1\n"
                              "    print(f'step {step}', flush=True)\n    time.sleep(0.1)\n")  # fmt: skip
    (root / "train.sh").write_text('#!/bin/sh\n./trainer trainer.py > train.log 2>&1\necho "trainer exited $?"\n')
    (root / "train.sh").chmod(0o755)
    p, init = _container(root, "#!/bin/sh\n./train.sh\n")
    try:
        wait_for(lambda: _find(init, "trainer") is not None and (root / "train.log").exists(),
                 what="the trainer running")  # fmt: skip
        wait_for(lambda: "step 3" in (root / "train.log").read_text(), what="three steps logged")
        pid = _find(init, "trainer")
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: proc_state(pid) == "T", what="the trainer stopped")
        _save("stopped-child", _collect(init, "--log", str(root / "train.log"), "--artifacts", f"{root}/*"))
    finally:
        _stop(p)


def record_healthy() -> None:
    """A worker that keeps computing and writing its log: nothing to report."""
    root = _fresh("healthy")
    _program(root, "worker", "import time\nn = 0\nwhile True:\n    n += sum(range(200_000))\n"
                             "    print(f'batch done {n}', flush=True)\n    time.sleep(0.05)\n")  # fmt: skip
    (root / "serve.sh").write_text("#!/bin/sh\n./worker worker.py > worker.log 2>&1\n")
    (root / "serve.sh").chmod(0o755)
    p, init = _container(root, "#!/bin/sh\n./serve.sh\n")
    try:
        wait_for(lambda: (root / "worker.log").exists() and (root / "worker.log").stat().st_size > 200,
                 what="the worker logging")  # fmt: skip
        time.sleep(0.5)  # a few batches: the log is growing, not just created
        _save("healthy", _collect(init, "--log", str(root / "worker.log"), "--artifacts", f"{root}/*"))
    finally:
        _stop(p)


RECORDERS = {
    "seed": record_seed,
    "orphan-pipe": record_orphan_pipe,
    "stopped-child": record_stopped_child,
    "healthy": record_healthy,
}


SWEEP_GOLDEN = HERE / "sweep-40.100.txt"


def fleet_of_forty() -> list[HostReport]:
    """gpu01..gpu40: the seed case on three, an orphan pipe on one, a stopped child on one, two
    unreachable, two exited vast.ai instances, healthy on the rest, every one with its instance."""
    caps = {case: capture_from_dict(json.loads(read_capture(case))) for case in
            ("seed-inside", "orphan-pipe", "stopped-child", "healthy")}  # fmt: skip
    cases = {3: "seed-inside", 17: "seed-inside", 22: "seed-inside", 9: "orphan-pipe", 31: "stopped-child"}
    out = []
    for i in range(1, 41):
        target = f"gpu{i:02d}"
        labels = {"instance_id": str(8812300 + i), "label": f"llm-train-{i}"}
        if i in (12, 13):
            out.append(
                skipped_report(InventoryEntry(target, f"vast.ai instance {8812300 + i} is exited, not running", labels))
            )
            continue
        if i in (38, 39):
            cap = replace(caps["healthy"], target=target, status="unreachable",
                          error=f"{target}: connection refused on port 22; is sshd running there?")  # fmt: skip
        else:
            cap = replace(caps[cases.get(i, "healthy")], target=target)
        r = report_of(cap, DiagnoseOptions(pids=cap.pids, matches=cap.matches))
        out.append(replace(r, labels=labels))
    return out


def summary(reports: list[HostReport], width: int = 100, **kw: object) -> str:
    """The sweep summary as the terminal gets it, at this width."""
    buf = io.StringIO()
    render_summary(reports, buf, width=width, **kw)  # type: ignore[arg-type]
    return buf.getvalue()


def render_all() -> None:
    for case, widths in WIDTHS.items():
        if not capture_path(case).exists():
            continue
        for w in widths:
            golden_path(case, w).write_text(render(case, w))
            print(f"rendered {golden_path(case, w).name}")
    SWEEP_GOLDEN.write_text(summary(fleet_of_forty()))
    print(f"rendered {SWEEP_GOLDEN.name}")


def main(argv: list[str]) -> None:
    if "--render-only" not in argv:
        for name in [a for a in argv if not a.startswith("-")] or list(RECORDERS):
            RECORDERS[name]()
    render_all()


if __name__ == "__main__":
    main(sys.argv[1:])
