"""A tenant controls everything inside the target (issue 21, docs/security.md): fake binaries on
the probe's PATH (bound over /usr/local/sbin, the first directory of the probe's PATH, in a private
mount namespace), planted links, a FUSE server that never answers, a tenant who kills the probe's
shell. Each attack is real; each test says what it held."""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import communicate_or_dump, mount_fuse, stat_fields, threaded_sleeper, wait_for
from tests.paths import REPO
from tests.sshd import Sshd, start_sshd

needs_root_unshare = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare (util-linux)"
)


def fake_bin(d: Path, name: str, body: str) -> None:
    d.mkdir(exist_ok=True)
    f = d / name
    f.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    f.chmod(0o755)


def in_namespace(
    fakes: Path, *args: str, fuse_ctl: bool = False, timeout: float = 120, then: str = ""
) -> tuple[float, int, dict]:
    """`vastprobe diagnose local ARGS` in a private mount namespace where `fakes` is bound over
    /usr/local/sbin (fusectl mounted there too, when asked; `then`, shell commands run in it last):
    (seconds, exit code, host report)."""
    fakes.mkdir(exist_ok=True)
    setup = f"readlink /proc/self/ns/mnt >{fakes.parent / 'ns'} && mount --bind {fakes} /usr/local/sbin"
    if fuse_ctl:
        setup += " && mount -t fusectl none /sys/fs/fuse/connections"
    if then:
        setup += f" && {then}"
    cmd = ["unshare", "-m", "sh", "-c", f'{setup} && exec "$@"', "sh",
           sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot", *args]  # fmt: skip
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, start_new_session=True)
    assert r.stdout, r.stderr
    return time.monotonic() - t0, r.returncode, json.loads(r.stdout)["hosts"][0]


def kill_marked(mark: str) -> None:
    """SIGKILL the processes whose command line holds `mark` (what a fake binary left running)."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if mark.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                    os.kill(int(d), signal.SIGKILL)
            except OSError:
                continue


# ---------------------------------------------------------------- item 3: every untrusted step bounded

DMESG_ATTACKS = {
    "hangs": "exec sleep 1000.31\n",
    "floods": "exec yes '[ 1.000000] Out of memory: flood line that never ends'\n",
    "leaves a setsid child holding the pipe": "setsid sleep 1000.32 &\necho '[ 1.0] a line'\n",
}


@needs_root_unshare
@pytest.mark.parametrize("attack", sorted(DMESG_ATTACKS))
def test_a_fake_dmesg_costs_seconds_not_the_diagnosis(tmp_path: Path, attack: str) -> None:
    """dmesg ran with no timeout and was read to its EOF: a fake one that hangs, floods or leaves
    a setsid child holding the pipe cost the whole --timeout and the diagnosis (status timeout).
    Now it is killed at 10 s, cut at 64 MiB, and its reader ends at 12 s: the host is diagnosed."""
    fakes = tmp_path / "bin"
    fake_bin(fakes, "dmesg", DMESG_ATTACKS[attack])
    try:
        took, _rc, host = in_namespace(fakes, "--sample", "0", "--timeout", "40")
    finally:
        kill_marked("1000.3")
    assert host["status"] == "ok", host["error"]
    assert host["snapshot"]["probe"]["complete"], host["snapshot"]["probe"]
    assert took < 30, took


@needs_root_unshare
def test_nvidia_smi_with_a_grandchild_holding_its_stdout_is_bounded_as_a_whole(tmp_path: Path) -> None:
    """`nvidia-smi | head -c` waited for EOF: a grandchild keeping nvidia-smi's stdout open held
    the probe until the client gave up. Now the pipeline ends at VP_NVSMI_T + 2 seconds, and the
    later nvidia-smi calls are skipped as after any hung one."""
    fakes = tmp_path / "bin"
    fake_bin(fakes, "nvidia-smi", "setsid sleep 1000.33 &\necho 'index, uuid'\nexit 0\n")
    try:
        took, _rc, host = in_namespace(fakes, "--sample", "0.2", "--timeout", "60")
    finally:
        kill_marked("1000.33")
    assert host["status"] == "ok", host["error"]
    assert host["snapshot"]["probe"]["complete"]
    assert took < 35, took  # one bounded wait of 10 s; the calls after it are skipped
    assert "skipped" in (host["snapshot"]["gpus"]["error"] or "") or took < 25, host["snapshot"]["gpus"]


# ---------------------------------------------------------------- item 6: planted links


def tenant_link(tmp_path: Path, name: str, target: Path) -> Path:
    """`tmp_path/tenant/NAME`, a link to `target` that the tenant (uid 65534) planted in its own directory."""
    home = tmp_path / "tenant"
    home.mkdir(exist_ok=True)
    os.chown(home, 65534, 65534)
    link = home / name
    link.symlink_to(target)
    os.lchown(link, 65534, 65534)
    return link


def tenant_home() -> Path:
    """A directory of the tenant's (uid 65534) under /tmp, which the tenant can reach (pytest's
    tmp_path is root's alone)."""
    home = Path(tempfile.mkdtemp(prefix="vastprobe-tenant-", dir="/tmp"))
    os.chmod(home, 0o755)
    os.chown(home, 65534, 65534)
    return home


def root_only_dir(tmp_path: Path, canary: str) -> Path:
    """`tmp_path/root-only` (0700): its `train.log` holds `canary`, and a file's name is a canary too.
    Skips unless root: the probe must read what only root may."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the probe reads what only root may)")
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    (secret / "train.log").write_text(canary + "\n")
    (secret / "weights-CANARY-name.bin").write_text("x")
    return secret


def test_a_log_link_planted_to_etc_shadow_never_reaches_the_report(tmp_path: Path) -> None:
    """A tenant's --log path is their link to /etc/shadow (the probe runs as root): the first 4 KB
    of /etc/shadow were in logs[].tail. Now the link is resolved on the target and refused (its
    target is not its owner's), and the finding says so."""
    shadow = Path("/etc/shadow")
    if os.geteuid() != 0 or not shadow.exists() or not shadow.read_bytes().strip():
        pytest.skip("needs root and a non-empty /etc/shadow")
    link = tenant_link(tmp_path, "train.log", shadow)
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot", "--sample", "0",
                        "--log", str(link)], capture_output=True, text=True, timeout=120)  # fmt: skip
    secret_lines = [x for x in shadow.read_text().splitlines() if len(x) > 8]
    assert not [x for x in secret_lines if x in r.stdout], "/etc/shadow's content is in the report"
    host = json.loads(r.stdout)["hosts"][0]
    (log,) = host["snapshot"]["logs"]
    assert "a link to a file of another user" in log["tail"]["unavailable"], log
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert f["severity"] == "warning" and "was not read" in f["summary"], f


