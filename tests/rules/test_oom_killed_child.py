"""oom-killed-child on real OOM kills: blame during the job, context before it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.cgroup_lab import OOM_KILLS, MemoryCgroup
from tests.helpers import children_of, proc_text, vastprobe_json, wait_for

HOG = "b = bytearray(200 * 1024 * 1024)"


def oom_kill_now(cg: MemoryCgroup) -> int:
    """A process OOM-killed in `cg`: its PID, once the cgroup's counter has it."""
    before = cg.oom_kills()
    r = subprocess.Popen(["sh", "-c", f"echo $$ > {cg.procs_file}; exec {sys.executable} -c '{HOG}'"])
    assert r.wait(timeout=60) == -9  # SIGKILL from the OOM killer (a shell would report 137)
    wait_for(lambda: cg.oom_kills() > before, what="oom_kill counter")
    return r.pid


def oom_kill_reported(cg: MemoryCgroup) -> None:
    """oom_kill_now, again until the kernel's report of a kill names its cgroup: other tests' kills
    meanwhile (parallel workers) pass the kernel's rate limit on OOM reports (10 in 5 s), and a report
    it drops leaves only "Killed process PID (python)", no cgroup (3 runs in 5 of this module on 3
    workers here). The line is written before the victim dies, so one read after it says."""
    for _try in range(30):
        victim = oom_kill_now(cg)
        log = subprocess.run(["dmesg"], capture_output=True, text=True).stdout.splitlines()
        if any(f"task_memcg={cg.name}," in line and f",pid={victim}," in line for line in log):
            return
        time.sleep(0.5)  # pacing, not a wait for a state: the rate limit's window moves on
    pytest.skip("the kernel rate-limited 30 reports in a row: the case not met")


@OOM_KILLS
def test_kill_older_than_the_watched_processes_is_context(reap, memcg: MemoryCgroup) -> None:
    cg = memcg
    oom_kill_now(cg)
    p = subprocess.Popen(["bash", "-c", "sleep 1000 & wait"], start_new_session=True)
    reap.append(p)
    wait_for(lambda: len(children_of(p.pid)) == 1, what="watched job started")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child"]
    assert ooms and all(f["severity"] == "info" for f in ooms), [
        (f["summary"], f["evidence"], host["scope"]) for f in ooms if f["severity"] != "info"
    ]
    assert host["verdict"] == "healthy" and rc == 0


@OOM_KILLS
def test_kill_during_the_job_names_the_parent_that_lost_it(reap, memcg: MemoryCgroup, oom_noise) -> None:
    """The job runs in its memory cgroup (a container's limit); kills in other cgroups meanwhile
    (oom_noise) are context, never the job's."""
    cg = memcg
    # the hog allocates a second into the job: a kill stamped by the kernel log's clock is then
    # plainly after the job's start, whatever a CPU's clock is off by (a kill within a tick of the
    # start is context, not blame, by design)
    hog = f"import time; time.sleep(1); {HOG}"
    script = f"echo $$ > {cg.procs_file}; sleep 1000 & {sys.executable} -c '{hog}'; wait"
    p = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    reap.append(p)
    wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="OOM kill")
    _rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child"]
    errors = [f for f in ooms if f["severity"] == "error"]
    assert errors, [(g["severity"], g["summary"], [e["detail"][:160] for e in g["evidence"]]) for g in ooms]
    f = errors[0]
    assert f["pids"] == [p.pid]
    details = " ".join(e["detail"] for e in f["evidence"])
    assert "40 MiB" in details and cg.name in details and "resident at death" in details
    # the neighbours' kills: folded into one info line, blamed on nobody
    assert all(g["severity"] == "info" and not g["pids"] for g in ooms if g is not f)
    assert not any(oom_noise.name in e["detail"] for e in f["evidence"])


@OOM_KILLS
def test_kill_in_another_cgroup_during_the_job_is_context(reap, memcg: MemoryCgroup) -> None:
    """A waiting job in a cgroup of its own, and an unrelated process OOM-killed in another one."""
    job = MemoryCgroup(256 * 1024 * 1024)
    try:
        p = subprocess.Popen(["bash", "-c", f"echo $$ > {job.procs_file}; sleep 1000 & wait"], start_new_session=True)
        reap.append(p)
        wait_for(lambda: len(children_of(p.pid)) == 1, what="watched job started")
        oom_kill_now(memcg)
        rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
        ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child"]
        assert ooms and all(f["severity"] == "info" and not f["pids"] for f in ooms), ooms
        assert any(memcg.name in e["detail"] for f in ooms for e in f["evidence"]) or any(
            "elsewhere" in f["summary"] for f in ooms
        )
        assert host["verdict"] == "healthy" and rc == 0
    finally:
        job.remove()


