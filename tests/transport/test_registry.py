"""The transport seam: every registered kind opens a Transport; one lookup from a target string to
its kind; the bounded runner local.py lends the container transports."""

from __future__ import annotations

import asyncio
import threading

import pytest

from vastprobe.report.hops import address
from vastprobe.targets import TargetError, parse_target, split_scheme
from vastprobe.transport.base import Transport, TransportSettings
from vastprobe.transport.local import run_argv, run_argv_async
from vastprobe.transport.registry import KINDS, LOCAL, SSH, check_target, kind_for, kind_named, needs_ssh, words

EXAMPLES = {
    "local": "local",
    "ssh": "root@gpu01:2222",
    "docker": "docker://trainer",
    "podman": "podman://trainer",
    "kubectl": "kubectl://ml/trainer-0",
}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_opens_a_transport(kind) -> None:  # type: ignore[no-untyped-def]
    target = EXAMPLES[kind.name]
    assert kind_for(target) is kind and kind_named(kind.name) is kind
    t = kind.open(target, TransportSettings(timeout=7))
    assert isinstance(t, Transport)
    assert (t.name, t.target, t.timeout) == (kind.name, target, 7)


@pytest.mark.parametrize(
    ("target", "kind"),
    [("local", LOCAL), ("gpu01", SSH), ("user@gpu01:22", SSH), ("ssh://gpu01", SSH), ("SSH://gpu01", SSH),
     ("[::1]:22", SSH), ("::1", SSH), ("localhost", SSH)],
)  # fmt: skip
def test_the_lookup(target: str, kind) -> None:  # type: ignore[no-untyped-def]
    assert kind_for(target) is kind


def test_an_unknown_scheme_is_one_line() -> None:
    with pytest.raises(TargetError, match=r"unknown scheme lxc://; known: ssh://, docker://"):
        kind_for("lxc://box")
    with pytest.raises(TargetError, match="not an ssh target"):  # parse_target says what it is instead
        parse_target("docker://box")
    assert split_scheme("Docker://a/b") == ("docker", "a/b") and split_scheme("user@host") is None


def test_what_the_cli_asks() -> None:
    assert [needs_ssh(t) for t in ("local", "gpu01", "ssh://h", "docker://x", "kubectl://p", "bad://x")] == [
        False, True, True, False, False, False,
    ]  # fmt: skip
    assert check_target("podman://x").name == "podman" and words() == ["local"]


def test_properties_the_analysis_reads() -> None:
    assert LOCAL.own_processes == "caller" and LOCAL.this_machine
    assert SSH.own_processes == "sshd" and SSH.addressed and SSH.needs_ssh
    assert all(kind_named(n).own_processes == "none" for n in ("docker", "podman", "kubectl"))  # type: ignore[union-attr]
    assert kind_named("carrier-pigeon") is None  # a capture from a newer vastprobe: taken as ssh's
    assert address("docker://gpu01") is None and address("local") is None
    assert address("gpu01") == ("gpu01", 22)


def test_the_runner_stops_when_take_refuses() -> None:
    asked: list[int] = []

    def take(n: int) -> bool:
        asked.append(n)
        return sum(asked) <= 4

    res = run_argv(["sh", "-c", "echo 123; sleep 0.2; echo 456789; sleep 30"], "", 1 << 20, 10, take)
    assert res.status == "ok" and res.truncated and res.output == b"123\n"


def test_the_async_runner_asks_take_on_the_loops_thread() -> None:
    threads: set[int] = set()

    def take(n: int) -> bool:
        threads.add(threading.get_ident())
        return True

    async def main() -> tuple[int, bytes]:
        res = await run_argv_async(["sh", "-s"], lambda left: f"echo left={int(left)}\n", 1 << 20, 9, take)
        return threading.get_ident(), res.output

    loop_thread, output = asyncio.run(main())
    assert output == b"left=9\n" and threads == {loop_thread}


def test_a_command_that_cannot_start_is_a_probe_error() -> None:
    res = run_argv(["/nonexistent/vastprobe-test"], "", 1024, 5, what="docker://x: the probe")
    assert res.status == "probe-error" and res.error is not None
    assert res.error.startswith("docker://x: the probe: cannot run /nonexistent/vastprobe-test: ")
