"""PyTorch flight recorder dumps are pickles, and a pickle is a program: vastprobe's reader is an
interpreter of the opcodes that build plain data and nothing else. Real dumps (recorded from real
PyTorch gloo ranks, fixtures/flight-recorder/gloo-fifo) read the same as pickle would read them;
hostile ones are refused without executing anything or allocating what they claim."""

from __future__ import annotations

import base64
import functools
import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import mount_fuse, threaded_sleeper
from tests.paths import REPO
from tests.sshd import keygen, start_sshd
from vastprobe.analysis.flight import compare
from vastprobe.parsers.flight_recorder import Refused, load_plain, parse_fr_section, read_dump

RECORDED = REPO / "fixtures" / "flight-recorder" / "gloo-fifo"


def dumps() -> dict[int, bytes]:
    return {r: (RECORDED / f"nccl_trace_rank_{r}").read_bytes() for r in range(3)}


def test_real_dumps_read_as_pickle_reads_them_and_name_the_rank_behind() -> None:
    for data in dumps().values():
        assert load_plain(data) == pickle.loads(data)  # the test may use pickle; vastprobe never does
    read = [read_dump(f"/tmp/nccl_trace_rank_{r}", data) for r, data in dumps().items()]
    assert [d.rank for d in read] == [0, 1, 2] and all(d.refused is None for d in read)
    assert [d.last_entered("0") for d in read] == [4, 3, 4]
    (stuck,) = compare(read)
    assert (stuck.last_all, stuck.next_seq, stuck.entered, stuck.missing) == (3, 4, (0, 2), (1,))
    assert stuck.op == "gloo:all_reduce" and stuck.sizes == "[[65536]]"


def test_a_pickle_that_calls_a_function_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    classic = f"cos\nsystem\n(S'touch {canary}'\ntR.".encode()  # protocol 0: GLOBAL, REDUCE

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {canary}",))

    modern = pickle.dumps(Evil(), protocol=4)  # STACK_GLOBAL
    for payload, op in ((classic, "GLOBAL"), (modern, "STACK_GLOBAL")):
        with pytest.raises(Refused, match=op):
            load_plain(payload)
        d = read_dump("/tmp/nccl_trace_rank_0", payload)
        assert d.refused and d.collectives == ()
    assert not canary.exists()


def test_a_claimed_gigabyte_is_refused_without_allocating_it() -> None:
    payload = b"\x80\x04\x8d" + struct.pack("<Q", 1 << 30) + b"abc."  # BINUNICODE8 of 1 GiB, 3 bytes there
    with pytest.raises(Refused, match="runs past the end"):
        load_plain(payload)
    with pytest.raises(Refused, match="over"):
        load_plain(b"\x80\x04" + b"N" * (2 << 20))


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(Refused, match="nested deeper"):
        load_plain(b"\x80\x02" + b"(" * 100 + b"t" * 100 + b".")  # MARKs
    with pytest.raises(Refused, match="nested deeper"):
        load_plain(b"\x80\x02" + b"]" * 1000 + b"a" * 999 + b".")  # lists appended into lists


DEEP_KEY = b"\x80\x04}" + b"N" + b"\x85" * 1_000_000 + b"Ns."  # {((((None,),),)...): None}, a million deep
DEEP_VALUE = b"\x80\x04}N" + b"N" + b"\x85" * 500_000 + b"s."  # {None: ((((None,),),)...)}
SELF = b"\x80\x04]\x94h\x00a."  # L = []; L.append(L) as pickle writes it: a list that holds itself


def test_tuples_nested_without_marks_are_refused_before_anything_hashes_them() -> None:
    """TUPLE1-3 nest without a MARK: a dict key a million tuples deep crashed the interpreter in C
    (SIGSEGV, exit 139: diagnose, collect and a whole sweep died) when the dict hashed it."""
    with pytest.raises(Refused, match="nested deeper"):
        load_plain(DEEP_KEY)
    with pytest.raises(Refused, match="nested deeper"):
        load_plain(DEEP_VALUE)
    assert read_dump("/tmp/nccl_trace_rank_0", DEEP_KEY).refused
    assert load_plain(b"\x80\x04}N" + b"N" + b"\x85" * 60 + b"s.") == {
        None: functools.reduce(lambda v, _: (v,), range(60), None)
    }


def test_a_value_that_holds_itself_is_refused() -> None:
    with pytest.raises(Refused, match="taken from the memo"):
        load_plain(SELF)
    shared = [1]
    assert pickle.dumps([shared, shared], protocol=4).count(b"h") >= 1  # the second one is a memo fetch
    assert load_plain(pickle.dumps([shared, shared], protocol=4)) == [[1], [1]]
    loop: list = []
    loop.append(loop)
    assert pickle.dumps(loop, protocol=4).endswith(SELF[2:])