def test_a_tenants_directory_link_leads_no_log_or_listing_into_a_root_only_directory(tmp_path: Path) -> None:
    """Only the last component of a --log path was checked: `--log tenant/run/train.log`, where the
    tenant made `run` a link to a root-only directory, put that root-only file in the report, and
    `--artifacts 'tenant/run/*'` listed the directory. Every link among the components is checked
    now (a non-root owner's link must lead to its owner's directory); a root-owned link is trusted."""
    secret = root_only_dir(tmp_path, "CANARY-root-only-3f9a")
    run = tenant_link(tmp_path, "run", secret)
    trusted = tmp_path / "system-link"  # root's own link to root's directory: followed as before
    trusted.symlink_to(secret)
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot",
                        "--sample", "0", "--log", str(run / "train.log"), "--artifacts", f"{run}/*",
                        "--log", str(trusted / "train.log")], capture_output=True, text=True, timeout=120)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    logs = {lg["path"]: lg for lg in host["snapshot"]["logs"]}
    tenant_log = logs[str(run / "train.log")]
    assert "a directory link to another user's directory" in tenant_log["tail"]["unavailable"], tenant_log
    assert "CANARY-root-only" not in json.dumps(tenant_log)
    (art,) = host["snapshot"]["artifacts"]
    assert art["entries"] == [] and "directory link" in (art["error"] or ""), art
    assert "weights-CANARY-name" not in r.stdout
    assert logs[str(trusted / "train.log")]["tail"] == "CANARY-root-only-3f9a\n"  # root's link: read


def test_a_dot_dot_after_a_tenants_link_and_a_wildcard_through_one_lead_nowhere_root_only(tmp_path: Path) -> None:
    """Two ways past the component check, found by a helper. `tenant/x/../train.log`, where `x` is the
    tenant's link to a directory of its own inside a root-only one: `x/..` is no link, but the kernel
    resolves it to the root-only parent, whose file was read. And `tenant/*/*`, whose wildcard matches
    the tenant's link `run` to a root-only directory: only the part before the wildcard was checked,
    and the root-only directory was listed. `..` is resolved by name now (and refused by the probe),
    and each match's directories are checked."""
    secret = root_only_dir(tmp_path, "CANARY-root-only-77c1")
    own = secret / "tenant-own"
    own.mkdir()
    os.chown(own, 65534, 65534)
    x = tenant_link(tmp_path, "x", own)
    tenant_link(tmp_path, "run", secret)
    home = x.parent
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot",
                        "--sample", "0", "--log", f"{x}/../train.log", "--artifacts", f"{x}/../*",
                        "--artifacts", f"{home}/*/*"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "CANARY-root-only" not in r.stdout and "weights-CANARY-name" not in r.stdout, r.stdout[:2000]
    host = json.loads(r.stdout)["hosts"][0]
    (log,) = host["snapshot"]["logs"]
    assert log["path"] == f"{home}/train.log", log  # the name's own meaning: the tenant's directory
    by_pattern = {a["pattern"]: a for a in host["snapshot"]["artifacts"]}
    assert f"{home}/*" in by_pattern, list(by_pattern)
    deep = by_pattern[f"{home}/*/*"]
    assert "through a directory link to another user's directory" in (deep["error"] or ""), deep


def _log_reports(log: Path, n: int) -> list[str]:
    """`n` reports of `diagnose local --log LOG --snapshot --sample 0`, one after another (JSON)."""
    argv = [sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot", "--sample", "0",
            "--log", str(log)]  # fmt: skip
    return [subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout for _ in range(n)]


DIR_SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (x.encode() for x in sys.argv[1:3])
os.nice(19)
while True:  # the tenant's real directory and its link to a root-only one trade places (RENAME_EXCHANGE)
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
"""


def test_a_tenants_directory_swapped_for_its_link_never_leads_a_read_into_a_root_only_directory(
    tmp_path: Path,
) -> None:
    """The tenant's `run` is a real directory of its own when the probe checks the path (no link:
    one `cd -P` and an open by the whole path followed), then its link to a root-only directory when
    it reads, by renameat2's atomic exchange: the root-only file was in 4 of 20 reports (and 4 of 30).
    A path one of whose directories a user not root could replace is now entered one component at
    a time, as a path through a tenant's link is."""
    secret = root_only_dir(tmp_path, "CANARY-dirswap-81d0")
    home = tenant_home()
    run, alt = home / "run", home / "run.alt"
    run.mkdir()
    (run / "train.log").write_text("step 1\n")
    os.chown(run, 65534, 65534)
    os.chown(run / "train.log", 65534, 65534)
    alt.symlink_to(secret)
    os.lchown(alt, 65534, 65534)
    swapper = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                                DIR_SWAPPER, str(run), str(alt)])  # fmt: skip
    try:
        wait_for(lambda: alt.is_dir() and not alt.is_symlink(), what="the swapper running")
        reports = _log_reports(run / "train.log", 40)
        leaked = sum("CANARY-dirswap" in r for r in reports)
        seen = sum("step 1" in r or "changed while it was read" in r for r in reports)
        assert leaked == 0, f"the root-only file was in {leaked} of 40 reports"
        assert seen > 0, "the tail was never read nor refused: the test saw no race"
    finally:
        swapper.kill()
        swapper.wait()
        shutil.rmtree(home, ignore_errors=True)


DIR_FLIPPER = """
import os, sys
own, secret, at = sys.argv[1:4]
os.nice(19)  # it spins: the suite's other tests, beside it, keep the machine
i = 0
while True:  # the directory link leads to the tenant's own directory, then to a root-only one, ...
    i += 1
    try:
        os.unlink(at + ".tmp")
    except FileNotFoundError:
        pass
    os.symlink(secret if i & 1 else own, at + ".tmp")
    os.replace(at + ".tmp", at)
"""


