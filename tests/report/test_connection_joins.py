"""report/connection_joins.py's matching of a wait to the host holding its other end, on reports
built by hand: the mirror-image connection, a listener at an address the host has, two hosts behind
one address told apart by the port they listen on, and an end two hosts could hold left unjoined.
The real-software case (redis on two PID-namespace sshd hosts) is tests/report/test_joins.py."""

from __future__ import annotations

from dataclasses import replace

from vastprobe.model import Finding, HostReport, RemotePeer, ServedSocket
from vastprobe.report.connection_joins import join_connections

WAIT = RemotePeer(812, "redis-cli", "10.0.0.4:51234", "10.0.0.5:6379")


def host(target: str, served: tuple[ServedSocket, ...] = (), waits: tuple[RemotePeer, ...] = (),
         findings: tuple[Finding, ...] = ()) -> HostReport:  # fmt: skip
    verdict = "healthy" if not findings else "stalled"
    return HostReport(target, "ok", None, verdict, findings, None, {}, (1,), remote_waits=waits, served=served)


def stopped(local: str, remote: str = "", pid: int = 3) -> ServedSocket:
    return ServedSocket(local, remote, pid, "redis-server", "T")


def joined(reports: list[HostReport]) -> list[HostReport]:
    return join_connections(reports)


def test_the_host_with_the_mirror_image_connection_holds_the_wait() -> None:
    a = host("root@10.0.0.4", waits=(WAIT,))
    b = host("root@10.0.0.5", served=(stopped("0.0.0.0:6379"), stopped("10.0.0.5:6379", "10.0.0.4:51234")))
    out = joined([a, b])
    f = out[0].findings[0]
    assert f.remote == "root@10.0.0.5" and f.severity == "error" and out[0].verdict == "stalled"
    assert "whose other end is redis-server (3) on root@10.0.0.5: stopped (T)" in f.summary
    assert out[1].findings[0].remote == "root@10.0.0.4" and out[1].verdict == "stalled"


def test_a_listener_counts_only_at_an_address_its_host_has() -> None:
    a = host("root@10.0.0.4", waits=(WAIT,))
    elsewhere = host("root@10.0.0.9", served=(stopped("0.0.0.0:6379"),))  # the same port, another address
    assert joined([a, elsewhere])[0].findings == ()
    there = host("root@10.0.0.5", served=(stopped("0.0.0.0:6379"),))  # its target names the address
    assert joined([a, elsewhere, there])[0].findings[0].remote == "root@10.0.0.5"


def test_hosts_behind_one_address_differ_by_the_port_they_listen_on() -> None:
    wait = RemotePeer(812, "curl", "10.0.0.4:51234", "203.0.113.7:40123")
    a = host("root@10.0.0.4", waits=(wait,))
    c1 = host("root@203.0.113.7:40001", served=(stopped("0.0.0.0:40122"),))
    c2 = host("root@203.0.113.7:40002", served=(stopped("0.0.0.0:40123", pid=9),))
    out = joined([a, c1, c2])
    assert out[0].findings[0].remote == "root@203.0.113.7:40002" and "(9)" in out[0].findings[0].summary


def test_an_end_two_hosts_could_hold_is_left_unjoined() -> None:
    a = host("root@10.0.0.4", waits=(WAIT,))
    b1 = host("root@10.0.0.5:22", served=(stopped("0.0.0.0:6379"),))
    b2 = host("root@10.0.0.5:2222", served=(stopped("0.0.0.0:6379"),))
    out = joined([a, b1, b2])
    assert out[0].findings == () and out[0].verdict == "healthy"


def test_an_other_end_that_is_fine_changes_no_verdict() -> None:
    a = host("root@10.0.0.4", waits=(WAIT,))
    b = host("root@10.0.0.5", served=(ServedSocket("0.0.0.0:6379", "", 3, "redis-server", "S"),))
    out = joined([a, b])
    assert out[0].findings == () and out[0].verdict == "healthy" and out[1].verdict == "healthy"


def _waiting(severity: str) -> HostReport:
    f = Finding("socket-peer-wait", "VP112", severity, "redis-cli (812) waits on TCP …", (812,),  # type: ignore[arg-type]
                (), "diagnose 10.0.0.5", peer=WAIT)  # fmt: skip
    return host("root@10.0.0.4", waits=(WAIT,), findings=(f,))


def test_a_warning_resting_on_an_idle_window_is_a_note_when_the_other_end_works() -> None:
    moving = ServedSocket("10.0.0.5:6379", "10.0.0.4:51234", 3, "redis-server", "S",
                          moving="redis-server (3) worked over the window")  # fmt: skip
    a = replace(_waiting("warning"), verdict="degraded")
    out = joined([a, host("root@10.0.0.5", served=(moving,))])
    f = out[0].findings[0]
    assert f.severity == "info" and out[0].verdict == "healthy" and f.remote == "root@10.0.0.5", f
    assert "whose other end is redis-server (3) on root@10.0.0.5, where redis-server (3) worked" in f.summary
    # nothing moved there: the warning stands; an error rests on more than the window and stands too
    idle = ServedSocket("10.0.0.5:6379", "10.0.0.4:51234", 3, "redis-server", "S")
    assert joined([a, host("root@10.0.0.5", served=(idle,))])[0].findings[0].severity == "warning"
    err = _waiting("error")
    assert joined([err, host("root@10.0.0.5", served=(moving,))])[0].findings[0].severity == "error"
