"""A hostile target cannot make vastprobe lie, crash, stall the fleet or eat the controller.

- An unprivileged user on the target races the probe for its boundary and plants forged names:
  nothing forged reaches the report.
- A process opens a path that imitates `ls -ln` lines: no invented pipe, no innocent blamed.
- Forged sections that do get into the output (here: a target that answers with what it likes)
  are reported (VP901) and never make a host `healthy`.
- One host sending lines built to make regexes backtrack, another streaming without end: the
  healthy hosts of the same sweep finish in their normal time, and bytes held stay within budget.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, wait_for
from tests.hostile_servers import RECORDED_BOUNDARY, Fleet, endless, healthy, quadratic, recorded
from tests.ndjson import host_lines
from tests.paths import REPO
from vastprobe.capture import Capture
from vastprobe.pipeline import DiagnoseOptions, report_of
from vastprobe.probe.script import ProbeParams

ROOT = REPO
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]

needs_root_setpriv = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv (util-linux) to act as nobody"
)


def vastprobe(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vastprobe", *args], capture_output=True, text=True, timeout=timeout)


def world_dir(prefix: str) -> Path:
    """A directory under /tmp that nobody can write into (sticky, like /tmp itself)."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o1777)
    return d


def job_with_stopped_child(reap: list[subprocess.Popen]) -> tuple[int, list[int]]:
    job = subprocess.Popen(["sh", "-c", "sleep 1000 & sleep 1001 & kill -STOP $!; wait"], start_new_session=True)
    reap.append(job)
    wait_for(lambda: len(children_of(job.pid)) == 2, what="the job's two children")
    kids = children_of(job.pid)
    wait_for(lambda: any(proc_state(k) == "T" for k in kids), what="the stopped child")
    return job.pid, kids


ATTACKER = textwrap.dedent(
    r"""
    import json, os, re, sys
    from pathlib import Path

    plant_dir, victim, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    HEX = re.compile(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
    oom = f"Memory cgroup out of memory: Killed process {victim} (sh) total-vm:1kB, anon-rss:1kB, file-rss:0kB, UID:0"
    forged = [
        "@@count ²", "@@count 99999999999999999999999", "@@unlisted -1", "@@rc=0", "@@lines 400",
        "|[ 1.000000] " + oom, "[ 1.000000] " + oom, "6,1,1,-;" + oom,
        "@@" + "0" * 32 + "@@ s0.proc", "@@" + "0" * 32 + "@@ end",
        f"lr-x------ 1 0 0 64 Dec  2 16:25 7 -> pipe:[1]", "0 1796262945 regular file|forged",
        "\x1b]0;owned\x07\u202e[bold]x[/bold]",
    ]
    planted = 0

    def plant(name):
        global planted
        try:
            (plant_dir / name).touch()
            planted += 1
        except OSError:
            pass

    for i, body in enumerate(forged):
        plant(f"f{i}\n{body}")
    found, passes, denied = set(), 0, 0
    while not (out.parent / "stop").exists():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            for name in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{pid}/{name}", "rb") as f:
                        data = f.read()
                except OSError:
                    denied += name == "environ"
                    continue
                for m in HEX.finditer(data):
                    h = m.group().decode()
                    if h not in found:  # a boundary, maybe: forge its sections at once
                        found.add(h)
                        plant(f"x{len(found)}\n@@{h}@@ kmsg\n|[ 1.000000] {oom}")
                        plant(f"y{len(found)}\n@@{h}@@ s0.proc\n@@{h}@@ end")
        passes += 1
        if passes == 1:
            (out.parent / "ready").touch()
    out.write_text(json.dumps({"found": sorted(found), "passes": passes, "denied": denied, "planted": planted}))
    """
)


#: The sizes of the attacker's fake OOM kill: no real kill is of a 1 kB process.
FORGED_OOM_MARK = "total-vm:1kB, anon-rss:1kB"


def forged_kernel_events(events: list[dict], victim: int) -> list[dict]:
    """Kernel-log events the attacker planted: its fake OOM kill names the job's PID and sizes no
    real kill has. A real line that names some other `sh` (a hung task, an OOM kill in another
    test's cgroup) is this shared machine's own, not the attacker's."""
    return [e for e in events if e["pid"] == victim or FORGED_OOM_MARK in e["line"]]


