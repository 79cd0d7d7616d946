"""log-retry-loop on a real retry loop (curl against a port nobody listens on), and on a line
PyTorch's rendezvous prints, as published; a progress log of the same shape is no loop."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import vastprobe_json, wait_for
from tests.sshd import dead_port
from vastprobe.analysis.logs import retry_loop


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
@pytest.mark.parametrize("quiet", ["-sS", ""])
@pytest.mark.slow
def test_a_download_retrying_a_dead_mirror(reap, tmp_path: Path, quiet: str) -> None:
    """curl -sS prints one line an attempt; plain curl a progress meter rewritten with carriage
    returns and a warning wrapped over two lines: a 5-line block (missed at first: a reviewer)."""
    log = tmp_path / "download.log"
    url = f"http://127.0.0.1:{dead_port()}/model.safetensors"  # closed again: refused
    job = subprocess.Popen(["bash", "-c", f"curl {quiet} --retry 1000 --retry-connrefused --retry-delay 1 -o /dev/null "
                            f"{url} 2>> {log}; echo gave up >> {log}"], start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: log.exists() and log.read_text().count("Failed to connect") >= 6, timeout=30, what="six attempts")
    rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3", "--log", str(log))
    [f] = [f for f in host["findings"] if f["rule"] == "log-retry-loop"]
    assert f["severity"] == "warning" and rc == 0 and host["verdict"] == "degraded"
    assert f["summary"].startswith(f"{log} ends in a retry loop: the same ")
    assert any("Failed to connect to 127.0.0.1 port" in e["detail"] or "retry" in e["detail"] for e in f["evidence"])
    assert not [g for g in host["findings"] if g["rule"] == "missing-logs"]  # the log is fresh


def test_pytorch_rendezvous_retries_as_published() -> None:
    """The line from pytorch/pytorch#73114 ("hundreds of" them; "several times the printing won't
    stop and I had to kill the job"), the port and the socket.cpp line number varying."""
    line = "[W socket.cpp:{n}] The server socket on [jean-zay-iam01-ib0]:550{n} is not yet listening (errno: 111 - Connection refused), will retry"
    loop = retry_loop("".join(line.format(n=30 + i) + "\n" for i in range(8)))
    assert loop is not None and loop.repeats == 8 and loop.period == 1 and "not yet listening" in loop.line


def test_torch_tcpstore_retries_as_published() -> None:
    """TheTom/vllm-swift#9: "[c10d] TCP client failed to connect/validate to host ... - retrying"."""
    line = "[W426 16:56:{n:02d}.831041000 TCPStore.cpp:347] [c10d] TCP client failed to connect/validate to host 100.64.0.1:59782 - retrying (try={n}, timeout=1800000ms, delay=5241ms): Connection reset by peer"
    assert retry_loop("".join(line.format(n=i) + "\n" for i in range(6))) is not None


@pytest.mark.parametrize(
    "line",
    [
        "epoch 3 step {n}/1000 loss 0.{n} lr 3e-4 12.{n} it/s",
        "downloaded shard {n:05d}/10000 (52.3 MB/s, retries: 0)",
        "step {n}/100000 loss 0.3280 data_wait 0.897s timeout=1800s",
        'I1203 12:00:{n:02d} httplog.go:132] "HTTP" verb="GET" URI="/readyz?timeout=32s" latency="1.2ms" resp=200',
        "heartbeat ok (lease renewed, timeout 30s)",
        "INFO worker: queue empty, waiting for work",
        "Waiting for vLLM server at http://localhost:8000 to be ready (model still loading)...",
        "step {n}/100000 loss 0.{n}\nbatch fetched in 0.306s (no retries)",
        # a retry on every step of a job that still moves on (urllib3's warning, as it writes it)
        "step {n}/100000 loss 0.{n}\nWARNING:urllib3.connectionpool:Retrying (Retry(total=4, connect=None, read=None, "
        "redirect=None, status=None)) after connection broken by 'ReadTimeoutError(\"HTTPSConnectionPool(host='hub', "
        "port=443): Read timed out. (read timeout=10)\")': /repos/ab/cd/shard-{n:05d}",
    ],
)
def test_healthy_logs_are_no_retry_loop(line: str) -> None:
    """Progress, access and heartbeat logs repeat their shape, and some carry words like timeout,
    retries or waiting as settings or counters: a precision review found each reported."""
    assert retry_loop("".join(line.format(n=i) + "\n" for i in range(40))) is None


def test_wgets_attempt_counter_is_no_progress() -> None:
    """wget --tries=0 --retry-connrefused, as it writes each attempt: "(try:23)" counts retries."""
    block = ("--2026-12-03 12:22:{n:02d}--  (try:{n})  http://127.0.0.1:47799/\n"
             "Connecting to 127.0.0.1:47799... failed: Connection refused.\nRetrying.\n\n")  # fmt: skip
    loop = retry_loop("".join(block.format(n=i) for i in range(10, 20)))
    assert loop is not None and loop.period == 3 and loop.line == "Retrying."


def test_two_line_retry_blocks_and_too_few_repeats() -> None:
    block = "connecting to store 10.0.0.{n}:29500\nconnection refused, retrying in {n}s\n"
    assert retry_loop("".join(block.format(n=i) for i in range(6))).period == 2  # type: ignore[union-attr]
    assert retry_loop("".join(block.format(n=i) for i in range(4))) is None
    assert retry_loop("started\n" + "waiting for rank 1\n" * 3 + "rank 1 joined\n" + "waiting for rank 2\n" * 2) is None


@pytest.mark.parametrize(
    "block",
    [
        ["job starting", "error: cannot open database /data/db.sqlite", "worker exited with status 1, restarting in 2s"],
        ["2026-12-07 20:00:{n:02d},120 INFO spawned: 'crash' with pid 41{n:02d}",
         "2026-12-07 20:00:{n:02d},450 INFO exited: crash (exit status 1; not expected)"],  # supervisord's own words
    ],
)  # fmt: skip
def test_a_restarter_that_restarts_a_failing_job_is_a_retry_loop(block: list[str]) -> None:
    """A job restarted over and over read HEALTHY: "restarting in 2s" was no retry word, nor
    supervisord's "not expected" exit (found by a helper)."""
    text = "".join(line.format(n=i) + "\n" for i in range(8) for line in block)
    loop = retry_loop(text)
    assert loop is not None and loop.repeats == 8 and loop.period == len(block), loop
