"""A distributed job's numbers come from the target's environment: every count they drive is bounded,
and no secret the allow-list's prefixes admit gets out. Each case was found by a helper attacking the
rank code with captures forged from a real recording (fixtures/procfs/torch-gloo-order: two gloo ranks,
pids 33 and 34, in collectives entered in different orders: STALLED, exit 1)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from tests.paths import FIXTURES

SCENE = FIXTURES / "procfs" / "torch-gloo-order"
RANKS = (33, 34)


def forged(env: dict[int, dict[str, str]], target: str = "local") -> dict:
    """A capture of the recording whose ranks' variables are set as `env` says (pid -> name -> value)."""
    text = (SCENE / "probe.out").read_bytes().decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    for pid, names in env.items():
        for name, value in names.items():
            head = f"/proc/{pid}/environ:{name}="
            at = [i for i, line in enumerate(lines) if line.startswith(head)]
            if at:
                lines[at[0]] = head + value
            else:
                lines.insert(
                    next(i for i, line in enumerate(lines) if line.startswith(f"/proc/{pid}/environ:")), head + value
                )
    raw = "\n".join(lines).encode("utf-8", "surrogateescape")
    return {"schema": "vastprobe.capture/1", "target": target, "transport": "ssh", "status": "ok",
            "params": json.loads((SCENE / "params.json").read_text()),
            "raw_b64": base64.b64encode(raw).decode(), "raw_sha256": hashlib.sha256(raw).hexdigest()}  # fmt: skip


def analyze(tmp_path: Path, *captures: dict, args: tuple[str, ...] = ()) -> tuple[int, dict, float, str]:
    cap = tmp_path / "captures.json"
    cap.write_text(json.dumps(list(captures) if len(captures) > 1 else captures[0]))
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", str(cap), "--format", "json", *args],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout), time.monotonic() - t, r.stdout


def test_a_forged_local_world_size_names_no_ranks_gone(tmp_path: Path) -> None:
    """LOCAL_WORLD_SIZE=10^20 took the analysis' memory at 300 MB/s; 10^4 made 9,999 findings "rank 9999 of 2
    is missing" (82 MB of JSON) and the real stall read DEGRADED, exit 0."""
    for size in ("10000", "99999999999999999999"):
        rc, doc, took, out = analyze(tmp_path, forged({33: {"LOCAL_WORLD_SIZE": size}}))
        (host,) = doc["hosts"]
        assert not [f for f in host["findings"] if "missing" in f["summary"] or "gone" in f["summary"]], host
        assert len(out) < 100_000 and took < 60, (len(out), took)
        assert host["verdict"] == "stalled" and rc == 1, host["headline"]


def test_a_forged_world_size_is_not_enumerated(tmp_path: Path) -> None:
    """WORLD_SIZE=10^9 on both ranks: culprit-rank listed every rank not here, took 5.8 GB and failed
    ("MemoryError"); across a sweep's two hosts, 10^7 made 79 MB of JSON and 10^20 ended in MemoryError,
    exit 4."""
    world = {"WORLD_SIZE": "99999999999999999999"}
    rc, doc, took, _out = analyze(tmp_path, forged({33: world, 34: world}))
    (host,) = doc["hosts"]
    assert not [f for f in host["findings"] if "failed" in f["summary"]], host["findings"]
    assert any(
        f["rule"] == "culprit-rank" and "(ranks 2, 3, 4, 5, 6, 7, 8, 9 …)" in f["summary"] for f in host["findings"]
    )
    assert rc in (0, 1) and took < 60
    # a sweep: ranks 0 and 1 on A, 2 and 3 on B, the rendezvous on no loopback address (a multi-host job)
    a = {pid: {**world, "RANK": str(i), "MASTER_ADDR": "10.0.0.1"} for i, pid in enumerate(RANKS)}
    b = {pid: {**world, "RANK": str(i + 2), "MASTER_ADDR": "10.0.0.1"} for i, pid in enumerate(RANKS)}
    rc, doc, took, out = analyze(tmp_path, forged(a, "root@10.0.0.1"), forged(b, "root@10.0.0.2"))
    (job,) = doc["summary"]["jobs"]
    assert job["missing"][:2] == [4, 5] and len(job["missing"]) == 1024, job["missing"][-1]
    assert len(out) < 1_000_000 and took < 60 and rc in (0, 1), (len(out), took)