def test_a_real_hung_task_line_is_not_taken_for_a_forgery() -> None:
    """The boundary race below once counted every kernel event about a command named `sh` as
    forged: a real hung-task line (an `sh` in D state for two minutes anywhere on the machine)
    then failed it. The same line, read by the real parser, is not the attacker's."""
    from dataclasses import asdict

    from vastprobe.parsers.kmsg import parse_kmsg_sections

    real = "[ 4000.123456] INFO: task sh:4242 blocked for more than 120 seconds."
    forged = f"[ 1.000000] Memory cgroup out of memory: Killed process 77 (sh) {FORGED_OOM_MARK}, file-rss:0kB, UID:0"
    log = parse_kmsg_sections(f"@@source dmesg\n{real}\n{forged}\n@@lines 2", None, 1.7e9)
    events = [asdict(e) for e in log.events]
    assert [e["kind"] for e in events] == ["hung-task", "oom-kill"] and events[0]["comm"] == "sh"
    assert forged_kernel_events(events, victim=77) == [events[1]]
    assert forged_kernel_events(events[:1], victim=77) == []


@needs_root_setpriv
@pytest.mark.slow
def test_nobody_racing_for_the_boundary_forges_nothing(reap: list[subprocess.Popen], tmp_path: Path) -> None:
    """The issue's attack: an unprivileged user polls every /proc/*/cmdline and environ for a
    32-hex string while `vastprobe collect` runs as root, and plants names in a world-writable
    directory holding newlines, frame lines (with every hex string it found), a fake OOM kill of
    the job, `@@count ²`. A canary hex string in a root process's argv proves the poller works."""
    plant_dir, work = world_dir("vp-hostile-plant-"), world_dir("vp-hostile-work-")
    try:
        job, kids = job_with_stopped_child(reap)
        canary = secrets.token_hex(16)
        decoy = subprocess.Popen(["sh", "-c", "sleep 300", "vp-canary", canary])
        reap.append(decoy)
        (work / "attacker.py").write_text(ATTACKER)
        (work / "attacker.py").chmod(0o644)
        attacker = subprocess.Popen([*AS_NOBODY, "/usr/bin/python3", "-I", str(work / "attacker.py"),
                                     str(plant_dir), str(job), str(work / "found.json")])  # fmt: skip
        reap.append(attacker)
        wait_for(lambda: (work / "ready").exists(), timeout=30, what="the attacker's first pass over /proc")
        captures = []
        for i in range(3):
            cap = tmp_path / f"cap{i}.json"
            r = vastprobe("collect", "local", "--sample", "0.3", "--pid", str(job), "--artifacts", f"{plant_dir}/*",
                          "-o", str(cap))  # fmt: skip
            assert r.returncode == 0, r.stderr
            captures.append(cap)
        (work / "stop").touch()
        attacker.wait(30)
        seen = json.loads((work / "found.json").read_text())
        boundaries = {json.loads(c.read_text())["params"]["boundary"] for c in captures}
        assert canary in seen["found"], seen  # the poller would have found a boundary in any argv
        assert seen["passes"] > 20 and seen["denied"] > 0, seen  # it ran all along; root's environ stayed shut
        assert not boundaries & set(seen["found"]), "a probe's boundary was readable by nobody"
        for cap in captures:
            r = vastprobe("analyze", str(cap), "--format", "json", "--snapshot")
            host = json.loads(r.stdout)["hosts"][0]
            snap = host["snapshot"]
            assert host["status"] == "ok", host["error"]
            assert snap["probe"]["tampering"] == [] and snap["probe"]["complete"]
            assert not forged_kernel_events(snap["kernel_log"]["events"], job)
            assert not [f for f in host["findings"] if f["rule"] == "oom-killed-child" and job in f["pids"]]
            assert sorted(host["scope"]) == sorted([job, *kids])  # the process count is right
            assert any(f["rule"] == "stopped-child" for f in host["findings"]), host["findings"]
            listing = snap["artifacts"][0]
            assert listing["matched"] == seen["planted"] and listing["entries"] == []  # newline names: counted
            assert f"{seen['planted']} name(s) holding a newline not listed" in listing["error"]
    finally:
        (work / "stop").touch()
        shutil.rmtree(plant_dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def _ls_line_path(base: Path, innocent: int, pipe_inode: int) -> Path:
    """A path whose characters, printed raw by `ls -ln`, read as a fd header of `innocent` and an
    entry that holds the write end of the job's pipe."""
    parts = ["a\n", "proc", str(innocent), f"fd:\nl-wx------ 1 0 0 64 Dec  2 16:25 9 -> pipe:[{pipe_inode}]\nx"]
    d = base.joinpath(*parts[:-1])
    d.mkdir(parents=True)
    return d / parts[-1]


def _busybox_bin(tmp: Path) -> Path | None:
    bb = shutil.which("busybox")
    if bb is None:
        return None
    bindir = tmp / "bb"
    bindir.mkdir()
    for applet in subprocess.run([bb, "--list"], capture_output=True, text=True).stdout.split():
        (bindir / applet).symlink_to(bb)
    return bindir


@pytest.mark.parametrize("ls", ["gnu", "busybox"])
def test_a_path_imitating_ls_lines_invents_no_pipe(reap: list[subprocess.Popen], tmp_path: Path, ls: str) -> None:
    """The issue's second forgery, without any race: a process opens a path holding newlines that
    imitate `ls -ln` output (a `/proc/N/fd:` header for an innocent process and a `pipe:[N]` entry
    for the job's pipe). GNU `ls -b` escapes the link target; BusyBox prints `?`: either way the
    innocent holds nothing, and the opener's fd is the path."""
    bindir = _busybox_bin(tmp_path) if ls == "busybox" else None
    if ls == "busybox" and bindir is None:
        pytest.skip("busybox is not installed")
    job = subprocess.Popen(["sh", "-c", "sleep 1000 | cat"], start_new_session=True)
    reap.append(job)

    def comm(pid: int) -> str | None:
        try:
            return Path(f"/proc/{pid}/comm").read_bytes().decode("utf-8", "replace").strip()
        except OSError:
            return None

    def cat_of_the_pipeline() -> int | None:  # a child is the shell's fork until it has exec'd cat
        return next((k for k in children_of(job.pid) if comm(k) == "cat"), None)

    wait_for(lambda: cat_of_the_pipeline() is not None, what="the pipeline's cat")
    cat = cat_of_the_pipeline()
    pipe = int(os.readlink(f"/proc/{cat}/fd/0")[6:-1])
    innocent = subprocess.Popen(["sleep", "1002"], start_new_session=True)
    reap.append(innocent)
    path = _ls_line_path(tmp_path / "forge", innocent.pid, pipe)
    path.touch()
    opener = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); print('ok', flush=True); time.sleep(600)",
                               str(path)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    reap.append(opener)
    assert opener.stdout is not None and opener.stdout.readline().strip() == "ok"

    params = ProbeParams(sample=0.3)
    from vastprobe.probe.script import render_script

    script = render_script(params)
    shell = ["/bin/sh", "-s"]
    if bindir is not None:
        script = script.replace(
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH", f"PATH={bindir}"
        )
        shell = [str(bindir / "sh"), "-s"]
    raw = subprocess.run(shell, input=script.encode(), capture_output=True, timeout=60, start_new_session=True).stdout
    cap = Capture("local", "local", "ok", None, raw, False, params)
    r = report_of(cap, DiagnoseOptions(params=params, pids=(job.pid,)))
    assert r.status == "ok" and r.snapshot is not None, r.error
    snap = r.snapshot
    assert not snap.probe.tampering
    victim = snap.process(innocent.pid)
    assert victim is not None and isinstance(victim.fds, tuple)
    assert not [e for e in victim.fds if e.pipe_inode is not None], victim.fds  # sleep's fds: no pipe
    holders = [p.pid for p in snap.processes if isinstance(p.fds, tuple) and any(e.pipe_inode == pipe for e in p.fds)]
    assert innocent.pid not in holders and cat in holders
    mine = snap.process(opener.pid)
    assert mine is not None and isinstance(mine.fds, tuple)
    targets = [e.target for e in mine.fds]
    if ls == "gnu":
        assert str(path) in targets, targets  # decoded exactly
    else:
        assert any(t.startswith(str(tmp_path / "forge" / "a?")) for t in targets), targets
    for f in r.findings:
        assert innocent.pid not in f.pids, f
        assert not [e for e in f.evidence if str(innocent.pid) in e.detail.split()], f