def test_a_directory_link_flipped_during_the_probe_never_leads_a_read_into_a_root_only_directory(
    tmp_path: Path,
) -> None:
    """The directory links were checked, then `cd -P` resolved them again: a tenant renaming its link
    `run` between its own directory and a root-only one put the root-only file in 3 of 20 reports
    (found by a helper). The directory is now entered one component at a time and each checked once
    it is the current one; the file is opened from there."""
    secret = root_only_dir(tmp_path, "CANARY-dirflip-5e2b")
    home = tenant_home()
    own = home / "own"
    own.mkdir()
    (own / "train.log").write_text("step 1\n")
    os.chown(own, 65534, 65534)
    os.chown(own / "train.log", 65534, 65534)
    run = home / "run"
    flipper = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                                DIR_FLIPPER, str(own), str(secret), str(run)])  # fmt: skip
    try:
        wait_for(lambda: run.is_symlink(), what="the flipper running")
        reports = _log_reports(run / "train.log", 40)
        leaked = sum("CANARY-dirflip" in r for r in reports)
        read = sum("step 1" in r for r in reports)
        assert leaked == 0, f"the root-only file was in {leaked} of 40 reports"
        assert read > 0, "the tenant's own log was never read: the flip left no window to read it in"
    finally:
        flipper.kill()
        flipper.wait()
        shutil.rmtree(home, ignore_errors=True)


FLIPPER = """
import os, sys
log, regular, link = sys.argv[1:4]
while True:  # the log is a regular file, then a link to the root-only canary, then a file again...
    with open(regular + ".new", "w") as f:
        f.write("step 1\\n")
    os.rename(regular + ".new", log)
    os.symlink(link, log + ".lnk")
    os.rename(log + ".lnk", log)
"""


def test_a_log_flipped_to_a_link_during_the_probe_never_puts_the_link_target_in_a_report(tmp_path: Path) -> None:
    """The owner check and the read were two steps: a tenant flipping train.log between a file of
    its own and a link to a root-only file put the canary in 10 of 30 reports. The log is opened
    once now and read only if what is open is the file checked."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the canary is root-only)")
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    canary = secret / "secret.txt"
    canary.write_text("CANARY-raced-8d1c\n")
    home = tenant_home()
    log = home / "train.log"
    flipper = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                                FLIPPER, str(log), str(home / "f"), str(canary)])  # fmt: skip
    try:
        wait_for(lambda: log.exists() or log.is_symlink(), what="the flipper under way")
        leaked = 0
        for _ in range(30):
            r = subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--sample", "0", "--log",
                                str(log), "-o", str(tmp_path / "c.json")], capture_output=True, text=True, timeout=120)  # fmt: skip
            assert r.returncode == 0, r.stderr
            raw = base64.b64decode(json.loads((tmp_path / "c.json").read_text())["raw_b64"])
            leaked += b"CANARY-raced" in raw
        assert leaked == 0, f"the canary reached {leaked} of 30 captures"
    finally:
        flipper.kill()
        flipper.wait()
        shutil.rmtree(home, ignore_errors=True)


DUMP_FLIPPER = """
import os, pickle, sys
dump, link = sys.argv[1:3]
while True:  # a plain dump of its own, then a link to the root-only canary, then the dump again...
    with open(dump + ".new", "wb") as f:
        f.write(pickle.dumps({"version": "2.4", "entries": []}, protocol=4))
    os.rename(dump + ".new", dump)
    os.symlink(link, dump + ".lnk")
    os.rename(dump + ".lnk", dump)
"""


def test_a_dump_flipped_to_a_link_is_never_read_through_it(tmp_path: Path) -> None:
    """The same race on a flight-recorder dump (2 of 20 captures in the audit): the dump a rank's
    prefix names flips between a plain pickle of the tenant's and a link to a root-only file that
    starts like a pickle. What is read is the file checked, never the link's target."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the canary is root-only)")
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    canary = secret / "secret.bin"
    canary.write_bytes(b"\x80CANARY-dump-raced-51e7" * 4)
    home = tenant_home()
    prefix = home / "trace_rank_"
    rank = threaded_sleeper(TORCH_FR_DUMP_TEMP_FILE=str(prefix))
    flipper = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                                DUMP_FLIPPER, f"{prefix}0", str(canary)])  # fmt: skip
    try:
        wait_for(lambda: Path(f"{prefix}0").exists(), what="the flipper under way")
        leaked = 0
        for _ in range(20):
            r = subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--sample", "0", "-o",
                                str(tmp_path / "c.json")], capture_output=True, text=True, timeout=120)  # fmt: skip
            assert r.returncode == 0, r.stderr
            doc = json.loads((tmp_path / "c.json").read_text())
            ours = [d for d in doc["snapshot"]["flight_dumps"] if d["path"] == f"{prefix}0"]
            # the canary is no plain pickle: refused if it was ever read (a file that keeps changing
            # under the probe is not read at all: what is open is never the file checked)
            leaked += sum(1 for d in ours if d["refused"])
        assert leaked == 0, f"the link's target was read in {leaked} of 20 captures"
    finally:
        flipper.kill()
        flipper.wait()
        rank.kill()
        rank.wait()
        shutil.rmtree(home, ignore_errors=True)


def test_a_log_link_to_proc_kmsg_is_refused_unread(tmp_path: Path) -> None:
    """A link to /proc/kmsg: reading it consumed the kernel's messages for 5 s (other readers
    lost them). Now a log that leads under /proc, /sys or /dev is never read: the probe says so in
    place of the tail it would have run."""
    link = tmp_path / "run.log"
    link.symlink_to("/proc/kmsg")
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot", "--sample", "0",
                        "--log", str(link)], capture_output=True, text=True, timeout=120)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    (log,) = host["snapshot"]["logs"]
    assert "a kernel or device file: /proc/kmsg" in log["tail"]["unavailable"], log
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert f["summary"] == f"{link} was not read (a kernel or device file: /proc/kmsg)", f


# ---------------------------------------------------------------- item 5: never wait on a dead mount


@pytest.fixture
def hung_fuse(reap: list[subprocess.Popen], tmp_path: Path):  # type: ignore[no-untyped-def]
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    mnt = tmp_path / "mnt"
    server = mount_fuse(reap, mnt)
    yield server, mnt
    server.kill()  # its requests are aborted: whatever waited on it is released
    server.wait()
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_log_on_a_fuse_mount_with_requests_waiting_is_never_touched(
    hung_fuse, reap: list[subprocess.Popen], tmp_path: Path
) -> None:
    """The job already waits on a FUSE mount whose server never answers; --log and --artifacts
    name paths on it. The probe's sh and `stat -L` sat in D state for more than 10 minutes. Now the
    mount's connection (fusectl: 1 request waiting) says not to touch it: the probe finishes, the
    finding says the log is on an unresponsive FUSE mount, and no process of the probe waits there."""
    _server, mnt = hung_fuse
    job = subprocess.Popen(["cat", str(mnt / "data.bin")], stdout=subprocess.DEVNULL, start_new_session=True)
    reap.append(job)
    wait_for(lambda: Path(f"/proc/{job.pid}/wchan").read_text() == "request_wait_answer", what="cat waiting on FUSE")
    before = set(fuse_waiters())
    took, _rc, host = in_namespace(tmp_path / "empty", "--sample", "0.2", "--timeout", "60", "--log",
                                  str(mnt / "run.log"), "--artifacts", f"{mnt}/*", fuse_ctl=True)  # fmt: skip
    assert host["status"] == "ok" and host["snapshot"]["probe"]["complete"], host["error"]
    assert took < 20, took
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert f["summary"] == f"{mnt}/run.log is on an unresponsive FUSE mount: not touched", f
    assert "request(s) waiting for its server" in host["snapshot"]["artifacts"][0]["error"]
    assert job.pid in before
    ns = (tmp_path / "ns").read_text().strip()  # the run's private mount namespace
    assert probe_waiters(set(fuse_waiters()) - before, ns) == []  # nothing of the probe's waits there