def test_secret_named_variables_the_allow_list_admits_stay_out(tmp_path: Path) -> None:
    """NCCL_PASSWORD, NCCL_IB_SECRET, TORCH_NCCL_TOKEN: the NCCL_* and TORCH_NCCL_* prefixes admitted them,
    and --snapshot printed their values as they were; then NCCL_PWD and TORCH_NCCL_PW (found by a helper)."""
    secrets = {"NCCL_PASSWORD": "TOPSECRET1", "NCCL_IB_SECRET": "TOPSECRET2", "TORCH_NCCL_TOKEN": "TOPSECRET3",
               "NCCL_PWD": "TOPSECRET6", "TORCH_NCCL_PW": "TOPSECRET7"}  # fmt: skip
    rc, doc, _took, out = analyze(tmp_path, forged({33: secrets}), args=("--snapshot",))
    assert "TOPSECRET" not in out
    assert doc["hosts"][0]["verdict"] == "stalled" and rc == 1


def test_a_token_cut_by_the_probe_leaves_no_part_of_itself(tmp_path: Path) -> None:
    """The probe cuts each variable at 256 characters; an hf_ token past the cut left its first 23
    characters, too short to be told a token, in every output."""
    addr = "x" * 225 + " hf_" + "Q" * 10 + "SECRETTAILZZ" + "W" * 15
    cut = {"MASTER_ADDR": addr[: 256 - len("MASTER_ADDR=")]}  # both ranks: one job's rendezvous
    rc, doc, _took, out = analyze(tmp_path, forged({33: cut, 34: cut}), args=("--snapshot",))
    assert "QQQQ" not in out and "SECRETTAIL" not in out
    env = dict(next(p for p in doc["hosts"][0]["snapshot"]["processes"] if p["pid"] == 33)["env"])
    assert env["MASTER_ADDR"].endswith("x …"), env["MASTER_ADDR"][-20:]
    assert doc["hosts"][0]["verdict"] == "stalled" and rc == 1


def test_a_long_ring_is_walked_once_and_said_in_a_few_names() -> None:
    """A ring of ranks over a sweep's hosts was walked from every rank, once a host: 256 hosts of 8 ranks
    took minutes, and each host's headline listed all 2,048 ranks (26 KB)."""
    from vastprobe.analysis.rank_waits import how_they_wait, waits_among
    from vastprobe.model import JobRank

    n = 20_000
    ranks = [JobRank(i, 0, i + 1, "collective", "waits", waits_on=f"10.0.0.1:{(i + 1) % n}", ends=(f"10.0.0.1:{i}",))
             for i in range(n)]  # fmt: skip
    t = time.monotonic()
    cycle, _sink = waits_among(ranks)
    assert len(cycle) == n + 1 and time.monotonic() - t < 10
    words = how_they_wait(ranks)
    assert words == (
        f"their receives wait on each other in a cycle ({n} ranks), rank 0 <- rank 1 <- rank 2 <- rank 3 <- rank 4 "
        f"<- rank 5 <- … <- rank {n - 1} <- rank 0"
    ), words[:200]
    # a chain ending at one rank (the likeliest holder), as long
    chain = [JobRank(i, 0, i + 1, "collective", "waits", waits_on=f"10.0.0.1:{i + 1}" if i + 1 < n else None,
                     ends=(f"10.0.0.1:{i}",)) for i in range(n)]  # fmt: skip
    t = time.monotonic()
    assert waits_among(chain) == ((), chain[-1]) and time.monotonic() - t < 10


def test_the_probe_sends_no_secret_named_variable(reap, tmp_path: Path) -> None:
    """The probe's own filter: a rank's NCCL_IB_SECRET never leaves the target, not even in the raw
    output a capture keeps (`collect`), while its RANK does."""
    import os

    from tests.helpers import wait_for

    code = "import threading; threading.Thread(target=threading.Event().wait, daemon=True).start(); threading.Event().wait()"
    env = dict(os.environ, RANK="0", WORLD_SIZE="2", NCCL_IB_SECRET="TOPSECRET4", TORCH_NCCL_TOKEN="TOPSECRET5",
               NCCL_PWD="TOPSECRET8")  # fmt: skip
    job = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    reap.append(job)
    wait_for(lambda: len(os.listdir(f"/proc/{job.pid}/task")) == 2, what="its second thread")
    cap = tmp_path / "cap.json"
    subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--pid", str(job.pid), "--sample", "0",
                    "-o", str(cap)], check=True, capture_output=True, timeout=120)  # fmt: skip
    raw = base64.b64decode(json.loads(cap.read_text())["raw_b64"])
    assert f"/proc/{job.pid}/environ:RANK=0".encode() in raw
    assert b"TOPSECRET" not in raw and b"NCCL_IB_SECRET" not in raw and b"NCCL_PWD" not in raw
