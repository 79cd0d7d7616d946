"""Every file vastprobe writes goes through fileio.write_atomic: a symlink planted at any name it
might use as a temporary file is never followed, readers never see half a file, and no other
module opens a file for writing."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO
from vastprobe import fileio


@pytest.fixture
def predictable_names(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Make the 'random' temporary names known in advance, so a test can plant a trap at each."""
    handed: list[str] = []

    def name(final: str) -> str:
        n = f".{final}.{len(handed)}.tmp"
        handed.append(n)
        return n

    monkeypatch.setattr(fileio, "_temp_name", name)
    yield handed


def test_a_symlink_at_any_temporary_name_is_never_followed(tmp_path: Path, predictable_names: list[str]) -> None:
    victim = tmp_path / "root-only"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    out = tmp_path / "c.json"
    for i in range(10):  # every name write_atomic will try first is taken by a symlink to the victim
        (tmp_path / f".c.json.{i}.tmp").symlink_to(victim)
    (tmp_path / ".c.json.10.tmp").symlink_to(tmp_path / "nonexistent-dir" / "x")  # dangling, too
    fileio.write_atomic(out, "new\n")
    assert victim.read_text() == "precious\n" and oct(victim.stat().st_mode & 0o777) == "0o600"
    assert out.read_text() == "new\n" and not out.is_symlink()
    assert predictable_names[-1] == ".c.json.11.tmp"  # it moved on past every trap
    assert not (tmp_path / ".c.json.11.tmp").exists()  # and left no temporary behind
    assert all((tmp_path / f".c.json.{i}.tmp").is_symlink() for i in range(11))  # traps untouched


def test_gives_up_rather_than_follow_when_every_name_is_taken(tmp_path: Path, predictable_names: list[str]) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for i in range(fileio.TEMP_ATTEMPTS):
        (tmp_path / f".out.{i}.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError):
        fileio.write_atomic(tmp_path / "out", "new\n")
    assert victim.read_text() == "precious\n" and not (tmp_path / "out").exists()


def test_destination_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "x.prom"
    out.symlink_to(victim)
    fileio.write_atomic(out, "metrics\n")
    assert victim.read_text() == "precious\n" and out.read_text() == "metrics\n" and not out.is_symlink()
    assert oct(out.stat().st_mode & 0o777) == "0o600"  # 0644 before issue 32: files vastprobe makes are 0600


def test_append_keeps_mode_and_follows_the_users_own_link(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "known_hosts"
    real.parent.mkdir()
    real.write_text("a ssh-ed25519 AAAA")  # no trailing newline
    real.chmod(0o600)
    link = tmp_path / "known_hosts"
    link.symlink_to(real)
    fileio.append_line(link, "b ssh-ed25519 BBBB\n")
    assert link.is_symlink() and real.read_text() == "a ssh-ed25519 AAAA\nb ssh-ed25519 BBBB\n"
    assert oct(real.stat().st_mode & 0o777) == "0o600"


APPENDER = """
import sys
from vastprobe.fileio import append_line
for i in range(int(sys.argv[2])):
    append_line(sys.argv[1], f"host-{sys.argv[3]}-{i} ssh-ed25519 AAAA\\n")
"""


def test_concurrent_appends_keep_every_line(tmp_path: Path) -> None:
    """Two sweeps (or a sweep and ssh) adding hosts at once: a rewrite-and-rename drops the lines
    the other one added in between; appending keeps them all."""
    import subprocess
    import sys

    kh = tmp_path / "known_hosts"
    kh.write_text("old ssh-ed25519 AAAA\n")
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(kh), "300", name]) for name in ("a", "b", "c")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    lines = kh.read_text().splitlines()
    assert len(lines) == 901 and len(set(lines)) == 901 and lines[0] == "old ssh-ed25519 AAAA"


def test_append_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "known_hosts"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        fileio.append_line(fifo, "x ssh-ed25519 AAAA\n")


def test_lone_surrogates_never_reach_a_file(tmp_path: Path) -> None:
    with pytest.raises(UnicodeEncodeError):
        fileio.write_atomic(tmp_path / "x", "target=\udc80\n")
    assert list(tmp_path.iterdir()) == []  # failed before any file was made