@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_log_through_a_link_into_a_fuse_mount_with_requests_waiting_is_never_touched(
    hung_fuse, reap: list[subprocess.Popen], tmp_path: Path, where: str
) -> None:
    """The same mount reached through a link: `runlink/run.log` (runlink -> the mount's directory) or a
    link to the log itself. The check looked up the path as written, on `/`, and the link's owner check
    and df went through the link: 10 s more each run and two probe processes left in D state for good
    (found by a helper). The link's target is read with readlink first: not touched."""
    _server, mnt = hung_fuse
    job = subprocess.Popen(["cat", str(mnt / "data.bin")], stdout=subprocess.DEVNULL, start_new_session=True)
    reap.append(job)
    wait_for(lambda: Path(f"/proc/{job.pid}/wchan").read_text() == "request_wait_answer", what="cat waiting on FUSE")
    before = set(fuse_waiters())
    links = tmp_path / "links"
    links.mkdir()
    if where == "middle":
        (links / "runlink").symlink_to(mnt)
        log = links / "runlink" / "run.log"
    else:
        (links / "run.log").symlink_to(mnt / "run.log")
        log = links / "run.log"
    took, _rc, host = in_namespace(tmp_path / "empty", "--sample", "0.2", "--timeout", "60", "--log", str(log),
                                  fuse_ctl=True)  # fmt: skip
    assert host["status"] == "ok" and host["snapshot"]["probe"]["complete"], host["error"]
    assert took < 20, took
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert f["summary"] == f"{log} is on an unresponsive FUSE mount: not touched", f
    ns = (tmp_path / "ns").read_text().strip()
    assert probe_waiters(set(fuse_waiters()) - before, ns) == []  # nothing of the probe's waits there


def fuse_waiters() -> list[int]:
    """Processes waiting for a FUSE server's answer, anywhere on this shared machine."""
    out = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and Path(f"/proc/{d}/wchan").read_text() == "request_wait_answer":
                out.append(int(d))
        except OSError:
            continue
    return out


def probe_waiters(pids: set[int], ns: str) -> list[int]:
    """Of `pids` (new since the run began), the probe's own: those in the run's private mount
    namespace `ns` (other people's probes and tests on this shared machine are in theirs)."""
    out = []
    for pid in pids:
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") == ns:
                out.append(pid)
        except OSError:
            continue
    return out


def test_a_log_on_a_dead_mount_nobody_touched_yet_is_abandoned_in_seconds(hung_fuse, tmp_path: Path) -> None:
    """No request waits yet (nothing told the probe the mount is dead): the child that touches it
    is abandoned after VP_FILE_T seconds, the probe's own shell never waits there, and the report
    says the log did not answer."""
    _server, mnt = hung_fuse
    took, _rc, host = in_namespace(tmp_path / "empty", "--sample", "0", "--timeout", "60", "--log",
                                   str(mnt / "run.log"), "--artifacts", "/nonexistent-vp/*")  # fmt: skip
    assert host["status"] == "ok" and host["snapshot"]["probe"]["complete"], host["error"]
    print(took, host["snapshot"]["logs"], host["snapshot"]["probe"])
    assert took < 25, took  # two bounded waits of 5 s: the stat, then the tail and df
    f = next(f for f in host["findings"] if f["rule"] == "missing-logs")
    assert "did not answer" in f["summary"] or "unresponsive FUSE mount" in f["summary"], f


# ---------------------------------------------------------------- the paths the probe reads unasked


