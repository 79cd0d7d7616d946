"""Transfers over ssh whose remote side stopped, through the test sshd on 127.0.0.1: `tar | gzip | ssh
'cat > file'` and `rsync -e ssh`. Every process of the job waits in poll() or on a full pipe, and the
chain goes on through the TCP connection into sshd's session and on to the stopped command there.
Found from /proc alone: no --log, with two samples and with one."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import descendants, proc_state, vastprobe_json, wait_for
from tests.sshd import Sshd, start_sshd

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> Iterator[Sshd]:
    s = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def payload(tmp_path_factory) -> Path:
    """32 MiB that does not compress: more than every buffer between the two ends holds."""
    d = tmp_path_factory.mktemp("payload")
    with (d / "weights.bin").open("wb") as f:
        for _ in range(32):
            f.write(os.urandom(1 << 20))
    return d


def ssh_command(sshd: Sshd) -> str:
    return (
        f"ssh -p {sshd.port} -i {sshd.user_key} -o UserKnownHostsFile={sshd.known_hosts} -o BatchMode=yes "
        "-o StrictHostKeyChecking=yes"
    )


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cpu_and_io(pids: list[int]) -> tuple[int, ...]:
    """What would change while data still flows: CPU ticks and bytes each process read and wrote."""
    out = []
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            io = dict(line.split(b": ") for line in Path(f"/proc/{pid}/io").read_bytes().splitlines())
            out += [int(f[11]) + int(f[12]), int(io[b"rchar"]), int(io[b"wchar"])]
        except (OSError, ValueError, IndexError, KeyError):
            out.append(-1)
    return tuple(out)


def settled(pids: list[int]) -> bool:
    """Nothing of the transfer moves over two seconds: the buffers between the ends are full (on a
    loaded machine one still second was seen while data still trickled)."""
    before = cpu_and_io(pids)
    try:
        wait_for(lambda: cpu_and_io(pids) != before, timeout=2.0, what="movement")
    except AssertionError:
        return True
    return False


def belongs_to(pid: int, place: Path) -> bool:
    """Whether `pid` works under `place` (a test's tmp_path), by its arguments or its open files: the
    remote commands of an earlier test may still be winding down under the same sshd."""
    mark = str(place)
    try:
        if mark.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            return True
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(mark) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def stop_remote(sshd: Sshd, name: str, place: Path, count: int = 1) -> list[int]:
    """Stop the command sshd runs for this test's client (all `count` of its processes: rsync's
    receiver forks its generator), as a tenant or a debugger would."""
    found: list[int] = []

    def remote() -> bool:
        found[:] = [d for d in descendants(sshd.proc.pid) if comm(d) == name and belongs_to(d, place)]
        return len(found) >= count

    wait_for(remote, timeout=30, what=f"the remote {name} running")
    for pid in found:
        os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: all(proc_state(p) == "T" for p in found), what="the remote side stopped")
    return found


def start_job(reap: list, command: str) -> subprocess.Popen:
    job = subprocess.Popen(["bash", "-c", command], start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    reap.append(job)
    return job


def diagnose_both(a: Sshd, b: Sshd, tmp_path: Path, *extra: str) -> tuple[int, dict[str, dict]]:
    """One `vastprobe diagnose A B` (two samples, JSON): its exit code and each host's report."""
    known = tmp_path / "known_hosts"
    known.write_text(a.known_hosts.read_text() + b.known_hosts.read_text())
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", a.target, b.target, "-i", str(b.user_key),
                        "--known-hosts", str(known), "--format", "json", "--sample", "1", *extra],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    return r.returncode, {h["target"]: h for h in json.loads(r.stdout)["hosts"]}