def test_collect_writes_nothing_through_planted_links(tmp_path: Path) -> None:
    """The issue's case, end to end: the old fixed `<out>.tmp` and a link at the output itself."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "c.json"
    (tmp_path / "c.json.tmp").symlink_to(victim)
    out.symlink_to(victim)
    r = subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--sample", "0", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and json.loads(out.read_text())["schema"] == "vastprobe.capture/1"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and p.name != "c.json.tmp"]
    assert leftovers == []


def test_no_module_but_fileio_opens_files_for_writing() -> None:
    """A conformance guard: a new writer must go through write_atomic."""
    pattern = re.compile(
        r"write_text\(|write_bytes\(|open\([^)]*['\"][wax]b?\+?['\"]|os\.open\(|mkstemp|NamedTemporaryFile|os\.replace\("
    )
    offenders = []
    for path in (REPO / "vastprobe").rglob("*.py"):
        if path.name == "fileio.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and "os.devnull" not in line:
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []


def test_sweep_output_and_prom_are_written_with_write_atomic(tmp_path: Path) -> None:
    out, prom = tmp_path / "last.json", tmp_path / "v.prom"
    env = {**os.environ, "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "vastprobe", "sweep", "-w", "local", "--sample", "0", "--json",
                        "--output", str(out), "--prom", str(prom)], capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    assert json.loads(out.read_text())["hosts"][0]["target"] == "local"
    assert "vastprobe_host_up" in prom.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.json", "v.prom"]  # no temporaries left


# ---------------------------------------------------------------- issue 32, items 7 and 9: devices
# and FIFOs are written in place, never replaced; files vastprobe makes are 0600

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mknod of a character device)")


def vastprobe(*args: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "vastprobe", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


def null_device(path: Path) -> os.stat_result:
    """A character device node of our own that is the machine's /dev/null (1, 3), so the test never
    risks the real one: what vastprobe does to it, it would have done to /dev/null."""
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    st = os.stat(path)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    return st


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".tmp"))


@needs_root
def test_collect_into_a_device_leaves_it_a_device(tmp_path: Path) -> None:
    """`collect -o /dev/null` (as root) renamed a temporary file over the device: /dev/null became
    a regular file holding a capture, for the whole machine. Now the device is written in place."""
    node = tmp_path / "null"
    before = null_device(node)
    r = vastprobe("collect", "local", "--sample", "0", "-o", str(node), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr  # docs/output.md: collect exits 0 when the target was probed
    after = os.lstat(node)
    assert stat.S_ISCHR(after.st_mode), oct(after.st_mode)
    assert (after.st_ino, after.st_rdev, stat.S_IMODE(after.st_mode)) == (
        before.st_ino, before.st_rdev, stat.S_IMODE(before.st_mode))  # fmt: skip
    assert os.path.getsize(node) == 0 and leftovers(tmp_path) == []


@needs_root
def test_sweep_writes_a_fifo_and_a_device_in_place(tmp_path: Path) -> None:
    """`--prom` into a named pipe reaches the reader, and the pipe stays one; `--output` into a
    device leaves the device. Both were replaced by regular files (the reader never got a byte)."""
    fifo, node = tmp_path / "prom.fifo", tmp_path / "out"
    os.mkfifo(fifo)
    null_device(node)
    got: list[bytes] = []

    def drain() -> None:
        with open(fifo, "rb") as f:  # blocks until a writer opens the pipe
            got.append(f.read())

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    r = vastprobe("sweep", "-w", "local", "--sample", "0", "--json", "--output", str(node), "--prom", str(fifo),
                  tmp_path=tmp_path)  # fmt: skip
    if reader.is_alive() and stat.S_ISFIFO(os.lstat(fifo).st_mode):  # nobody wrote: let the reader go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    reader.join(10)
    assert r.returncode in (0, 1), r.stderr  # 0 nothing stalled, 1 a stall on this shared machine: findings
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and stat.S_ISCHR(os.lstat(node).st_mode)
    assert got and b"vastprobe_host_up{" in got[0], got
    assert leftovers(tmp_path) == []


def test_an_output_through_proc_self_fd_goes_to_stdout(tmp_path: Path) -> None:
    """`/proc/self/fd/1` (what /dev/stdout and /dev/fd/1 lead to) is written in place: the capture
    comes out on stdout. Before, a temporary file was made in /proc/self/fd (exit 4)."""
    r = vastprobe("collect", "local", "--sample", "0", "-o", "/proc/self/fd/1", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"] == "vastprobe.capture/1"


def test_a_link_planted_at_the_output_never_leads_to_a_device(tmp_path: Path) -> None:
    """In place is for what is at the name itself (or in /dev, /proc): a symbolic link elsewhere is
    replaced as before, so a link planted in a shared directory cannot steer a write into a device."""
    fifo = tmp_path / "victim.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "v.prom"
    out.symlink_to(fifo)
    fileio.write_atomic(out, "metrics\n")
    assert not out.is_symlink() and out.read_text() == "metrics\n" and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_files_vastprobe_makes_are_0600(tmp_path: Path) -> None:
    """A capture and a report can hold command lines (and their secrets): each is made 0600, as the
    history is; one replaced over an existing 0644 file is 0600 too. They were 0644. The Prometheus
    textfile stays 0644: node_exporter reads it as another user, and it holds no argv or path."""
    cap = tmp_path / "c.json"
    r = vastprobe("collect", "local", "--sample", "0", "-o", str(cap), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    out, prom = tmp_path / "last.json", tmp_path / "v.prom"
    out.write_text("old\n")
    out.chmod(0o644)  # an existing report from before: replaced, and 0600 from now on
    r = vastprobe("sweep", "-w", "local", "--sample", "0", "--json", "--output", str(out), "--prom", str(prom),
                  tmp_path=tmp_path)  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    modes = {p.name: oct(stat.S_IMODE(os.lstat(p).st_mode)) for p in (cap, out, prom)}
    assert modes == {"c.json": "0o600", "last.json": "0o600", "v.prom": "0o644"}
    assert json.loads(out.read_text())["hosts"][0]["target"] == "local"


def test_a_directory_or_a_socket_is_still_a_usage_error(tmp_path: Path) -> None:
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        for bad, says in ((tmp_path, "is a directory"), (sock_path, "is a socket")):
            r = vastprobe("collect", "local", "--sample", "0", "-o", str(bad), tmp_path=tmp_path)
            assert r.returncode == 2 and says in r.stderr, (r.returncode, r.stderr)


#: A /dev of our own in a private mount namespace (a tmpfs with the links and /dev/null a run
#: needs): what vastprobe does to its /dev/stdout, it would have done to the machine's.
PRIVATE_DEV = ("mount -t tmpfs -o mode=755 none /dev && ln -s /proc/self/fd /dev/fd && "
               "ln -s /proc/self/fd/1 /dev/stdout && ln -s /proc/self/fd/2 /dev/stderr && mknod -m 666 /dev/null c 1 3")  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
@pytest.mark.parametrize("stdout", ["pipe", "file"])
def test_prom_to_dev_stdout_writes_stdout_and_leaves_the_link(tmp_path: Path, stdout: str) -> None:
    """The issue's `--prom /dev/stdout`: the textfile goes where stdout goes (a pipe, or after the
    report in a redirected file), and /dev/stdout is still the system's link afterwards. It was
    renamed over: /dev/stdout became a regular file for the whole machine."""
    out = tmp_path / "stdout.txt"
    run = '"$@"' if stdout == "pipe" else f'"$@" >{out}'
    check = (
        'rc=$?; [ -L /dev/stdout ] && [ "$(readlink /dev/stdout)" = /proc/self/fd/1 ] && echo LINK-KEPT >&2; exit $rc'
    )
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"{PRIVATE_DEV} && {run}; {check}", "sh", sys.executable, "-m",
                        "vastprobe", "sweep", "-w", "local", "--sample", "0", "--json", "--prom", "/dev/stdout"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})  # fmt: skip
    assert r.returncode in (0, 1), r.stderr  # 0 nothing stalled, 1 a stall on this shared machine: findings
    assert "LINK-KEPT" in r.stderr, r.stderr
    text = r.stdout if stdout == "pipe" else out.read_text()
    report, _, prom = text.partition("# HELP ")
    assert json.loads(report)["hosts"][0]["target"] == "local"  # the report first, whole
    assert "vastprobe_host_up{" in prom, text[-500:]