@pytest.fixture
def dead_fuse_outside_tmp(reap: list[subprocess.Popen]):  # type: ignore[no-untyped-def]
    """The never-answering FUSE mount under /var/tmp, in sight of a namespace whose own /tmp and
    /var/log are fresh (tmpfs): the names the probe reads there unasked are the test's to plant."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    base = Path(tempfile.mkdtemp(prefix="vastprobe-fuse-", dir="/var/tmp"))
    mnt = base / "mnt"
    server = mount_fuse(reap, mnt)
    yield mnt
    server.kill()  # its requests are aborted: whatever waited on it is released
    server.wait()
    subprocess.run(["umount", "-l", str(mnt)], check=False)
    shutil.rmtree(base, ignore_errors=True)


def fresh_tmp() -> tuple[str, Path]:
    """Shell commands for in_namespace's `then` giving the namespace a /tmp of its own (a tmpfs), with
    what this run needs of the real one bound back (the interpreter's venv and the repository, where they
    are under /tmp: a clean clone there lost its interpreter, exit 127); and the directory, outside /tmp,
    that keeps the real one in sight meanwhile (the caller removes it)."""
    keep = sorted(
        {q.parts[2] for q in (Path(sys.executable), Path.cwd(), REPO) if q.parts[1:2] == ("tmp",) and len(q.parts) > 2}
    )
    side = Path(tempfile.mkdtemp(prefix="vastprobe-tmp-", dir="/var/tmp"))
    cmds = [f"mount --bind /tmp {side}", "mount -t tmpfs none /tmp"]
    for k in keep:
        cmds += [f"mkdir -p /tmp/{shlex.quote(k)}", f"mount --bind {side}/{shlex.quote(k)} /tmp/{shlex.quote(k)}"]
    return " && ".join(cmds), side


def quiet_sleeper(reap: list[subprocess.Popen]) -> int:
    """A process to scope a run to that reads HEALTHY, exit 0, on any machine."""
    p = subprocess.Popen(["sleep", "600"], start_new_session=True)
    reap.append(p)
    return p.pid


#: dmesg as an unprivileged container's: refused, so the probe falls back to the files in /var/log
REFUSED_DMESG = "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n"
NO_JOURNAL = "echo 'No journal files were found.' >&2\nexit 1\n"


@needs_root_unshare
def test_a_dump_name_planted_in_tmp_as_a_link_into_a_dead_mount_is_not_followed(
    dead_fuse_outside_tmp: Path, reap: list[subprocess.Popen], tmp_path: Path
) -> None:
    """`/tmp/nccl_trace_rank_0`, the flight recorder's default dump name, planted as a link into a
    FUSE mount whose server never answers (any user can): the probe's own shell tested it with `[ -f ]`,
    a stat through the link, and sat in D state for good; every `diagnose local` took its whole
    --timeout and read UNKNOWN, exit 3 (found by a helper). Now a link there is not followed, and the
    section runs guarded once any name is there: the host is diagnosed in seconds, and nothing of the
    probe waits on the mount."""
    mnt = dead_fuse_outside_tmp
    sleeper = quiet_sleeper(reap)
    before = set(fuse_waiters())
    fresh, side = fresh_tmp()
    try:
        took, rc, host = in_namespace(tmp_path / "empty", "--pid", str(sleeper), "--sample", "0", "--timeout", "40",
                                      then=f"{fresh} && ln -s {mnt}/dump /tmp/nccl_trace_rank_0")  # fmt: skip
    finally:
        side.rmdir()
    assert host["status"] == "ok" and host["snapshot"]["probe"]["complete"], host["error"]
    assert (host["verdict"], rc) == ("healthy", 0), host["headline"]
    assert took < 20, took
    ns = (tmp_path / "ns").read_text().strip()
    assert probe_waiters(set(fuse_waiters()) - before, ns) == []


@needs_root_unshare
def test_the_kernel_log_fallback_follows_no_link_into_a_dead_mount(
    dead_fuse_outside_tmp: Path, reap: list[subprocess.Popen], tmp_path: Path
) -> None:
    """dmesg refused, as in a container, whose root owns /var/log: `/var/log/messages` a link into a
    FUSE mount that never answers. The fallback ran in the probe's own shell and `[ -r ]` went through
    the link: the shell in D state for good, the run held to its --timeout, UNKNOWN, exit 3 (found by a
    helper). Now a link onto a FUSE mount is not followed, and the fallback runs guarded."""
    mnt = dead_fuse_outside_tmp
    fakes = tmp_path / "bin"
    fake_bin(fakes, "dmesg", REFUSED_DMESG)
    fake_bin(fakes, "journalctl", NO_JOURNAL)
    sleeper = quiet_sleeper(reap)
    before = set(fuse_waiters())
    took, rc, host = in_namespace(fakes, "--pid", str(sleeper), "--sample", "0", "--timeout", "40",
                                  then=f"mount -t tmpfs none /var/log && ln -s {mnt}/messages /var/log/messages")  # fmt: skip
    assert host["status"] == "ok" and host["snapshot"]["probe"]["complete"], host["error"]
    assert (host["verdict"], rc) == ("healthy", 0), host["headline"]
    assert took < 25, took
    assert host["snapshot"]["kernel_log"]["source"] != "/var/log/messages", host["snapshot"]["kernel_log"]
    ns = (tmp_path / "ns").read_text().strip()
    assert probe_waiters(set(fuse_waiters()) - before, ns) == []


@needs_root_unshare
@pytest.mark.parametrize("target", ["/proc/kmsg", "../../proc/kmsg"])
def test_the_kernel_log_fallback_never_reads_proc_kmsg_through_a_link(
    reap: list[subprocess.Popen], tmp_path: Path, target: str
) -> None:
    """`/var/log/kern.log -> /proc/kmsg` where dmesg is refused: the fallback read /proc/kmsg for
    10 s, consuming the kernel's messages a syslog daemon was owed (found by a helper). A --log there
    was refused already; the fallback now refuses a file under /proc, /sys or /dev too."""
    fakes = tmp_path / "bin"
    fake_bin(fakes, "dmesg", REFUSED_DMESG)
    fake_bin(fakes, "journalctl", NO_JOURNAL)
    sleeper = quiet_sleeper(reap)
    took, rc, host = in_namespace(fakes, "--pid", str(sleeper), "--sample", "0", "--timeout", "40",
                                  then=f"mount -t tmpfs none /var/log && ln -s {target} /var/log/kern.log")  # fmt: skip
    assert host["status"] == "ok" and host["snapshot"]["probe"]["complete"], host["error"]
    assert (host["verdict"], rc) == ("healthy", 0), host["headline"]
    assert host["snapshot"]["kernel_log"]["source"] != "/var/log/kern.log", host["snapshot"]["kernel_log"]
    assert took < 10, took


def test_an_artifact_listing_touches_no_dead_fuse_mount_among_its_matches(
    hung_fuse, reap: list[subprocess.Popen], tmp_path: Path
) -> None:
    """`--artifacts DIR/*` where one match is a FUSE mount with requests waiting: the listing's stat
    reached the mount's server, a probe child stayed in D state each run and the listing read "0
    matches (a huge or slow directory)" (found by a helper, on the default `/tmp/*`). Now a match on
    such a mount is not touched, said so, and the rest are listed."""
    _server, mnt = hung_fuse
    job = subprocess.Popen(["cat", str(mnt / "data.bin")], stdout=subprocess.DEVNULL, start_new_session=True)
    reap.append(job)
    wait_for(lambda: Path(f"/proc/{job.pid}/wchan").read_text() == "request_wait_answer", what="cat waiting on FUSE")
    (tmp_path / "out.bin").write_bytes(b"x")
    sleeper = quiet_sleeper(reap)
    before = set(fuse_waiters())
    took, rc, host = in_namespace(tmp_path / "empty", "--pid", str(sleeper), "--sample", "0", "--timeout", "60",
                                  "--artifacts", f"{tmp_path}/*", fuse_ctl=True)  # fmt: skip
    assert host["status"] == "ok" and host["snapshot"]["probe"]["complete"], host["error"]
    assert (host["verdict"], rc) == ("healthy", 0), host["headline"]
    (listing,) = host["snapshot"]["artifacts"]
    assert any(e["path"] == str(tmp_path / "out.bin") for e in listing["entries"]), listing
    assert "unresponsive FUSE mount" in (listing["error"] or ""), listing
    ns = (tmp_path / "ns").read_text().strip()
    assert probe_waiters(set(fuse_waiters()) - before, ns) == []
    assert took < 20, took


def test_a_log_held_open_on_a_mount_that_died_is_not_touched(reap: list[subprocess.Popen], tmp_path: Path) -> None:
    """A job's stdout appended to a file on a FUSE mount whose server then stopped answering, and
    something already waits there: the probe's `stat -L /proc/PID/fd/1` (the logs found open) waited
    on it, a child of the probe in D state each run, and of probes in other mount namespaces too: the
    fd reaches the mount from anywhere (found by a helper). Now the mount is looked up by the fd's
    mount id and its requests waiting, and not touched."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    flag = tmp_path / "frozen"
    mnt = tmp_path / "mnt"
    server = mount_fuse(reap, mnt, serve_until=flag)
    try:
        with open(mnt / "job.log", "ab") as log:
            job = subprocess.Popen(["sh", "-c", "echo step 1; exec sleep 600"], stdout=log, start_new_session=True)
        reap.append(job)
        wait_for(lambda: Path(f"/proc/{job.pid}/comm").read_text().strip() == "sleep", what="the job")
        flag.touch()
        waiter = subprocess.Popen(["stat", str(mnt / "job.log")], stdout=subprocess.DEVNULL, start_new_session=True)
        reap.append(waiter)
        wait_for(lambda: Path(f"/proc/{waiter.pid}/wchan").read_text() == "request_wait_answer", what="stat waiting")
        before = set(fuse_waiters())
        took, rc, host = in_namespace(tmp_path / "empty", "--pid", str(job.pid), "--sample", "0", "--timeout", "60",
                                      fuse_ctl=True)  # fmt: skip
        assert host["status"] == "ok" and host["snapshot"]["probe"]["complete"], host["error"]
        ns = (tmp_path / "ns").read_text().strip()
        assert probe_waiters(set(fuse_waiters()) - before, ns) == []
        assert rc in (0, 1) and host["verdict"] in ("healthy", "degraded", "stalled"), host["headline"]
        assert took < 20, took
    finally:
        server.kill()
        server.wait()
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_an_oom_kill_written_to_dev_kmsg_is_no_kernel_event(reap: list[subprocess.Popen]) -> None:
    """Root may write any text to /dev/kmsg, the kernel's OOM-kill lines too, but the kernel files
    every such line under the `user` facility: three forged lines made a worker killed by SIGKILL
    read "OOM-killed", STALLED (found by a helper). util-linux's dmesg now runs with -k (the kernel's
    own lines alone): the forged kill is no event. The line names a process that never existed, in
    a cgroup of no one's: another test of this shared machine reading the log meanwhile sees a kill
    outside its scope, as any other tenant's."""
    if os.geteuid() != 0 or not os.access("/dev/kmsg", os.W_OK):
        pytest.skip("needs root and a writable /dev/kmsg")
    dmesg = shutil.which("dmesg")
    if dmesg is None or os.path.islink(dmesg):
        pytest.skip("needs util-linux's dmesg (a BusyBox link has no facility filter)")
    marker = f"vpforged{os.getpid() % 100000}"
    ghost = 4_190_000 + os.getpid() % 4000  # above any pid this machine hands out (pid_max 4194304 at most)
    with open("/dev/kmsg", "w") as kmsg:
        kmsg.write(f"<3>Memory cgroup out of memory: Killed process {ghost} ({marker}) total-vm:4096kB, "
                   "anon-rss:2048kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0\n")  # fmt: skip
    assert marker in subprocess.run(["dmesg"], capture_output=True, text=True, check=True).stdout
    sleeper = quiet_sleeper(reap)
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(sleeper), "--sample", "0",
                        "--format", "json", "--snapshot"], capture_output=True, text=True, timeout=120)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    assert marker not in r.stdout, [e for e in host["snapshot"]["kernel_log"]["events"] if marker in repr(e)]
    assert host["snapshot"]["kernel_log"]["readable"], host["snapshot"]["kernel_log"]
    assert (host["verdict"], r.returncode) == ("healthy", 0), host["headline"]