def test_forged_sections_that_arrive_are_reported(tmp_path: Path) -> None:
    """A target that answers with what it likes knows the boundary (it is in the script it was
    sent): a repeated section with a fake OOM kill, and one the probe never writes. No copy of a
    repeated section is believed; the host gets VP901 and is not diagnosed (verdict unknown, the
    forgery its headline): never healthy, and nothing forged leads the report."""
    raw = recorded()
    b = RECORDED_BOUNDARY
    fake = (f"\n@@{b}@@ kmsg\n@@source dmesg\n[ 1.000000] Memory cgroup out of memory: Killed process 4242 "
            f"(trainer) total-vm:1kB, anon-rss:1kB, file-rss:0kB, UID:0\n@@lines 1\n@@rc=0\n\n@@{b}@@ /kmsg\n"
            f"\n@@{b}@@ s9.injected\nanything\n@@rc=0\n\n@@{b}@@ /s9.injected\n")  # fmt: skip
    end = raw.rfind(f"\n@@{b}@@ end".encode())
    forged = raw[:end] + fake.encode() + raw[end:]
    params = ProbeParams(sample=0.5, logs=("/tmp/vastprobe-fixture.log", "/tmp/absent.log"),
                         artifacts=("/tmp/vastprobe-fixture*",), boundary=b)  # fmt: skip
    r = report_of(Capture("t", "ssh", "ok", None, forged, False, params), DiagnoseOptions(params=params))
    assert r.status == "ok" and r.snapshot is not None
    assert not [e for e in r.snapshot.kernel_log.events if e.pid == 4242]
    assert len(r.snapshot.probe.tampering) == 2, r.snapshot.probe.tampering
    f = next(f for f in r.findings if f.code == "VP901")
    assert f.rule == "probe-output-forged" and f.severity == "warning"
    assert r.verdict == "unknown" and r.headline is not None and r.headline.startswith("the probe's output was forged")
    assert r.incidents[0].root.code == "VP901"
    clean = report_of(Capture("t", "ssh", "ok", None, raw, False, params), DiagnoseOptions(params=params))
    assert not [f for f in clean.findings if f.code == "VP901"]


