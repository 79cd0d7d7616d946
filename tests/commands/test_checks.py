"""docs/cli-errors.md is a contract: every row runs here as written, with the exit code and the
message it documents. Plus vastprobe's own failure (exit 4) and the inputs that must be refused
before anything is contacted."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.paths import REPO

DOC = REPO / "docs" / "cli-errors.md"
DOCUMENTED_EXITS = {0, 1, 2, 3, 4, 130}
ROW = re.compile(r"^\| (\d+) \| `(.+)` \| (\d+) \| `(.+)` \|$")


def rows() -> list[tuple[int, str, int, str]]:
    out = []
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2), int(m.group(3)), m.group(4)))
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    (d / "dir").mkdir()
    (d / "bin").write_bytes(bytes(range(256)) * 16)
    (d / "txt").write_text("hello, not json\n")
    (d / "other.json").write_text('{"schema": "x"}\n')
    (d / "badcfg").write_text("Port abc\n")
    (d / "bad.json").write_text('[\n {"id": 1,\n  "ssh_host" "x"}\n]\n')
    (d / "bad-list").write_text("# gpu hosts\nroot@gpu1:99999\n")
    (d / "vast-bad.json").write_text(
        json.dumps([{"id": 7, "actual_status": "running", "ssh_host": "ssh4.vast.ai", "ssh_port": "abc"}])
    )
    cap = d / "cap.json"
    subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--sample", "0", "-o", str(cap)],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    doc = json.loads(cap.read_text())
    raw = bytearray(base64.b64decode(doc["raw_b64"]))
    raw[100] ^= 1
    doc["raw_b64"] = base64.b64encode(bytes(raw)).decode()
    (d / "flipped.json").write_text(json.dumps(doc))
    # a history with one host (an exited vast.ai instance: nothing is contacted), written before any
    # row runs: the rows run at once, and one that reads a history must not wait for one that writes it
    (d / "exited.json").write_text(json.dumps([{"id": 8, "actual_status": "exited", "ssh_host": "h", "ssh_port": 22}]))
    subprocess.run([sys.executable, "-m", "vastprobe", "sweep", str(d / "exited.json"), "--history", str(d / "hist.sqlite"),
                    "--json"], check=True, capture_output=True, timeout=120)  # fmt: skip
    huge = "9" * 4301  # one digit past Python's int-str conversion limit
    (d / "vast-huge.json").write_text(
        f'[{{"id": 7, "actual_status": "running", "ssh_host": "ssh4.vast.ai", "ssh_port": {huge}}}]'
    )
    good = json.loads(cap.read_text())
    (d / "huge-cap.json").write_text(json.dumps(good).replace('"captured_at": ', f'"captured_at": {huge}, "x": ', 1))
    return {
        "DIR": str(d / "dir"),
        "BIN": str(d / "bin"),
        "TXT": str(d / "txt"),
        "OTHERJSON": str(d / "other.json"),
        "BADCFG": str(d / "badcfg"),
        "BADJSON": str(d / "bad.json"),
        "BADLIST": str(d / "bad-list"),
        "VASTBAD": str(d / "vast-bad.json"),
        "FLIPPED": str(d / "flipped.json"),
        "HIST": str(d / "hist.sqlite"),
        "VASTHUGE": str(d / "vast-huge.json"),
        "HUGECAP": str(d / "huge-cap.json"),
        "CWD": str(d),
    }


def run_row(command: str, files: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    script = f'vastprobe() {{ {shlex.quote(sys.executable)} -m vastprobe "$@"; }}\n{command}\n'
    env = {**os.environ, **files, "PYTHONPATH": str(REPO), "HOME": files["CWD"]}
    env.pop("SSH_AUTH_SOCK", None)
    return subprocess.run(["bash", "-c", script], capture_output=True, timeout=120, env=env, cwd=files["CWD"],
                          stdin=subprocess.DEVNULL)  # fmt: skip


def test_the_table_has_at_least_forty_bad_inputs() -> None:
    table = rows()
    assert len(table) >= 40
    assert [n for n, *_ in table] == list(range(1, len(table) + 1))
    assert all(code in DOCUMENTED_EXITS for _, _, code, _ in table)


@pytest.mark.slow
def test_every_row_exits_and_says_what_the_table_documents(files: dict[str, str]) -> None:
    table = rows()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda row: run_row(row[1], files), table))
    problems = []
    for (n, command, code, message), r in zip(table, results, strict=True):
        out, err = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
        expected = message
        for name, value in files.items():
            expected = expected.replace(f"${name}", value)
        why = []
        if r.returncode not in DOCUMENTED_EXITS:
            why.append(f"undocumented exit {r.returncode}")
        if r.returncode != code:
            why.append(f"exit {r.returncode}, documented {code}")
        if "Traceback" in out + err:
            why.append("a traceback")
        if "\x1b" in err or "\u202e" in err:
            why.append("a raw escape on stderr")
        if expected not in out + err:
            why.append(f"message not found: {expected!r}")
        if code == 2 and (out or len(err.strip().splitlines()) != 1):
            why.append("a usage error must be one line on stderr and nothing on stdout")
        if why:
            problems.append(f"row {n} `{command}`: {'; '.join(why)}\n  stdout: {out[:300]!r}\n  stderr: {err[:300]!r}")
    assert not problems, "\n".join(problems)


def test_internal_failure_is_one_line_and_exit_4_traceback_with_debug(tmp_path: Path) -> None:
    """Force a bug (a rule lookup that raises) in a real process: exit 4, one line, no traceback;
    --debug (anywhere on the line) or VASTPROBE_DEBUG=1 adds the traceback."""
    code = (
        "import sys, vastprobe.rules as r\n"
        "def boom(name):\n    raise RuntimeError('simulated bug\\nsecond line')\n"
        "r.find_rule = boom\n"
        "from vastprobe.cli import main\n"
        "sys.argv = ['vastprobe', *sys.argv[1:]]\n"
        "main()\n"
    )
    base = [sys.executable, "-c", code]
    r = subprocess.run([*base, "rules", "VP102"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 4
    assert r.stderr.splitlines() == [
        "vastprobe: internal error: RuntimeError: simulated bug (run with --debug or VASTPROBE_DEBUG=1 for the traceback)"
    ]
    for args, env in (
        (["rules", "VP102", "--debug"], {}),
        (["--debug", "rules", "VP102"], {}),
        (["rules", "VP102"], {"VASTPROBE_DEBUG": "1"}),
    ):
        d = subprocess.run([*base, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **env})
        assert d.returncode == 4 and "Traceback" in d.stderr and "RuntimeError: simulated bug" in d.stderr, args


def test_prom_into_a_missing_directory_exits_2_at_once_before_any_connection() -> None:
    """The issue's case: the sweep used to run in full, then crash writing the textfile."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        import resource

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([sys.executable, "-m", "vastprobe", "sweep", "-w", f"root@127.0.0.1:{port}",
                            "--prom", "/nonexistent/x.prom"], capture_output=True, text=True, timeout=60)  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU seconds, not wall: on a machine loaded by other suites the start alone took 2 s of wall
        elapsed = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr.strip() == (
            "vastprobe sweep: Invalid value for '--prom': /nonexistent: no such directory (see vastprobe sweep -h)"
        )
        assert elapsed < 1.0, elapsed
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected


