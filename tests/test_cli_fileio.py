"""Every file vastprobe writes goes through fileio.write_atomic: a symlink planted at any name it
might use as a temporary file is never followed, readers never see half a file, and no other
module opens a file for writing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO
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
    assert oct(out.stat().st_mode & 0o777) == "0o644"


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
