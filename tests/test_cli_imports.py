"""Import only what a command needs: no rich on the JSON path, no asyncssh for local work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


def imported(*args: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vastprobe", *args], capture_output=True, text=True, timeout=120
    )
    return {m.group(1) for m in re.finditer(r"\|\s+([\w.]+)\s*$", r.stderr, re.M)}


@pytest.mark.parametrize(
    "args",
    [("diagnose", "local", "--format", "json", "--sample", "0"), ("rules", "--format", "json"), ("probe-script",)],
)
def test_json_and_local_paths_stay_light(args: tuple[str, ...]) -> None:
    mods = imported(*args)
    assert "vastprobe.cli" in mods  # the measurement saw the run at all
    assert "asyncssh" not in mods and "rich" not in mods
    assert "ClusterShell" not in mods  # host sets are folded for the sweep summary alone
    assert "vastprobe.completion" not in mods  # shell completion: only when a shell asks


def test_analyze_stays_light(tmp_path: Path) -> None:
    cap = tmp_path / "c.json"
    subprocess.run(
        [sys.executable, "-m", "vastprobe", "collect", "local", "-o", str(cap), "--sample", "0"],
        check=True,
        capture_output=True,
    )
    mods = imported("analyze", str(cap), "--format", "json")
    assert "asyncssh" not in mods and "rich" not in mods


def test_the_measurement_can_see_rich() -> None:
    assert "rich" in imported("diagnose", "local", "--format", "table", "--sample", "0")


def test_ssh_path_spawns_nothing_for_an_absent_liboqs(tmp_path: Path) -> None:
    """asyncssh's import asks ctypes for liboqs under two names; each miss runs `ldconfig -p`, then
    gcc and ld when they exist. With no liboqs where the loader looks, vastprobe answers for it.
    asyncssh's lookup of nettle (UMAC) is skipped with the module (ssh/asyncssh_parts.py)."""
    import shutil

    from vastprobe.transport.ssh.liboqs import liboqs_may_be_installed

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    if liboqs_may_be_installed():
        pytest.skip("liboqs is installed here: the real lookup is the right one")
    trace = tmp_path / "trace"
    subprocess.run(
        ["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=execve", sys.executable, "-c",
         "import vastprobe.transport.ssh.run"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    execs = [line for line in trace.read_text().splitlines() if "execve(" in line and "ENOENT" not in line]
    assert not [e for e in execs if "oqs" in e or "gcc" in e or "collect2" in e], execs
    assert not [e for e in execs if "ldconfig" in e], execs  # nettle (UMAC) is left out too


def test_liboqs_lookup_is_left_alone_when_a_liboqs_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes.util

    from vastprobe.transport.ssh.liboqs import liboqs_may_be_installed, skip_absent_liboqs_lookup

    real = ctypes.util.find_library
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    if not liboqs_may_be_installed():
        with skip_absent_liboqs_lookup():
            assert ctypes.util.find_library("oqs") is None
            assert ctypes.util.find_library("c") == real("c")  # other names still asked
        assert ctypes.util.find_library is real
    (tmp_path / "liboqs.so.5").write_bytes(b"")
    assert liboqs_may_be_installed()
    with skip_absent_liboqs_lookup():
        assert ctypes.util.find_library is real


def test_asyncssh_starts_without_the_parts_no_openssh_server_uses() -> None:
    code = (
        "import sys, vastprobe.transport.ssh.run as s, asyncssh.mac as mac; "
        "print(sorted(n for n in ('cryptography.x509', 'asyncssh.crypto.x509', 'asyncssh.crypto.umac') "
        "if n in sys.modules), b'hmac-sha2-256-etm@openssh.com' in mac.get_mac_algs(), "
        "sys.modules.get('asyncssh.crypto.x509', 0) is None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "True", "False"]  # nothing left behind that blocks a later import


def test_asyncssh_is_imported_whole_when_it_needs_a_part_left_out() -> None:
    """A future asyncssh that needs a part left out must still start: the import is retried whole."""
    code = (
        "import sys, vastprobe.transport.ssh.asyncssh_parts as p; "
        "p.UNUSED = (*p.UNUSED, 'asyncssh.connection'); p.import_asyncssh(); "
        "import asyncssh; print(asyncssh.connect.__module__, 'asyncssh.crypto.umac' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["asyncssh.connection", "True"]


def test_completion_answers_without_rich_or_asyncssh(tmp_path: Path) -> None:
    """A TAB runs vastprobe once: commands, options and ssh_config aliases come without the heavy
    parts (rich, asyncssh, the parsers)."""
    import os

    env = {**os.environ, "HOME": str(tmp_path), "_VASTPROBE_COMPLETE": "bash_complete",
           "COMP_WORDS": "vastprobe diagnose --sn", "COMP_CWORD": "2"}  # fmt: skip
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "vastprobe"], capture_output=True, text=True,
                       timeout=120, env=env)  # fmt: skip
    assert r.stdout.splitlines() == ["plain,--snapshot"], r.stdout
    mods = {m.group(1) for m in re.finditer(r"\|\s+([\w.]+)\s*$", r.stderr, re.M)}
    assert "vastprobe.completion" in mods  # the measurement saw it
    assert not {"rich", "asyncssh", "vastprobe.parsers", "vastprobe.rules"} & mods
