"""A probe that did not finish is never a healthy host (issue 21): cut by a tenant who kills its
session, ending with no output at all, or cut by the client's --timeout. SSH targets here are
asyncssh's in-process servers (tests/hostile_servers.py) answering with a real recorded capture
cut where the case needs it; the real attacks on a real sshd are in tests/probe/test_script_attacks.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.hostile_servers import Fleet, cut, ordered_params, silent


def sweep(fleet: Fleet, tmp: Path, *args: str, timeout: float = 120) -> tuple[int, list[dict], str]:
    prom = tmp / "v.prom"
    r = subprocess.run([sys.executable, "-m", "vastprobe", "sweep", "-w", ",".join(fleet.targets), "--no-history",
                        "--known-hosts", str(fleet.known_hosts), "--format", "ndjson", "--snapshot", "--prom", str(prom),
                        "--sample", "0.5", *ordered_params(), *args], capture_output=True, text=True, timeout=timeout)  # fmt: skip
    rows = [row for line in r.stdout.splitlines() if "summary" not in (row := json.loads(line))]  # (the last line)
    order = {t: i for i, t in enumerate(fleet.targets)}
    return r.returncode, sorted(rows, key=lambda h: order[h["target"]]), prom.read_text()


def test_a_probe_killed_before_its_process_section_is_not_diagnosed(tmp_path: Path) -> None:
    """The issue's worst case: the probe's session killed after meta, host and the first uptime:
    it was `healthy` (nothing stalled among 0 processes), exit 0, Prometheus host_up 1 and
    host_stalled 0 with an info note. Now: not diagnosed, exit 3, a warning, and Prometheus says
    the host was not diagnosed."""
    fleet = Fleet([cut("s0.now")]).start(tmp_path)
    try:
        rc, (host,), prom = sweep(fleet, tmp_path)
    finally:
        fleet.stop()
    assert host["status"] == "ok" and host["verdict"] == "unknown", host["verdict"]
    assert rc == 3
    assert host["error"].startswith("the probe did not finish: not diagnosed"), host["error"]
    assert host["headline"] == host["error"]
    (vp900,) = [f for f in host["findings"] if f["code"] == "VP900"]
    assert vp900["severity"] == "warning"
    assert "section not finished: s0.proc" in [e["detail"] for e in vp900["evidence"]]
    assert f'vastprobe_host_diagnosed{{target="{fleet.targets[0]}"}} 0' in prom


def test_a_probe_cut_in_its_process_section_is_not_diagnosed(tmp_path: Path) -> None:
    """The process section starts and never ends (the session killed while it streamed): not
    diagnosed, whatever the records that did arrive show."""
    fleet = Fleet([cut("s0.proc!")]).start(tmp_path)
    try:
        rc, (host,), _ = sweep(fleet, tmp_path)
    finally:
        fleet.stop()
    assert (host["status"], host["verdict"], rc) == ("ok", "unknown", 3)
    assert "s0.proc" in host["snapshot"]["probe"]["unfinished_sections"]


def test_an_empty_output_says_how_the_shell_ended_and_is_tried_once_more(tmp_path: Path) -> None:
    """No output at all: it was "the target's output is not the probe's framing (first bytes:
    '')". Now the sentence says how the target's shell ended; a run killed by a signal is tried
    once more (and the second answers), one that exits with a status of its own (127: no sh) is
    not."""
    once, always, status = silent(1), silent(9), silent(9, status=127)
    fleet = Fleet([once, always, status]).start(tmp_path)
    try:
        rc, hosts, _ = sweep(fleet, tmp_path)
    finally:
        fleet.stop()
    assert rc in (1, 3)  # 1: the recorded capture the second run gets shows a stall
    assert hosts[0]["status"] == "ok" and hosts[0]["verdict"] != "unknown", hosts[0]["error"]
    assert once.calls == 2  # type: ignore[attr-defined]
    assert hosts[1]["status"] == "probe-error" and always.calls == 2  # type: ignore[attr-defined]
    assert hosts[1]["error"] == (
        "the target wrote nothing: the target's shell was killed by signal KILL "
        "(twice: the probe was run again after a first run that wrote nothing)"
    )
    assert hosts[2]["status"] == "probe-error" and status.calls == 1  # type: ignore[attr-defined]
    assert hosts[2]["error"] == "the target wrote nothing: the target's shell exited with status 127"


def test_on_a_client_timeout_what_arrived_is_analysed(tmp_path: Path) -> None:
    """The target sends its sections up to the argv one, then nothing: at --timeout the report
    keeps status `timeout`, analyses what arrived (the processes are there) and names the
    sections that did not finish; it was "timeout" and nothing."""
    fleet = Fleet([cut("cmdline", hang=True)]).start(tmp_path)
    try:
        rc, (host,), _ = sweep(fleet, tmp_path, "--timeout", "4")
    finally:
        fleet.stop()
    assert host["status"] == "timeout" and host["verdict"] in ("unknown", "stalled")
    assert rc in (1, 3)
    assert host["snapshot"]["processes"], "what arrived was not analysed"
    assert "the probe did not finish within --timeout 4s" in host["error"]
    assert "analysed what arrived, not finished: fd, net, kmsg," in host["error"], host["error"]