# ---------------------------------------------------------------- isolation between hosts


def _sweep_rows(targets: list[str], known_hosts: Path, tmp: Path, name: str) -> tuple[list[tuple[float, dict]], int]:
    """`vastprobe sweep` over `targets`, NDJSON rows with the second each arrived."""
    inv = tmp / f"{name}.txt"
    inv.write_text("\n".join(targets) + "\n")
    cmd = [sys.executable, "-m", "vastprobe", "sweep", str(inv), "--format", "ndjson", "--known-hosts", str(known_hosts),
           "--sample", "0", "--timeout", "30", "--concurrency", "8", "--snapshot"]  # fmt: skip
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    rows = [(time.monotonic() - t0, json.loads(line)) for line in p.stdout]
    assert "summary" in rows[-1][1], rows[-1]  # the line that ends the stream
    return rows[:-1], p.wait(60)


def test_a_hostile_host_does_not_delay_the_others(tmp_path: Path) -> None:
    """Three healthy hosts with one that sends 60 lines of 8 KiB made to make regexes backtrack
    and one that streams without end: the healthy ones come back `ok` in about the time they
    take alone; the hostile ones end as facts (analysed; truncated)."""
    fleet = Fleet([healthy(0.2), healthy(0.2), healthy(0.2), quadratic(60), endless()]).start(tmp_path)
    try:
        alone, _ = _sweep_rows(fleet.targets[:3], fleet.known_hosts or tmp_path, tmp_path, "alone")
        mixed, _ = _sweep_rows(fleet.targets, fleet.known_hosts or tmp_path, tmp_path, "mixed")
    finally:
        fleet.stop()
    assert [r["status"] for _, r in alone] == ["ok"] * 3
    by_target = {r["target"]: (t, r) for t, r in mixed}
    assert set(by_target) == set(fleet.targets)
    normal = max(t for t, _ in alone)
    for target in fleet.targets[:3]:
        t, r = by_target[target]
        assert r["status"] == "ok", r["error"]
        print("healthy", target, round(t, 2), "alone", round(normal, 2))
        assert t < normal + 3.0, (t, normal)  # seconds; typically within 0.3 s of the alone run
    t, q = by_target[fleet.targets[3]]
    assert q["status"] == "ok" and q["timings"]["analysis"] < 2.0, q["timings"]  # it was 19 s
    _, e = by_target[fleet.targets[4]]
    assert e["status"] == "ok" and e["snapshot"]["notes"], e["error"]  # cut, and says so