@OOM_KILLS
def test_unreadable_kernel_log_falls_back_to_cgroup_counters(reap, memcg: MemoryCgroup) -> None:
    """Like a container without CAP_SYSLOG: dmesg is refused, the cgroup's counter still tells; the job's
    own cgroup lost a process, an error (it was a warning: 'when and which process is unknown')."""
    import shutil

    import pytest

    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to drop CAP_SYSLOG")
    cg = memcg
    job = f"echo $$ > {cg.procs_file}; sleep 1000 & {sys.executable} -c '{HOG}'; wait"
    p = subprocess.Popen(["bash", "-c", job], start_new_session=True)
    reap.append(p)
    wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="OOM kill")
    import json

    drop = ["setpriv", "--bounding-set=-syslog,-sys_admin", "--inh-caps=-syslog,-sys_admin"]
    r = subprocess.run([*drop, sys.executable, "-m", "vastprobe", "diagnose", "local", "--format", "json",
                        "--pid", str(p.pid), "--sample", "0.2", "--snapshot"], capture_output=True, text=True, timeout=120)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    assert host["snapshot"]["kernel_log"]["readable"] is False
    assert "not permitted" in host["snapshot"]["kernel_log"]["reason"]
    f = next(f for f in host["findings"] if f["rule"] == "oom-killed-child")
    assert f["severity"] == "error" and cg.name in f["summary"] and "1 OOM kill" in f["summary"]
    assert any("not usable" in e["detail"] for e in f["evidence"])


@OOM_KILLS
def test_kill_whose_cgroup_line_the_kernel_rate_limited(reap, memcg: MemoryCgroup, oom_storm) -> None:
    """Under an OOM storm the kernel drops the report lines that name the cgroup (10 reports in
    5 s), never the "Killed process" line: the job's own counter and the victim's size still tell
    the job's kill from the neighbours'."""
    noise = MemoryCgroup(24 * 1024 * 1024)
    try:
        job = subprocess.Popen(["bash", "-c", f"echo $$ > {memcg.procs_file}; sleep 1000 & wait"],
                               start_new_session=True)  # fmt: skip
        reap.append(job)
        wait_for(lambda: len(children_of(job.pid)) == 1, what="job started")
        for _ in range(14):  # the storm: past the rate limit's burst
            oom_kill_now(noise)
        r = subprocess.run(["bash", "-c", f"echo $$ > {memcg.procs_file}; exec {sys.executable} -c '{HOG}'"])
        assert r.returncode == -9
        wait_for(lambda: memcg.oom_kills() >= 1, what="the job's kill counted")
        log = subprocess.run(["dmesg"], capture_output=True, text=True).stdout.splitlines()
        named = [line for line in log if f"task_memcg={memcg.name}," in line]
        if named:
            import pytest

            pytest.skip("the kernel did not rate-limit this kill's report here")
        _rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
        ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child"]
        mine = [f for f in ooms if f["severity"] == "error"]
        assert len(mine) == 1 and mine[0]["pids"] == [job.pid], ooms
        assert any("by its counter" in e["detail"] for e in mine[0]["evidence"])
        assert all(f["severity"] == "info" and not f["pids"] for f in ooms if f is not mine[0])
    finally:
        noise.remove()


