"""Golden tests over real kernel logs published by others (and one recorded here): each file goes
through the probe's own filter (script.sh's VP_KPAT and VP_KFILTER, run by sh and awk) and the
parser, and must give the events stored beside it. Facts the issue named are checked by name."""

from __future__ import annotations

import json

import pytest

from fixtures.kmsg.replay import HERE, cases, log_files, parse_file
from vastprobe.model import KernelEvent
from vastprobe.render.jsonable import to_jsonable

FILES = [(c, f.name) for c in cases() for f in log_files(c)]


@pytest.mark.parametrize(("case", "name"), FILES, ids=[f"{c}/{n}" for c, n in FILES])
def test_log_parses_to_expected(case: str, name: str) -> None:
    got = json.loads(json.dumps(to_jsonable(parse_file(HERE / case / name)), sort_keys=True))
    want = json.loads((HERE / case / "expected.json").read_text())[name]
    assert got == want


@pytest.mark.parametrize("case", cases())
def test_case_names_its_source(case: str) -> None:
    note = (HERE / case / "NOTE.md").read_text()
    assert "Source:" in note or "Recorded here" in note


def test_enough_real_captures() -> None:
    """The issue's bar: at least 10 kernel-log files with events, from at least 5 sources."""
    with_events = [(c, n) for c, n in FILES if parse_file(HERE / c / n).events]
    sources = {c.split("-")[0] for c, _ in with_events}
    assert len(with_events) >= 10 and len(sources) >= 5, (with_events, sources)


def events(case: str, name: str, kind: str) -> list[KernelEvent]:
    return [e for e in parse_file(HERE / case / name).events if e.kind == kind]


@pytest.mark.parametrize("name", ["dmesg.log", "dmesg-T.log", "dmesg-iso.log", "dmesg-decode-iso.log"])
def test_names_with_parentheses_brackets_and_spaces_come_out_whole(name: str) -> None:
    kills = events("host-oom-odd-names", name, "oom-kill")
    assert [k.comm for k in kills] == ["((resolved))", "my app) x (y", "runc:[2:INIT]", "a) total-vm:1"]
    assert all(k.total_vm_kb == 59228 and k.anon_rss_kb == 48896 and k.uid == 0 for k in kills)
    assert all(k.task_memcg and k.task_memcg.startswith("/vastprobe-test-") for k in kills)


def test_reader_prefixes_give_the_same_clock() -> None:
    raw = events("host-oom-odd-names", "dmesg.log", "oom-kill")[0]
    iso = events("host-oom-odd-names", "dmesg-iso.log", "oom-kill")[0]
    ctime = events("host-oom-odd-names", "dmesg-T.log", "oom-kill")[0]
    assert raw.uptime is not None and raw.wall_time is not None and iso.wall_time is not None
    assert abs(raw.wall_time - iso.wall_time) < 2  # btime + uptime against the stamp dmesg printed
    assert ctime.wall_time is None and ctime.local_time is not None  # -T names no time zone


def test_rhel6_rhel7_and_2_6_forms() -> None:
    (c6,) = events("centos6-messages", "messages.log", "oom-kill")
    assert (c6.pid, c6.comm, c6.uid, c6.total_vm_kb, c6.anon_rss_kb) == (11726, "mysqld", 498, 7823732, 2539268)
    assert c6.uptime == pytest.approx(2858609.598568) and c6.local_time is not None  # syslog, year from params
    r7 = events("k8s-syslog-rhel7-uid", "messages.log", "oom-kill")
    assert len(r7) == 8 and all(k.comm == "node" and k.uid == 1000 and k.total_vm_kb for k in r7)
    gpud = events("gpud-dmesg-decode-iso", "dmesg.log", "oom-kill")
    assert [(k.pid, k.comm, k.uid) for k in gpud] == [(123, "httpd", 48), (123, "httpd", 48)]


def test_cgroup_v2_summary_and_reaper() -> None:
    (s,) = [e for e in events("gpud-dmesg-decode-iso", "dmesg.log", "oom-summary") if e.pid]
    assert s.comm == "node" and s.task_memcg and s.task_memcg.endswith(".scope")
    assert s.memcg and "kubepods-burstable" in s.memcg and s.constraint == "CONSTRAINT_MEMCG"
    (r,) = events("gpud-dmesg-decode-iso", "dmesg.log", "oom-reaped")
    assert (r.pid, r.comm) == (345646, "vector")
    (k,) = events("kernel-bugzilla-sd-pam", "dmesg.log", "oom-kill")
    assert k.comm == "(sd-pam)" and k.task_memcg == "/user.slice/user-0.slice/user@0.service/init.scope"


def test_xid_pid_name_variants() -> None:
    xids = events("gpud-dmesg-decode-iso", "dmesg.log", "xid")
    assert {(x.xid, x.pid, x.comm) for x in xids} == {(13, None, None), (43, 2924364, "pt_main_thread")}
    (x63,) = events("ml-engineering-xid63", "xid.log", "xid")
    assert (x63.xid, x63.pid, x63.comm, x63.pci) == (63, 1896, None, "0000:10:1c")
    x119 = events("gpud-dmesg-ctime-xid119", "dmesg.log", "xid")
    assert {x.comm for x in x119} == {"nvidia-smi", "cache_mgr_main", "gpud"} and all(x.local_time for x in x119)


def test_fallen_off_the_bus_without_an_xid() -> None:
    (lost,) = events("nvsentinel-fallen-off-bus", "dmesg.log", "gpu-lost")
    assert lost.pci == "0000:b3:00" and lost.uptime is None  # the stamp is on the first of its three lines
    lines = events("gpud-test-lines", "lines.log", "gpu-lost")
    assert [e.pci for e in lines] == ["0000:18:00", "0000:29:00", "0000:18:00"]


def test_nvswitch_sxid_with_severity() -> None:
    sx = events("gpud-test-lines", "lines.log", "sxid")
    assert ("nvidia-nvswitch0", 20034, "Fatal") in {(e.device, e.xid, e.severity) for e in sx}
    assert ("nvidia-nvswitch3", 12028, "Non-fatal") in {(e.device, e.xid, e.severity) for e in sx}
    (data,) = events("gpud-sxid-decode-iso", "dmesg.log", "sxid")
    assert (data.xid, data.severity, data.pci) == (12028, None, "0000:84:00") and data.wall_time


def test_localised_journal_month_still_parses() -> None:
    (k,) = events("earlyoom-journal-localized", "journal.log", "oom-kill")
    assert (k.pid, k.comm, k.local_time) == (27541, "bash", None)


def test_dev_kmsg_records_hold_nothing_to_report() -> None:
    for f in log_files("gpud-dev-kmsg"):
        log = parse_file(f)
        assert log.readable and not log.events