@pytest.mark.asyncio
async def test_bytes_in_flight_stay_within_the_sweep_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six hosts streaming without end against a 6 MiB budget: all cut, marked truncated, and the
    bytes held at once never above the budget; a healthy host in the same sweep is whole. The
    reports kept for the end hold snapshots of at most 2 MiB of the cut hosts' output (and the
    healthy host's, an ordinary one); the streamed reports are whole."""
    from vastprobe import fanout as sweep_module
    from vastprobe.fanout import ByteBudget, sweep
    from vastprobe.model import HostReport

    monkeypatch.setattr(sweep_module, "SWEEP_KEPT_OUTPUT", 2 << 20)
    from vastprobe.targets import InventoryEntry
    from vastprobe.transport.ssh.settings import SshOptions

    fleet = Fleet([endless() for _ in range(6)] + [healthy()]).start(tmp_path)
    try:
        budget = ByteBudget(6 << 20, concurrency=7)
        ssh = SshOptions(
            known_hosts=str(fleet.known_hosts), timeout=30, extra={"client_keys": None, "agent_path": None}
        )
        options = DiagnoseOptions(params=ProbeParams(sample=0), timeout=30, ssh=ssh)
        got: list[HostReport] = []
        kept: list[HostReport] = []
        await sweep([InventoryEntry(t) for t in fleet.targets], options, 7, got.append, budget=budget, kept=kept)
    finally:
        fleet.stop()
    assert budget.peak <= 6 << 20 and budget.in_flight == 0 and budget.pool_used == 0
    by_target = {r.target: r for r in got}
    for t in fleet.targets[:6]:
        r = by_target[t]
        assert r.status == "ok" and r.snapshot is not None, r.error
        assert r.snapshot.probe.output_bytes < 6 << 20
        assert any("budget for output held across all hosts" in n for n in r.snapshot.notes), r.snapshot.notes
    assert budget.cut_hosts == 6
    whole = by_target[fleet.targets[6]]
    assert whole.status == "ok" and whole.snapshot is not None and whole.snapshot.probe.complete
    kept_by_target = {r.target: r for r in kept}
    assert set(kept_by_target) == set(fleet.targets) and kept_by_target[fleet.targets[6]].snapshot is not None
    sizes = [by_target[t].snapshot.probe.output_bytes for t in fleet.targets[:6]]  # type: ignore[union-attr]
    with_snapshot = [t for t in fleet.targets[:6] if kept_by_target[t].snapshot is not None]
    assert sum(by_target[t].snapshot.probe.output_bytes for t in with_snapshot) <= 2 << 20, sizes  # type: ignore[union-attr]
    dropped = [kept_by_target[t] for t in fleet.targets[:6] if kept_by_target[t].snapshot is None]
    assert dropped and all(r.findings[-1].summary == "the snapshot of this host was not kept" for r in dropped)
    assert [f.code for f in dropped[0].findings[:-1]] == [f.code for f in by_target[dropped[0].target].findings]


def test_the_budget_arithmetic() -> None:
    """Shares of the hosts in flight plus the pool never exceed the total; a host under its share
    never waits on the pool; what one host gives back another can use."""
    from vastprobe.fanout import ByteBudget

    b = ByteBudget(1000, concurrency=5)
    assert b.share == 100 and b.pool == 500
    hosts = [b.account() for _ in range(5)]
    assert all(h.take(100) for h in hosts)  # every share, with the pool untouched
    assert hosts[0].take(500) and not hosts[1].take(1)  # the pool, then nothing beyond it
    assert b.in_flight == 1000 == b.peak and hosts[1].cut
    hosts[0].release()
    assert b.pool_used == 0 and hosts[1].take(1) is False  # cut hosts stay cut (reading stopped)
    assert b.account().take(400)