@OOM_KILLS
def test_a_neighbours_rate_limited_kill_does_not_spend_a_counter_the_log_already_named(
    reap, memcg: MemoryCgroup, oom_storm
) -> None:
    """A clean-clone CI found two oom-killed-child findings for one launcher: the job's memory cgroup
    had counted kills from before the job started (named in the log, so context), and a neighbour's
    kill whose cgroup line the kernel rate-limited was placed in it by what was left of its counter,
    then blamed on the job. A counter counts every kill its cgroup ever had: each one the log names
    spends it, whenever it was. Here the job waits on a sleeping child and lost nothing: HEALTHY."""
    oom_kill_reported(memcg)  # the cgroup's kill before the job, named in the log: the counter is spent
    killed = time.time()  # the job starts plainly after it (a kill within CLOCK_SLACK of a start is blamed)
    wait_for(lambda: time.time() - killed > 1.0, what="a second past the kill")
    job = subprocess.Popen(["bash", "-c", f"echo $$ > {memcg.procs_file}; sleep 1000 & wait"],
                           start_new_session=True)  # fmt: skip
    reap.append(job)
    wait_for(lambda: len(children_of(job.pid)) == 1, what="job started")
    noise = MemoryCgroup(24 * 1024 * 1024)
    try:
        for _ in range(40):  # a storm in a neighbour's cgroup until the kernel drops a kill's cgroup line
            victim = oom_kill_now(noise)
            log = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
            if f"Killed process {victim} " in log and f",pid={victim}," not in log:
                break
        else:
            pytest.skip("the kernel named the cgroup of 40 kills in a row: the case not met")
        rc, host = vastprobe_json("--pid", str(job.pid), "--sample", "0.3")
    finally:
        noise.remove()
    ooms = [f for f in host["findings"] if f["rule"] == "oom-killed-child"]
    assert all(f["severity"] == "info" and not f["pids"] for f in ooms), [
        (f["severity"], f["summary"], [(e["source"], e["detail"][:200]) for e in f["evidence"]]) for f in ooms
    ]
    assert host["verdict"] == "healthy" and rc == 0, [(f["rule"], f["severity"]) for f in host["findings"]]


@OOM_KILLS
def test_a_kill_the_kernel_log_no_longer_holds_is_still_the_jobs_loss(reap, memcg: MemoryCgroup, tmp_path) -> None:
    """A busy host rolls its kernel log over: the capture's kernel log holds no line of the job's kill
    (dropped from a real capture here, as a flood of other lines would), while the job's memory
    cgroup's counter (memory.events / memory.oom_control) counts it. That is the job's loss, an
    error, and the waiting parent's stall follows from it."""
    import base64
    import hashlib
    import json
    import re

    cg = memcg
    job = f"echo $$ > {cg.procs_file}; sleep 1000 & {sys.executable} -c '{HOG}'; wait"
    p = subprocess.Popen(["bash", "-c", job], start_new_session=True)
    reap.append(p)
    wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="OOM kill")
    cap = tmp_path / "c.json"
    subprocess.run([sys.executable, "-m", "vastprobe", "collect", "local", "--pid", str(p.pid), "--sample", "0.2",
                    "-o", str(cap)], check=True, capture_output=True, timeout=120)  # fmt: skip
    doc = json.loads(cap.read_text())
    raw = base64.b64decode(doc["raw_b64"])
    rolled = re.sub(rb"(?m)^\|[^\n]*(oom|Out of memory|Killed process|memory: usage)[^\n]*\n", b"", raw)
    assert rolled != raw and b"Killed process" not in rolled
    doc.update(raw_b64=base64.b64encode(rolled).decode(), raw_sha256=hashlib.sha256(rolled).hexdigest())
    doc.pop("snapshot", None)
    cap.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, "-m", "vastprobe", "analyze", str(cap), "--format", "json"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    host = json.loads(r.stdout)["hosts"][0]
    f = next(f for f in host["findings"] if f["rule"] == "oom-killed-child" and cg.name in f["summary"])
    assert f["severity"] == "error" and "1 OOM kill" in f["summary"], f
    assert host["verdict"] == "stalled" and r.returncode == 1


def test_the_hint_on_kills_elsewhere_says_what_ran_short() -> None:
    """A memory cgroup's kill says nothing of the host's memory ("41 OOM kills outside the scope",
    all of them test cgroups' on this machine, were hinted as "the host is short of memory now")."""
    from vastprobe.analysis.oom import OomMatch
    from vastprobe.parsers.kmsg import parse_line
    from vastprobe.rules.oom_killed_child import _where_short

    memcg = parse_line("[31842.817100] Memory cgroup out of memory: Killed process 6229 (python) total-vm:116404kB, "
                       "anon-rss:24448kB, file-rss:6040kB, shmem-rss:0kB, UID:0 pgtables:104kB oom_score_adj:0")  # fmt: skip
    host = parse_line("[ 5412.310226] Out of memory: Killed process 2115 (python3) total-vm:9254332kB, "
                      "anon-rss:7801012kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:15608kB oom_score_adj:0")  # fmt: skip
    assert memcg is not None and host is not None
    cg, glob = OomMatch(memcg, None, "", "elsewhere"), OomMatch(host, None, "", "elsewhere")
    assert "hit their limits" in _where_short([cg, cg])
    assert "short of memory now" in _where_short([cg, glob])