@pytest.fixture
def crafted_dumps(tmp_path: Path) -> Iterator[Path]:
    """A process naming a dump prefix (as a rank does) where a tenant planted the crafted dumps."""
    prefix = tmp_path / "nccl_trace_rank_"
    for rank, payload in enumerate((DEEP_KEY, DEEP_VALUE, SELF)):
        Path(f"{prefix}{rank}").write_bytes(payload)
    holder = threaded_sleeper(TORCH_NCCL_DEBUG_INFO_TEMP_FILE=str(prefix))
    try:
        yield prefix
    finally:
        holder.kill()
        holder.wait()


def test_crafted_dumps_never_crash_diagnose_or_a_sweep(crafted_dumps: Path, tmp_path: Path) -> None:
    prefix = crafted_dumps
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--sample", "0", "--format", "json",
                        "--snapshot"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode in (0, 1), (r.returncode, r.stderr[-500:])  # never 139 (SIGSEGV)
    host = json.loads(r.stdout)["hosts"][0]
    ours = {d["path"]: d["refused"] for d in host["snapshot"]["flight_dumps"] if d["path"].startswith(str(prefix))}
    assert set(ours) == {f"{prefix}{n}" for n in range(3)} and all(ours.values()), ours
    planted = [f for f in host["findings"] if str(prefix) in f["summary"]]
    assert all(f["severity"] == "info" for f in planted), planted  # a tenant's file changes no verdict
    key = keygen(tmp_path / "user")
    sshd = start_sshd(tmp_path / "sshd", user_key=key, addresses=["127.0.0.1", "127.0.0.2", "127.0.0.3"])
    try:
        targets = "".join(f"root@127.0.0.{i}:{sshd.port}\n" for i in (1, 2, 3))
        r = subprocess.run([sys.executable, "-m", "vastprobe", "sweep", "-", "--format", "ndjson", "--sample", "0",
                            "-i", str(key), "--known-hosts", str(sshd.known_hosts), "--no-history"], input=targets,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    finally:
        sshd.stop()
    assert r.returncode in (0, 1), (r.returncode, r.stderr[-500:])
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    rows = [x for x in lines if "target" in x]
    assert sorted(x["status"] for x in rows) == ["ok", "ok", "ok"], [x.get("error") for x in rows]
    assert lines[-1]["summary"]["hosts"] == 3


def test_the_section_refuses_what_is_not_base64_and_keeps_the_rest() -> None:
    good = base64.b64encode(dumps()[0]).decode()
    text = f"@fr /tmp/nccl_trace_rank_0\n{good[:76]}\n{good[76:]}\n@fr /tmp/nccl_trace_rank_1\n!!not base64!!\n"
    a, b = parse_fr_section(text)
    assert a.refused is None and a.rank == 0 and len(a.collectives) == 4
    assert b.refused == "not base64" and b.collectives == ()
    assert a.mtime is None  # a probe before the time (format 3) sent `@fr PATH`
    (c,) = parse_fr_section(f"@fr 1764820800 /tmp/my job/fr_rank_3\n{good}\n")
    assert (c.mtime, c.path, c.rank, c.prefix) == (1764820800, "/tmp/my job/fr_rank_3", 3, "/tmp/my job/fr_rank_")
    (d,) = parse_fr_section(f"@fr - /tmp/fr_rank_3\n{good}\n")
    assert d.mtime is None and d.path == "/tmp/fr_rank_3"


def test_the_probe_reads_dumps_but_no_link_and_no_file_that_is_not_a_pickle(tmp_path: Path) -> None:
    """A rank names its dump prefix in its environment; next to its real dump, a link to /etc/shadow
    and a text file are planted under the same prefix: neither is read (nor put in the output)."""
    prefix = tmp_path / "fr_rank_"
    Path(f"{prefix}0").write_bytes(dumps()[0])
    os.symlink("/etc/shadow", f"{prefix}1")
    Path(f"{prefix}2").write_text("root:$6$not-a-pickle\n")
    holder = threaded_sleeper(TORCH_FR_DUMP_TEMP_FILE=str(prefix))
    try:
        cap = tmp_path / "c.json"
        subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--sample", "0", "-o", str(cap)],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        doc = json.loads(cap.read_text())
        raw = base64.b64decode(doc["raw_b64"])
        assert f" {prefix}0\n".encode() in raw  # `@fr MTIME PATH`
        assert f" {prefix}1\n".encode() not in raw and f" {prefix}2\n".encode() not in raw
        assert b"not-a-pickle" not in raw and base64.b64encode(b"root:$6$")[:8] not in raw
        ours = [d for d in doc["snapshot"]["flight_dumps"] if d["path"].startswith(str(prefix))]
        assert [d["rank"] for d in ours] == [0] and ours[0]["refused"] is None
        assert ours[0]["mtime"] == int(os.stat(f"{prefix}0").st_mtime)
    finally:
        holder.kill()
        holder.wait()


def test_the_reader_holds_no_pickle_import() -> None:
    """Static guard: the reader module never imports pickle (the interpreter is its own)."""
    src = (REPO / "vastprobe" / "parsers" / "flight_recorder.py").read_text()
    assert "import pickle" not in src and "pickle.load" not in src


def test_a_dump_prefix_on_a_dead_fuse_mount_costs_seconds_not_the_run(tmp_path: Path, reap) -> None:
    """A rank names a dump prefix on a FUSE mount whose server is stopped: listing it puts whoever
    does in D state. The probe's own shell did (`diagnose local --timeout 40` ran 608 s, deaf to
    SIGTERM, the local transport waiting on it unbounded); now a guarded child does and is
    abandoned, and the report says the section did not finish."""
    mnt = tmp_path / "mnt"
    server = mount_fuse(reap, mnt)
    holder = threaded_sleeper(TORCH_FR_DUMP_TEMP_FILE=f"{mnt}/trace_rank_")
    reap.append(holder)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(holder.pid),
                            "--sample", "0", "--timeout", "40", "--format", "json"],
                           capture_output=True, text=True, timeout=90)  # fmt: skip
        took = time.monotonic() - t0
        host = json.loads(r.stdout)["hosts"][0]
        # the guarded child is abandoned after its bound (15 s for the dumps); the probe goes on and
        # finishes (before: its own shell waited on the mount until the deadline, unknown, exit 3)
        assert took < 25 and r.returncode == 0 and host["status"] == "ok", (took, r.returncode, host["error"])
        details = [e["detail"] for f in host["findings"] for e in f["evidence"]]
        assert "section not finished: fr" in details, details
    finally:
        os.kill(server.pid, signal.SIGCONT)
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_no_more_than_64_dump_names_are_looked_at(tmp_path: Path) -> None:
    """20,000 empty files named like dumps (any tenant can make them) cost the deadline, one fork
    each; now 64 names are looked at and the rest said to be unread."""
    prefix = tmp_path / "trace_rank_"
    for n in range(20_000):
        Path(f"{prefix}{n}").touch()
    holder = threaded_sleeper(TORCH_FR_DUMP_TEMP_FILE=str(prefix))
    try:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--pid", str(holder.pid),
                            "--sample", "0", "--format", "json", "--snapshot"],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        took = time.monotonic() - t0
        host = json.loads(r.stdout)["hosts"][0]
        assert host["status"] == "ok" and r.returncode == 0 and took < 30, (took, host["error"])
        cut = [d for d in host["snapshot"]["flight_dumps"] if d["path"] == str(prefix)]
        assert cut and "the rest were not read" in cut[0]["refused"], host["snapshot"]["flight_dumps"]
    finally:
        holder.kill()
        holder.wait()