# ---------------------------------------------------------------- item 4: the watchdog, on a real sshd


def session_members(sid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = stat_fields(d)
            if f is not None and len(f) > 3 and f[3] == str(sid):
                out.append(int(d))
    return out


def probe_shells(sshd: Sshd) -> list[int]:
    """The probe shells (`sh -s`, each the leader of its session) that this sshd's sessions run."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if Path(f"/proc/{d}/cmdline").read_bytes() != b"sh\0-s\0":
                continue
        except OSError:
            continue
        own = stat_fields(d)
        if own is None or own[3] != d:  # a subshell of the probe's, not its shell
            continue
        pid = int(d)
        while pid > 1:
            f = stat_fields(pid)
            if f is None:
                break
            pid = int(f[1])
            if pid == sshd.proc.pid:
                out.append(int(d))
                break
    return out


@pytest.fixture(scope="module")
def hanging_dmesg_sshd(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A real sshd whose sessions see a dmesg that sleeps for ever (bound over /usr/local/sbin in
    its private mount namespace): a probe that runs past the client's --timeout."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare")
    d = tmp_path_factory.mktemp("sshd-dmesg")
    fakes = d / "bin"
    fake_bin(fakes, "dmesg", "exec sleep 1000.41\n")
    s = start_sshd(d, wrap=["unshare", "-m", "sh", "-c", f'mount --bind {fakes} /usr/local/sbin && exec "$@"', "sh"])
    yield s
    s.stop()
    kill_marked("1000.41")


def _diagnose(s: Sshd, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "vastprobe", "diagnose", s.target, "-i", str(s.user_key),
                             "--known-hosts", str(s.known_hosts), "--format", "json", "--snapshot", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONFAULTHANDLER="1"))  # fmt: skip


def test_after_a_client_timeout_nothing_of_the_probe_survives(hanging_dmesg_sshd: Sshd) -> None:
    """--timeout 6 against a probe held by its dmesg: the watchdog's deadline (the time left after
    connecting, less 3 s) comes first, it kills the probe's session and says so, the client keeps
    what arrived, and 2 s after the client is done no process of the probe is left on the target.
    Before: the deadline was --timeout + 5 s, the watchdog died of SIGPIPE on the closed channel,
    and the probe's processes stayed for ever."""
    s = hanging_dmesg_sshd
    p = _diagnose(s, "--sample", "0", "--timeout", "6")
    wait_for(lambda: bool(probe_shells(s)), timeout=15, what="the probe's shell on the target")
    (sid,) = probe_shells(s)
    out, _err = p.communicate(timeout=60)
    host = json.loads(out)["hosts"][0]
    assert host["verdict"] != "healthy" and host["snapshot"] is not None, host["error"]
    assert host["snapshot"]["probe"]["deadline_hit"], host["snapshot"]["probe"]  # the watchdog ended it
    time.sleep(2)  # the guarantee is about the target 2 s after the client is done
    assert session_members(sid) == [], "probe processes left on the target"