@OOM_KILLS
def test_a_job_that_noticed_the_kill_and_went_on_is_not_stalled(reap, memcg: MemoryCgroup, tmp_path) -> None:
    """Found by a helper: a job whose worker was OOM-killed noticed (exit 137), retried with a smaller
    batch and kept writing its log; it read STALLED, exit 1, beside its growing log. A past kill is
    no stall while the job goes on: a warning. The same kill beside a parent that waits on for ever
    (its log still) stays the stall it is."""
    cg, log = memcg, tmp_path / "job.log"
    retry = f"while :; do echo step >> {log}; sleep 0.1; done"
    # and a launcher that waits for ever while a heartbeat sidecar of its own writes the job's log: the
    # log grows, the loser does not go on (a first version took it for going on; found by a helper)
    beat = f"import time\nwhile True:\n    open({str(log)!r}, 'a').write('beat\\n'); time.sleep(0.1)"
    sidecar = f'{sys.executable} -c "{beat}" & sleep 1000'
    # a launcher that started its worker again and waits for it while it computes (found by a helper)
    rerun = f"{sys.executable} -c 'while True: pass'"
    for went_on, after in ((True, retry), (True, rerun), (False, "sleep 1000"), (False, sidecar)):
        log.write_text("")
        script = (f"echo $$ > {cg.procs_file}; {sys.executable} -c 'import time; time.sleep(1); {HOG}'; "
                  f"echo retrying >> {log}; {after}")  # fmt: skip
        before = cg.oom_kills()
        p = subprocess.Popen(["bash", "-c", script], start_new_session=True)
        reap.append(p)
        wait_for(lambda b=before: cg.oom_kills() > b and "retrying" in log.read_text(), timeout=30, what="the kill")
        if after == rerun:  # the launcher's own write well before the window: only its worker works
            wait_for(lambda: time.time() - log.stat().st_mtime > 1.5, what="the launcher waiting on its worker")
        rc, host = vastprobe_json("--pid", str(p.pid), "--log", str(log), "--sample", "0.5")
        found = [f for f in host["findings"] if f["rule"] == "oom-killed-child" and f["pids"] == [p.pid]]
        assert len(found) == 1, [(f["severity"], f["summary"], f["evidence"]) for f in found]
        f = found[0]
        if went_on:
            assert f["severity"] == "warning" and f["summary"].endswith(": the job went on"), f
            assert any(e["source"] == "progress" for e in f["evidence"]), f["evidence"]
            assert host["verdict"] == "degraded" and rc == 0, [(g["rule"], g["severity"]) for g in host["findings"]]
        else:
            assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, f
        os.killpg(p.pid, signal.SIGKILL)  # the sidecar too
        p.wait()


@OOM_KILLS
def test_a_guessed_loser_is_not_said_to_have_lost_the_victim(reap, memcg: MemoryCgroup) -> None:
    """Found by a helper: a service sharing the job's memory cgroup, the watched process closest to the
    victim, was said to have lost a child it never had. Only the cgroup ties them: the words say so,
    and the job, which computes on, is not stalled by it."""
    cg = memcg
    loop = subprocess.Popen(["bash", "-c", f"echo $$ > {cg.procs_file}; {sys.executable} -c '{HOG}'; "
                             "while :; do :; done"], start_new_session=True)  # fmt: skip
    reap.append(loop)
    wait_for(lambda: cg.oom_kills() >= 1, timeout=30, what="the kill")
    service = subprocess.Popen(["sh", "-c", f"echo $$ > {cg.procs_file}; exec sleep 1000"], start_new_session=True)
    reap.append(service)
    wait_for(lambda: str(service.pid) in cg.procs_file.read_text(), what="the service in the cgroup")
    rc, host = vastprobe_json("--pid", str(service.pid), "--pid", str(loop.pid), "--sample", "0.3")
    (f,) = [f for f in host["findings"] if f["rule"] == "oom-killed-child" and f["pids"]]
    assert f"{service.pid} (sleep), in its memory cgroup, may have lost it" in f["summary"], f["summary"]
    # nothing ties the kill to a process that stopped: the job computes on (its loop), a warning
    assert f["severity"] == "warning" and f["summary"].endswith(": the job went on"), f
    assert host["verdict"] == "degraded" and rc == 0, [(g["rule"], g["severity"]) for g in host["findings"]]