def test_a_dump_the_sections_end_cut_through_is_cut_short_not_refused() -> None:
    """Under load the probe's deadline can end the `fr` section inside a dump's base64: that dump
    reads "cut short" (no sign of what its writer wrote), the whole ones before it are read, and a
    section that ended whole still calls bad base64 what it is."""
    good = base64.b64encode(dumps()[0]).decode()
    for at in (len(good) // 2, len(good) // 2 + 1, len(good) - 4):  # in a quad, between quads, the pickle's end
        text = f"@fr 1764820800 /tmp/nccl_trace_rank_0\n{good}\n@fr 1764820801 /tmp/nccl_trace_rank_1\n{good[:at]}"
        a, b = parse_fr_section(text, cut=True)
        assert a.refused is None and len(a.collectives) == 4 and not a.cut
        assert b.cut and b.refused is not None and b.refused.startswith("cut short") and b.collectives == ()
        assert (b.path, b.mtime) == ("/tmp/nccl_trace_rank_1", 1764820801)
        (whole,) = parse_fr_section(f"@fr - /tmp/nccl_trace_rank_1\n{good[:at]}")
        assert not whole.cut and whole.refused is not None and not whole.refused.startswith("cut short")
    (last,) = parse_fr_section(f"@fr - /tmp/nccl_trace_rank_2\n{good}\n", cut=True)  # cut after it: whole
    assert last.refused is None and not last.cut and len(last.collectives) == 4