def test_after_a_disconnect_nothing_of_the_probe_survives(hanging_dmesg_sshd: Sshd) -> None:
    """The client dies mid-probe (the connection drops): sshd exits, the probe's shell is adopted,
    and the watchdog sees it within a second and ends the whole session."""
    s = hanging_dmesg_sshd
    p = _diagnose(s, "--sample", "0", "--timeout", "60")
    # the connection and key exchange first: 15 s ran out once in a clean-clone CI (e73f029) under four workers
    wait_for(lambda: bool(probe_shells(s)), timeout=40, what="the probe's shell on the target")
    (sid,) = probe_shells(s)
    wait_for(lambda: any(_comm(pid) == "sleep" for pid in session_members(sid)), timeout=15, what="the hung dmesg")
    p.kill()
    p.wait()
    t0 = time.monotonic()
    wait_for(lambda: session_members(sid) == [], timeout=5, what="the probe's session to end")
    assert time.monotonic() - t0 < 3.0


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


# ---------------------------------------------------------------- fault injection: the probe killed at each boundary

KILLER = r"""
import os, re, signal, subprocess, sys
from pathlib import Path

d = Path(sys.argv[1])
k = int((d / "k").read_text())
script = b""
while not script.endswith(b"; exit\n"):  # the client holds stdin open until it has the output
    chunk = os.read(0, 65536)
    if not chunk:
        break
    script += chunk
b = re.search(rb"VP_B='([0-9a-f]+)'", script).group(1)
close = b"\n@@" + b + b"@@ /"
sh = subprocess.Popen(["sh", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
(d / f"sid.{k}").write_text(str(sh.pid))
sh.stdin.write(script)
sh.stdin.close()
seen, out = 0, sys.stdout.buffer
buf = b""
while True:
    chunk = os.read(sh.stdout.fileno(), 65536)
    if not chunk:
        break
    buf += chunk
    n = buf.count(close)
    if n >= k:  # cut right after the k-th section's end line, then the tenant kills the shell
        i = -1
        for _ in range(k):
            i = buf.index(close, i + 1)
        end = buf.index(b"\n", i + len(close)) + 1
        out.write(buf[:end]); out.flush()
        os.kill(sh.pid, signal.SIGKILL)
        break
out.write(buf) if n < k else None
out.flush()
sh.wait()
"""


@pytest.fixture(scope="module")
def killer_sshd(tmp_path_factory):  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("sshd-killer")
    (d / "killer.py").write_text(KILLER)
    s = start_sshd(d, force_command=f"{sys.executable} {d / 'killer.py'} {d}")
    yield s, d
    s.stop()


#: The cut points are shared out between this many tests (every PARTS-th section each), so that the
#: suite's workers run them side by side: one test of ~27 diagnoses took 73 s of a 4:47 suite.
PARTS = 4


@pytest.mark.parametrize("part", range(PARTS))
def test_the_probe_killed_at_each_section_boundary_is_never_healthy_and_leaves_nothing(killer_sshd, tmp_path,  # type: ignore[no-untyped-def]
                                                                                       part: int) -> None:  # fmt: skip
    """A tenant kills the probe's shell right after each section in turn (meta, host, …, times):
    every report is `unknown` or `stalled`, never `healthy` or `degraded`, and within 2 s nothing
    of the probe's session is left on the target (its watchdog saw the shell go). This part cuts
    after sections part+1, part+1+PARTS, … until the probe finishes before its cut."""
    s, d = killer_sshd
    log = tmp_path / "job.log"
    log.write_text("step 1\n")
    args = ["--sample", "0.3", "--timeout", "30", "--log", str(log), "--artifacts", f"{tmp_path}/*"]
    verdicts = {}
    k = part + 1
    while True:
        (d / "k").write_text(str(k))
        p = _diagnose(s, *args)
        out, _err = communicate_or_dump(p, timeout=60)
        host = json.loads(out)["hosts"][0]
        verdicts[k] = host["verdict"]
        sid = int((d / f"sid.{k}").read_text())
        t0 = time.monotonic()
        wait_for(lambda sid=sid: session_members(sid) == [], timeout=4, what=f"the session of cut {k} to end")
        assert time.monotonic() - t0 < 2.5, k
        if host["snapshot"] and host["snapshot"]["probe"]["complete"]:
            break  # k is past the last section: the probe finished
        assert host["verdict"] in ("unknown", "stalled"), (k, host["verdict"], host["error"])
        k += PARTS
        assert k < 60 + PARTS
    assert k > 20, verdicts  # every section of the probe was a cut point (of one part or another)


# ---------------------------------------------------------------- item 7: a same-user forger

FORGER = r"""
import os, re, sys, time
xid = "|[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
deadline = time.monotonic() + float(sys.argv[1])
root = sys.argv[2]  # only the probe this test runs: other probes run on this shared machine


def ours(pid):
    while pid not in ("0", "1"):
        if pid == root:
            return True
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
        except OSError:
            return False
        pid = data[data.rindex(b")") + 2 :].split()[1].decode()
    return False


done = set()
while time.monotonic() < deadline:
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid in done or not ours(pid):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        m = re.search(rb"(?:^|\0)VP_B=([0-9a-f]{32})\0", env)
        if not m:
            continue
        b = m.group(1).decode()
        forged = f"\n@@{b}@@ kmsg\n@@source dmesg\n{xid}\n@@lines 1\n@@rc=0\n\n@@{b}@@ /kmsg\n"
        try:  # the probe's own stdout, through an awk of the probe that holds it
            fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)
            os.write(fd, forged.encode())
            os.close(fd)
            print("forged", pid, flush=True)
            done.add(pid)
        except OSError:
            continue
"""