@OOM_KILLS
def test_kills_one_parent_lost_are_one_finding_headed_by_the_latest(reap, memcg: MemoryCgroup) -> None:
    """Found by a helper: a cgroup that OOMs every minute gave one finding and one incident per kill,
    each headed with the first kill's time. One parent's kills of one program are one finding now,
    counted, with the latest's time in its summary and its incident's headline."""
    cg = memcg
    hog = f"{sys.executable} -c 'import time; time.sleep(1); {HOG}'"
    p = subprocess.Popen(["bash", "-c", f"echo $$ > {cg.procs_file}; {hog}; {hog}; sleep 1000 & wait"],
                         start_new_session=True)  # fmt: skip
    reap.append(p)
    wait_for(lambda: cg.oom_kills() >= 2, timeout=30, what="two kills")
    rc, host = vastprobe_json("--pid", str(p.pid), "--sample", "0.3")
    mine = [f for f in host["findings"] if f["rule"] == "oom-killed-child" and f["pids"] == [p.pid]]
    assert len(mine) == 1 and " was OOM-killed 2 times, the latest " in mine[0]["summary"], mine
    latest = mine[0]["summary"].split("the latest ", 1)[1].split(" UTC", 1)[0][-8:]  # HH:MM:SS
    (incident,) = [i for i in host["incidents"] if i["root"]["summary"] == mine[0]["summary"]]
    assert f"OOM-killed 2 times, the latest at {latest} UTC" in incident["headline"], incident["headline"]
    assert mine[0]["severity"] == "error" and host["verdict"] == "stalled" and rc == 1


@OOM_KILLS
def test_on_a_whole_host_a_shell_above_the_victims_cgroup_did_not_lose_it(reap, memcg: MemoryCgroup) -> None:
    """Found by a helper: on a whole host (no --pid), a tool shell waiting on its idle child "made no
    progress after an OOM kill in the job" because the victim died in a memory cgroup below the shell's
    own (cgroup v1 lets a cgroup hold processes and children). Waiting on children in a cgroup above is
    no tie on a whole host: nobody is named. Scoped to the shell (--pid), the kill is its job's: STALLED."""
    if memcg.version != "v1":
        pytest.skip("cgroup v2 keeps processes out of a cgroup whose children have a memory limit")
    sub = memcg.child(40 * 1024 * 1024)
    try:
        shell = subprocess.Popen(["bash", "-c", f"echo $$ > {memcg.procs_file}; exec bash -c 'sleep 100000; true'"],
                                 start_new_session=True)  # fmt: skip
        reap.append(shell)
        wait_for(lambda: [proc_text(k, "comm").strip() for k in children_of(shell.pid)] == ["sleep"],
                 what="the shell waiting on sleep")  # fmt: skip
        oom_kill_reported(sub)
        rc, host = vastprobe_json("--sample", "0.3")
        mine = [f for f in host["findings"] if shell.pid in f["pids"]]
        assert not mine, [(f["rule"], f["severity"], f["summary"]) for f in mine]
        # the whole host's verdict is other processes' too (this machine is shared): a STALLED one
        # must rest on a finding about someone else
        stalls = [f for f in host["findings"] if f["severity"] in ("error", "critical")]
        assert (rc == 1) == (host["verdict"] == "stalled") == bool(stalls), (rc, host["verdict"])
        rc, host = vastprobe_json("--pid", str(shell.pid), "--sample", "0.3")
        said = [(f["rule"], f["severity"], f["summary"], f["pids"]) for f in host["findings"]]
        found = [f for f in host["findings"] if f["rule"] == "oom-killed-child" and f["pids"] == [shell.pid]]
        assert len(found) == 1, said
        lost = found[0]
        assert lost["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, lost
    finally:
        sub.remove()