def resume(pids: list[int]) -> None:
    """Continue the stopped remote side, then end it: nothing of this test's transfer outlives it."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


@pytest.mark.parametrize("sample", ["1", "0"])
def test_tar_gzip_ssh_to_a_stopped_remote_cat_names_the_stopped_cat(reap, sshd: Sshd, payload: Path,
                                                                     tmp_path: Path, sample: str) -> None:  # fmt: skip
    out = tmp_path / "backup.tgz"
    job = start_job(reap, f"tar cf - -C {payload} . | gzip -1 | {ssh_command(sshd)} root@127.0.0.1 'cat > {out}'")
    stopped = stop_remote(sshd, "cat", tmp_path)
    try:
        local = [d for d in descendants(job.pid) if comm(d) in ("tar", "gzip", "ssh")]
        wait_for(lambda: settled(local), timeout=60, what="the transfer blocked")
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
        named = [f for f in host["findings"] if set(stopped) & set(f["pids"]) and f["severity"] == "error"]
        assert named, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        f = named[0]
        assert f["rule"] == "do-wait-orphan" and "which is stopped" in f["summary"], f["summary"]
        assert f"kill -CONT {stopped[0]}" in f["hint"]
        chain = next(e["detail"] for e in f["evidence"] if e["source"] == "wait chain")
        assert " ssh " in chain and " sshd " in chain, chain  # through the connection, into sshd's session
        assert host["verdict"] == "stalled" and rc == 1
    finally:
        resume(stopped)


@pytest.mark.parametrize("sample", ["1", "0"])
@pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")
def test_rsync_over_ssh_to_a_stopped_remote_rsync_names_it(reap, sshd: Sshd, payload: Path, tmp_path: Path,
                                                           sample: str) -> None:  # fmt: skip
    dest = tmp_path / "dest"
    dest.mkdir()
    # --bwlimit: 32 MiB take 3 s or more, so the remote side is caught running on an idle machine
    # too (unthrottled, the transfer was seen to end before the poll found both processes)
    job = start_job(reap, f"rsync -a --bwlimit=10000 -e '{ssh_command(sshd)}' {payload}/ root@127.0.0.1:{dest}/")
    stopped = stop_remote(sshd, "rsync", tmp_path, count=2)
    try:
        local = [d for d in descendants(job.pid) if comm(d) in ("rsync", "ssh")]
        wait_for(lambda: settled(local), timeout=60, what="the transfer blocked")
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", sample)
        named = [f for f in host["findings"] if set(stopped) & set(f["pids"]) and f["severity"] == "error"]
        assert named, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        assert "which is stopped" in named[0]["summary"] and "kill -CONT" in named[0]["hint"]
        assert host["verdict"] == "stalled" and rc == 1
    finally:
        resume(stopped)


@pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")
def test_a_running_rsync_over_ssh_is_healthy(reap, sshd: Sshd, payload: Path, tmp_path: Path) -> None:
    """The control: the same transfer with nothing stopped, caught mid-way (--bwlimit keeps it going
    for the whole sample window; every process of it still waits in poll() most of the time)."""
    dest = tmp_path / "dest"
    dest.mkdir()
    job = start_job(reap, f"rsync -a --bwlimit=4000 -e '{ssh_command(sshd)}' {payload}/ root@127.0.0.1:{dest}/")
    wait_for(lambda: any(comm(d) == "rsync" for d in descendants(sshd.proc.pid)), timeout=30, what="the remote rsync")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


def test_a_remote_command_that_computes_behind_a_quiet_log_is_not_stalled(reap, sshd: Sshd, tmp_path: Path) -> None:
    """`ssh host python3 compute.py >> job.log`, the remote step computing quietly, the log quiet for ten
    minutes: the chain stopped at sshd's session (it polls the pipes of the command it runs, which are not
    followed as sure), and read STALLED, exit 1, "sshd does not answer" (found by a helper). What the
    chain's end polls at work is the chain moving: no finding of the wait, DEGRADED by the quiet log alone."""
    log = tmp_path / "job.log"
    job = start_job(reap, f"{ssh_command(sshd)} root@127.0.0.1 \"python3 -c 'while True: pass'\" >> {log}")

    def remote() -> list[int]:
        return [d for d in descendants(sshd.proc.pid) if comm(d).startswith("python") and proc_state(d) == "R"]

    wait_for(lambda: bool(remote()), timeout=30, what="the remote command computing")
    computing = remote()
    try:
        os.utime(log, (time.time() - 600, time.time() - 600))
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "1")
    finally:
        for pid in computing:  # no terminal, no SIGHUP: it outlives its session
            os.kill(pid, signal.SIGKILL)
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    assert not [f for f in said if f[1] in ("error", "critical")], said
    assert not [f for f in said if f[0] == "socket-peer-wait"], said
    assert host["verdict"] == "degraded" and rc == 0, said


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("nsenter") is None, reason="needs util-linux")
def test_from_inside_a_container_the_stopped_remote_is_another_host_to_diagnose(reap, sshd: Sshd, payload: Path,
                                                                                tmp_path: Path) -> None:  # fmt: skip
    """`tar | gzip | ssh` in a PID namespace (a container) to the sshd outside it, probed from inside
    as on a vast.ai instance: the remote side is another host. The finding names it and gives the
    exact command that diagnoses it."""
    out = tmp_path / "backup.tgz"
    pipeline = f"tar cf - -C {payload} . | gzip -1 | {ssh_command(sshd)} root@127.0.0.1 'cat > {out}'"
    box = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", f"{pipeline}; wait"],
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    reap.append(box)
    stopped = stop_remote(sshd, "cat", tmp_path)
    try:
        local = [d for d in descendants(box.pid) if comm(d) in ("tar", "gzip", "ssh")]
        wait_for(lambda: len(local) == 3 and settled(local), timeout=60, what="the transfer blocked")
        init = next(d for d in descendants(box.pid) if comm(d) == "sh")
        r = subprocess.run(["nsenter", f"--target={init}", "--pid", "--mount", "--", sys.executable, "-m", "vastprobe",
                            "diagnose", "local", "--format", "json", "--sample", "1"],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        host = json.loads(r.stdout)["hosts"][0]
        f = next((f for f in host["findings"] if f["rule"] == "socket-peer-wait"), None)
        assert f is not None, [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        assert f"the ssh session to root@127.0.0.1:{sshd.port}" in f["summary"], f["summary"]
        assert f"vastprobe diagnose root@127.0.0.1:{sshd.port} -i {sshd.user_key}" in f["hint"], f["hint"]
        assert f["severity"] == "warning" and host["verdict"] == "degraded"
    finally:
        resume(stopped)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux")
def test_a_run_holding_both_hosts_joins_their_findings(reap, sshd: Sshd, payload: Path, tmp_path: Path) -> None:
    """Host A (a PID namespace behind its own sshd, as a vast.ai instance) runs `tar | gzip | ssh` to
    host B (this machine's test sshd), whose `cat` is stopped. One `vastprobe diagnose A B`: A's
    finding names B and says what B's report found; B's worst finding says A waits on it."""
    out = tmp_path / "backup.tgz"
    pipeline = f"tar cf - -C {payload} . | gzip -1 | {ssh_command(sshd)} root@127.0.0.1 'cat > {out}'"
    wrap = ["unshare", "--pid", "--kill-child", "--mount-proc", "--", "sh", "-c", f'({pipeline}) & exec "$@"', "sh"]
    a = start_sshd(tmp_path / "a", user_key=sshd.user_key, wrap=wrap)
    try:
        stopped = stop_remote(sshd, "cat", tmp_path)
        local = [d for d in descendants(a.proc.pid) if comm(d) in ("tar", "gzip", "ssh")]
        wait_for(lambda: len(local) == 3 and settled(local), timeout=60, what="the transfer blocked")
        rc, hosts = diagnose_both(a, sshd, tmp_path)
        ha, hb = hosts[a.target], hosts[sshd.target]
        f = next(f for f in ha["findings"] if f.get("remote") == sshd.target)
        # joined by the connection: B's end is the sshd session, and under it the stopped cat
        joined = [e["detail"] for e in f["evidence"] if e["source"] == "this run"]
        assert joined and joined[0].startswith(f"{sshd.target}: sshd (") and "accepted it: its host says: cat (" in (
            joined[0]) and "is stopped (T)" in joined[0], f["evidence"]  # fmt: skip
        told = [e["detail"] for g in hb["findings"] if set(stopped) & set(g["pids"])
                for e in g["evidence"] if e["source"] == "this run"]  # fmt: skip
        assert told and told[0].startswith(f"{a.target}: ssh (") and " waits on sshd (" in told[0], told
        # A is held by what holds the other end, at its severity: it read DEGRADED beside a STALLED B
        assert f["severity"] == "error" and ha["verdict"] == "stalled", (ha["verdict"], f["summary"])
        assert rc == 1
    finally:
        resume(locals().get("stopped", []))
        a.stop()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux")
def test_a_run_does_not_blame_an_unrelated_stopped_process_on_the_other_host(reap, sshd: Sshd, tmp_path: Path) -> None:
    """A's `tar | ssh B 'sleep 3600'` waits on a remote command asleep on a timer (a note, as one host
    seeing both ends reads it); B also has a stopped process of its own. The join once told A "B ... stalled: sleep is stopped"
    and told B's stopped sleep that A waits on it: the host's worst finding, whatever it was about."""
    mark = tmp_path / "mark"
    pipeline = f"tar cf - /usr/lib 2>/dev/null | {ssh_command(sshd)} root@127.0.0.1 'sleep 3600; : {mark}'"
    wrap = ["unshare", "--pid", "--kill-child", "--mount-proc", "--", "sh", "-c", f'({pipeline}) & exec "$@"', "sh"]
    a = start_sshd(tmp_path / "a", user_key=sshd.user_key, wrap=wrap)
    start_job(reap, f"sleep 999 & echo $! > {tmp_path / 'pid'}; wait")  # B's own stopped process
    try:
        wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text().strip() != "", what="sleep")
        unrelated = int((tmp_path / "pid").read_text())
        os.kill(unrelated, signal.SIGSTOP)
        wait_for(lambda: proc_state(unrelated) == "T", what="the unrelated process stopped")
        local = [d for d in descendants(a.proc.pid) if comm(d) in ("tar", "ssh")]
        wait_for(lambda: len(local) == 2 and settled(local), timeout=60, what="the transfer blocked")
        rc, hosts = diagnose_both(a, sshd, tmp_path, "--match", f"^tar cf|{mark}|sleep 999 &")
        ha, hb = hosts[a.target], hosts[sshd.target]
        # not another test's rank lab on the shared sshd (its loopback ends are A's too): the ssh session's
        f = next((f for f in ha["findings"] if f.get("remote") == sshd.target and f["rule"] != "culprit-rank"), None)
        assert f is not None, (
            ha["scope"],
            ha["headline"],
            [(g["rule"], g["severity"], g["summary"]) for g in ha["findings"]],
        )
        said = " ".join(e["detail"] for e in f["evidence"] if e["source"] == "this run")
        assert "sleep" not in said.replace(str(mark), "") and "sshd (" in said, f["evidence"]
        blamed = [g for g in hb["findings"] if unrelated in g["pids"]]
        assert blamed and not [e for g in blamed for e in g["evidence"] if e["source"] == "this run"], blamed
        # the remote command sleeps on a timer: as `tar | (sleep 3600; :)` on one host, nothing holds tar
        assert f["severity"] == "info" and ha["verdict"] == "healthy", (ha["verdict"], f["summary"])
        assert re.search(r", where sleep \((\d+)\) sleeps on a timer;", f["summary"]), f["summary"]
        assert str(unrelated) not in f["summary"]
        assert hb["verdict"] == "stalled" and rc == 1  # B's own stopped sleep
    finally:
        with contextlib.suppress(Exception):
            os.kill(unrelated, signal.SIGCONT)
        # the remote command (bash, and its sleep) outlives the session otherwise
        remote = [d for d in descendants(sshd.proc.pid) if belongs_to(d, tmp_path)]
        resume([*remote, *(k for d in remote for k in descendants(d))])
        a.stop()


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("git") is None, reason="needs util-linux and git")
def test_a_git_clone_over_ssh_held_by_a_stopped_upload_pack_on_the_other_host(reap, sshd: Sshd, payload: Path,
                                                                              tmp_path: Path) -> None:  # fmt: skip
    """Host A's `git clone ssh://B/…` while B's git-upload-pack is stopped. ssh polls git's pipes and
    its session to B; the chains through git's pipes loop back into git, and the one that reaches the
    session was never built, so A read HEALTHY beside a STALLED B (found by a helper). A poller's
    connection off the host is a chain's end too now, and a chain looping back ranks after one that
    reaches an end."""
    repo, work = tmp_path / "repo.git", tmp_path / "work"
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", "--bare", str(repo)], check=True)
    subprocess.run([*git, "clone", "-q", str(repo), str(work)], check=True, capture_output=True)
    shutil.copy(payload / "weights.bin", work / "weights.bin")
    subprocess.run([*git, "-C", str(work), "add", "."], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "weights"], check=True)
    subprocess.run([*git, "-C", str(work), "push", "-q", "origin", "HEAD"], check=True, capture_output=True)
    clone = (
        f"GIT_SSH_COMMAND='{ssh_command(sshd)}' git clone -q ssh://root@127.0.0.1:{sshd.port}{repo} {tmp_path / 'c'}"
    )
    wrap = ["unshare", "--pid", "--kill-child", "--mount-proc", "--", "sh", "-c", f'({clone}) & exec "$@"', "sh"]
    a = start_sshd(tmp_path / "a", user_key=sshd.user_key, wrap=wrap)
    try:
        stopped = stop_remote(sshd, "git-upload-pack", tmp_path)
        local = [d for d in descendants(a.proc.pid) if comm(d) in ("git", "ssh")]
        wait_for(lambda: len(local) >= 2 and settled(local), timeout=60, what="the clone blocked")
        rc, hosts = diagnose_both(a, sshd, tmp_path)
        ha = hosts[a.target]
        # not another test's rank lab on the shared sshd (its loopback ends are A's too): the ssh session's
        f = next((f for f in ha["findings"] if f.get("remote") == sshd.target and f["rule"] != "culprit-rank"), None)
        assert f is not None, [(g["rule"], g["severity"], g["summary"]) for g in ha["findings"]]
        assert "git-upload-pack (" in f["summary"] and "is stopped (T)" in f["summary"], f["summary"]
        assert f["severity"] == "error" and ha["verdict"] == "stalled" and rc == 1
    finally:
        resume(locals().get("stopped", []))
        a.stop()