def test_a_same_user_forger_never_heads_the_report(tmp_path: Path) -> None:
    """A process of the probe's own user reads the boundary from an awk's environment and writes a
    kmsg section with an Xid into the probe's stdout before the probe writes its own: the forged Xid
    led the report (the first copy won). Now every copy of a repeated section is dropped, the host
    is not diagnosed, and the forgery itself is the headline."""
    script = tmp_path / "forger.py"
    script.write_text(FORGER)
    for _attempt in range(5):  # the forger must catch an awk of the probe while it runs
        probe = subprocess.Popen([sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json", "--snapshot",
                                  "--sample", "0.5"], stdout=subprocess.PIPE, text=True)  # fmt: skip
        forger = subprocess.Popen(
            [sys.executable, str(script), "20", str(probe.pid)], stdout=subprocess.PIPE, text=True
        )
        try:
            stdout, _ = probe.communicate(timeout=120)
        finally:
            forger.kill()
            out, _ = forger.communicate()
        host = json.loads(stdout)["hosts"][0]
        if "forged" in out and host["snapshot"]["probe"]["tampering"]:
            break
    else:
        pytest.skip("the forger never caught the probe's awk in five runs")
    assert host["verdict"] == "unknown" and probe.returncode == 3, (host["verdict"], probe.returncode)
    assert host["headline"].startswith("the probe's output was forged"), host["headline"]
    assert host["incidents"][0]["root"]["rule"] == "probe-output-forged"
    assert not [e for e in host["snapshot"]["kernel_log"]["events"] if "fallen off the bus" in e["line"]]
    assert not [f for f in host["findings"] if f["rule"] in ("gpu-xid", "gpu-driver-error")]


# ---------------------------------------------------------------- a tenant's process passing for a probe's watcher


def test_a_tenants_stalled_process_named_like_a_probe_watcher_stays_in_scope(tmp_path: Path) -> None:
    """A BusyBox `timeout` watcher of an earlier probe is left out of the scope by its name, its
    `-s KILL N` arguments and its age. A tenant's flock waiter named `timeout`, run `setsid timeout -s
    KILL 9999` (flock reads a shared lock on `KILL`), was left out too, with 9999 s from its own argv
    as its bound: the host read HEALTHY, and `--pid` of it "no process matches" (found by a helper).
    A watcher now runs as the probe does, and is never older than the probe's longest bound."""
    home = tenant_home()
    try:
        bindir = home / "bin"
        bindir.mkdir()
        for name in ("flock", "timeout"):
            shutil.copy("/usr/bin/flock", bindir / name)
        os.chown(home, 65534, 65534)
        tenant = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        # the holder stuck (waiting for a signal nothing sends; asleep on a timer it would wake by itself)
        stuck = ("/usr/bin/python3", "-c", "import signal; signal.pause()")
        holder = subprocess.Popen([*tenant, str(bindir / "flock"), "-x", "KILL", *stuck], cwd=home,
                                  start_new_session=True)  # fmt: skip
        wait_for(lambda: (home / "KILL").exists(), what="the holder's lock file")
        waiter = subprocess.Popen([*tenant, str(bindir / "timeout"), "-s", "KILL", "9999"], cwd=home,
                                  start_new_session=True)  # fmt: skip
        try:
            wait_for(lambda: "lock" in Path(f"/proc/{waiter.pid}/wchan").read_text(), what="the waiter blocked")
            r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(waiter.pid),
                                "--sample", "0.3", "--format", "json"], capture_output=True, text=True, timeout=120)  # fmt: skip
            host = json.loads(r.stdout)["hosts"][0]
            assert host["verdict"] == "stalled" and r.returncode == 1, (r.returncode, host["headline"])
            assert any(f["rule"] == "file-lock-wait" and waiter.pid in f["pids"] for f in host["findings"])
        finally:
            for p in (waiter, holder):
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    finally:
        shutil.rmtree(home, ignore_errors=True)


FLIP = """import os, sys
log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.write(log, b"tenant log line\\n")
secret = os.open(sys.argv[2], os.O_PATH)  # needs only search permission on its directory
os.dup2(log, 2)
print("flipping", flush=True)
while True:
    os.dup2(log, 1)
    os.dup2(secret, 1)
"""


def test_a_held_log_swapped_for_an_o_path_fd_on_a_root_only_file_is_never_read(tmp_path: Path) -> None:
    """A tenant flips its stdout between its own log (write-only: a log to the probe) and an O_PATH
    fd on a root-only file, which needs only search permission on the directory. The probe listed
    the fd as a log, then read /proc/PID/fd/1 as root, which opened whatever it was by then: the
    root-only content was in 4 to 6 reports of 10 (found by a helper). The file opened for the read
    must be the holder's own. The control: a tenant's own stale log is still read."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the probe reads what only root may)")
    home = tenant_home()
    canary = home / "root-only-canary"
    canary.write_text("CANARY-o-path-swap\n")
    os.chmod(canary, 0o600)
    log = home / "train.log"
    python = "/usr/bin/python3"  # the tenant's own: it may not reach the suite's virtual environment
    if not os.path.exists(python):
        pytest.skip("needs /usr/bin/python3 for the tenant")
    try:
        p = subprocess.Popen([python, "-c", FLIP, str(log), str(canary)], stdout=subprocess.PIPE, text=True,
                             start_new_session=True, user=65534, group=65534, extra_groups=[])  # fmt: skip
        try:
            assert p.stdout is not None and p.stdout.readline() == "flipping\n"
            for _ in range(10):
                r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(p.pid),
                                    "--sample", "0", "--snapshot"], capture_output=True, text=True, timeout=120)  # fmt: skip
                assert "CANARY-o-path-swap" not in r.stdout + r.stderr
        finally:
            p.kill()
            p.wait()
        # the controls: the tenant's own log, and a log root opened for a job it runs as the tenant
        # (runuser, systemd's StandardOutput=append:), whose tail went unread by the first fix (found
        # by a helper)
        root_log = home / "root-opened.log"
        with root_log.open("a") as out:
            os.chmod(root_log, 0o644)
            jobs = [
                subprocess.Popen(["sh", "-c", f'exec >>"{log}"; echo "tenant last words"; exec sleep 600'],
                                 start_new_session=True, user=65534, group=65534, extra_groups=[]),
                subprocess.Popen(["sh", "-c", 'echo "service last words"; exec sleep 600'], stdout=out,
                                 start_new_session=True, user=65534, group=65534, extra_groups=[]),
            ]  # fmt: skip
        try:
            for job, path, words in zip(jobs, (log, root_log), ("tenant", "service"), strict=True):
                wait_for(lambda: f"{words} last words" in path.read_text() and _comm(job.pid) == "sleep",  # noqa: B023
                         what="the log held")  # fmt: skip
                os.utime(path, (1, 1))
                r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(job.pid),
                                    "--sample", "0", "--snapshot"], capture_output=True, text=True, timeout=120)  # fmt: skip
                tails = [h["tail"] for h in json.loads(r.stdout)["hosts"][0]["snapshot"]["held_files"] if h["tail"]]
                assert any(f"{words} last words" in t for t in tails), (words, tails)
        finally:
            for job in jobs:
                job.kill()
                job.wait()
    finally:
        shutil.rmtree(home)