def test_node_set_bound_is_checked_before_anything_is_allocated() -> None:
    """`gpu[0-99999999]` used to build 10^8 strings first: now refused in well under a second,
    with a small peak RSS."""
    import resource

    r = subprocess.run(
        [sys.executable, "-c",
         "import resource, sys\nfrom vastprobe.targets import expand_nodeset, InventoryError\n"
         "try:\n    expand_nodeset('gpu[0-99999999],n[0-9999][0-9999]')\nexcept InventoryError as e:\n    print(e)\n"
         "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    lines = r.stdout.splitlines()
    assert "expands to more than 100000 targets" in lines[0]
    # KiB, this process's own peak (VmHWM; ru_maxrss also holds the peak of the pytest process that
    # spawned it, carried over by vfork and exec): the interpreter alone, not 10^8 strings
    assert int(lines[1]) < 100_000
    del resource


@pytest.mark.parametrize("cmd", ["", "diagnose", "sweep", "collect", "analyze", "rules", "probe-script", "history"])
def test_help_at_80_columns_cuts_nothing(cmd: str) -> None:
    """Rich cuts a word longer than its column with an ellipsis (the --history default was)."""
    r = subprocess.run([sys.executable, "-m", "vastprobe", *cmd.split(), "-h"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "COLUMNS": "80"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert "…" not in r.stdout, [line for line in r.stdout.splitlines() if "…" in line]


def test_help_everywhere_with_examples_and_exit_codes() -> None:
    for cmd in ("diagnose", "sweep", "collect", "analyze", "rules", "probe-script"):
        r = subprocess.run([sys.executable, "-m", "vastprobe", cmd, "-h"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "COLUMNS": "200"})  # fmt: skip
        assert r.returncode == 0, (cmd, r.stderr)
        assert "Examples" in r.stdout and r.stdout.count("vastprobe " + cmd) >= 3, cmd
        codes = r.stdout[r.stdout.index("Exit codes") :]
        if cmd in ("rules", "probe-script"):  # they diagnose nothing: no stall, no unprobed target
            assert "stalled" not in codes and "0 done" in codes, (cmd, codes)
        else:
            assert "130 interrupted" in codes, cmd
        assert "{" not in r.stdout.split("\n", 3)[1], cmd  # the usage line: TARGET..., not {targets}...
    d = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "-h"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert "Usage: vastprobe diagnose [OPTIONS] TARGET..." in d.stdout
    assert "SSH (as OpenSSH" in d.stdout and "--known-hosts" in d.stdout.split("SSH (as OpenSSH")[1]
    assert subprocess.run([sys.executable, "-m", "vastprobe", "-h"], capture_output=True).returncode == 0


def test_conflicting_formats_an_empty_inventory_and_a_capitalised_local_are_said(tmp_path: Path) -> None:
    """Found by a helper: `--json --format table` printed JSON silently; an empty inventory file was
    told to give an INVENTORY; `diagnose LOCAL` went to SSH without a word on `local`."""

    def vp(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "vastprobe", *args], capture_output=True, text=True, timeout=60,
                              input=stdin)  # fmt: skip

    r = vp("diagnose", "local", "--json", "--format", "table")
    assert r.returncode == 2 and r.stdout == "" and "--json and --format table ask for two formats" in r.stderr
    empty = tmp_path / "hosts.txt"
    empty.write_text("# nothing yet\n\n")
    r = vp("sweep", str(empty))
    assert r.returncode == 2 and f"no targets in {empty}: it holds no host" in r.stderr, r.stderr
    r = vp("sweep", "-", stdin="")
    assert r.returncode == 2 and "no targets in stdin" in r.stderr, r.stderr
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return  # the name is looked up only in a network namespace of its own: no packet leaves loopback
    r = subprocess.run(["unshare", "--net", sys.executable, "-m", "vastprobe", "diagnose", "LOCAL", "--format", "json",
                        "--connect-timeout", "5"], capture_output=True, text=True, timeout=60)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    assert host["status"] == "unreachable" and host["verdict"] == "unknown" and r.returncode == 3
    assert host["error"].endswith("; for this machine, use `local`"), host["error"]