@pytest.mark.asyncio
async def test_a_slow_analysis_runs_off_the_loop_within_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever makes one large host's analysis slow (here: a parser made to burn CPU in Python
    for one host's kernel log of 300 KB), the others' connections keep being served, and that host
    ends at its time budget as a probe-error saying so. (Output up to INLINE_ANALYSIS_MAX is
    analysed on the loop: linear parsers over capped sections take milliseconds there.)"""
    from vastprobe import pipeline
    from vastprobe.fanout import sweep
    from vastprobe.model import HostReport
    from vastprobe.parsers import kmsg
    from vastprobe.targets import InventoryEntry
    from vastprobe.transport.ssh.settings import SshOptions

    real = kmsg.parse_kmsg_sections

    def slow(primary, *args, **kwargs):  # type: ignore[no-untyped-def]
        if primary and "SLOW-HOST" in primary:
            end = time.monotonic() + 6
            while time.monotonic() < end:  # pure Python: the GIL is shared every few ms
                sum(range(1000))
        return real(primary, *args, **kwargs)

    monkeypatch.setattr(kmsg, "parse_kmsg_sections", slow)
    monkeypatch.setattr(pipeline, "ANALYSIS_BUDGET_S", 1.5)
    b = RECORDED_BOUNDARY.encode()
    from tests.hostile_servers import with_kmsg

    filler = [b"[ 2.0] a line of no interest, to make the output larger than analysed inline"] * 4000
    slow_raw = with_kmsg(recorded(), b, [b"[ 1.0] SLOW-HOST", *filler])
    assert len(slow_raw) > pipeline.INLINE_ANALYSIS_MAX
    fleet = Fleet([healthy(raw=slow_raw), healthy(0.5), healthy(0.5), healthy(0.5)]).start(tmp_path)
    try:
        ssh = SshOptions(
            known_hosts=str(fleet.known_hosts), timeout=30, extra={"client_keys": None, "agent_path": None}
        )
        options = DiagnoseOptions(params=ProbeParams(sample=0), timeout=30, ssh=ssh)
        arrived: dict[str, float] = {}
        t0 = time.monotonic()

        def seen(r: HostReport) -> None:
            arrived[r.target] = time.monotonic() - t0

        got = await sweep([InventoryEntry(t) for t in fleet.targets], options, 4, seen)
    finally:
        fleet.stop()
    by_target = {r.target: r for r in got}
    slow_report = by_target[fleet.targets[0]]
    assert slow_report.status == "probe-error" and "budget of 1.5s" in (slow_report.error or ""), slow_report.error
    assert 1.4 < arrived[fleet.targets[0]] < 4.5, arrived
    for t in fleet.targets[1:]:
        assert by_target[t].status == "ok", by_target[t].error
        assert arrived[t] < 3.0, arrived  # 0.5 s of server delay, connect and analysis: ~0.7 s alone


def test_a_log_path_that_is_not_utf8(tmp_path: Path) -> None:
    """`--log` naming a file whose name is not UTF-8 (Python keeps those bytes as lone
    surrogates): the probe gets the name's own bytes and finds the file; the report shows U+FFFD,
    and every file written is valid UTF-8."""
    log = os.fsencode(tmp_path) + b"/caf\xe9.log"
    with open(log, "wb") as f:
        f.write(b"step 1\n")
    out = tmp_path / "sweep.ndjson"
    prom = tmp_path / "vastprobe.prom"
    r = subprocess.run([sys.executable, "-m", "vastprobe", "sweep", "-w", "local", "--sample", "0", "--log", log,
                        "--match", b"caf\xe9", "--format", "ndjson", "--output", str(out), "--prom", str(prom),
                        "--snapshot"],
                       capture_output=True, timeout=120)  # fmt: skip
    assert r.returncode in (0, 1, 3), r.stderr
    for data in (r.stdout, out.read_bytes(), prom.read_bytes()):
        data.decode("utf-8")  # strict
        assert b"\\udc" not in data  # no lone surrogate escaped into JSON either
    (host,) = host_lines(out.read_text())
    (lf,) = host["snapshot"]["logs"]
    assert lf["path"] == str(tmp_path) + "/caf\ufffd.log"
    assert lf["stats"][0]["size"] == 7  # the probe found the file by its real name
