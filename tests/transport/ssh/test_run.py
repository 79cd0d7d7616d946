"""The SSH transport against a real OpenSSH sshd on 127.0.0.1: the fault matrix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import children_of, wait_for
from tests.sshd import dead_port, keygen, start_sshd


def vp(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "--format", "json", *args],
                       capture_output=True, text=True, timeout=timeout, env=env)  # fmt: skip
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)["hosts"][0], r.stderr


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    s = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield s
    s.stop()


def test_ok(sshd) -> None:
    rc, host, _ = vp(
        sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(sshd.known_hosts), "--sample", "0.2", "--snapshot"
    )
    assert host["status"] == "ok", host["error"]
    assert host["snapshot"]["probe"]["transport"] == "ssh"
    assert rc in (0, 1)
    # the sshd session processes that ran the probe (its shell's ancestors) are not in scope; other
    # people's sshd sessions on this host are none of the probe's business
    excluded = set(host["snapshot"]["excluded_pids"])
    by_pid = {p["pid"]: p for p in host["snapshot"]["processes"]}
    sessions, cur = [], by_pid.get(host["snapshot"]["probe"]["shell_ppid"])
    while cur is not None and cur["comm"].startswith("sshd") and "@" in " ".join(cur["cmdline"]):
        sessions.append(cur["pid"])
        cur = by_pid.get(cur["ppid"])
    assert sessions and all(pid in excluded for pid in sessions)


def test_same_findings_as_local(sshd, tmp_path: Path) -> None:
    p = subprocess.Popen(["sh", "-c", "sleep 1000 & wait"], start_new_session=True)
    try:
        wait_for(lambda: len(children_of(p.pid)) == 1, what="child")
        child = children_of(p.pid)[0]
        os.kill(child, 19)
        wait_for(lambda: Path(f"/proc/{child}/stat").read_text().split(") ")[1][0] == "T", what="stopped")
        common = ["--pid", str(p.pid), "--sample", "0.3"]
        rc_l, local, _ = vp("local", *common)
        rc_s, remote, _ = vp(sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(sshd.known_hosts), *common)
        assert remote["status"] == "ok"
        # info-level context (OOM kills elsewhere on this shared host) may change between the two runs
        key = lambda h: sorted(  # noqa: E731
            (f["rule"], f["severity"], tuple(f["pids"])) for f in h["findings"] if f["severity"] != "info"
        )
        assert key(local) == key(remote) and ("stopped-child", "error", (child,)) in key(remote)
        assert rc_l == rc_s == 1
    finally:
        os.killpg(p.pid, 9)
        p.wait()


def test_wrong_key_is_auth_failed(sshd, tmp_path: Path) -> None:
    other = keygen(tmp_path / "other")
    rc, host, _ = vp(sshd.target, "-i", str(other), "--known-hosts", str(sshd.known_hosts))
    assert host["status"] == "auth-failed" and "permission denied" in host["error"] and rc == 3


def test_encrypted_key_never_prompts(sshd, tmp_path: Path) -> None:
    enc = tmp_path / "enc"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(enc)], check=True)
    rc, host, _ = vp(sshd.target, "-i", str(enc), "--known-hosts", str(sshd.known_hosts), timeout=30)
    assert host["status"] == "auth-failed" and rc == 3


def test_unknown_host_key_strict_then_accept_new(sshd, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    rc, host, _ = vp(sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(kh))
    assert host["status"] == "host-key-rejected" and rc == 3
    assert not kh.exists()
    rc, host, _ = vp(
        sshd.target,
        "-i",
        str(sshd.user_key),
        "--known-hosts",
        str(kh),
        "--host-key-check",
        "accept-new",
        "--sample",
        "0",
    )
    assert host["status"] == "ok"
    assert f"[127.0.0.1]:{sshd.port} ssh-ed25519 " in kh.read_text()
    rc, host, _ = vp(sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(kh), "--sample", "0")
    assert host["status"] == "ok"  # now known: strict accepts it


def test_changed_host_key_rejected_even_under_accept_new(sshd, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    wrong = keygen(tmp_path / "wrong")
    pub = Path(str(wrong) + ".pub").read_text().split()
    kh.write_text(f"[127.0.0.1]:{sshd.port} {pub[0]} {pub[1]}\n")
    _rc, host, _ = vp(sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(kh), "--host-key-check", "accept-new")
    assert host["status"] == "host-key-rejected" and "changed" in host["error"]
    assert len(kh.read_text().splitlines()) == 1


def test_off_says_so_loudly(sshd, tmp_path: Path) -> None:
    _rc, host, err = vp(
        sshd.target,
        "-i",
        str(sshd.user_key),
        "--known-hosts",
        str(tmp_path / "none"),
        "--host-key-check",
        "off",
        "--sample",
        "0",
    )
    assert host["status"] == "ok" and "host key checking is OFF" in err


def test_closed_port_is_unreachable_fast() -> None:
    t0 = time.monotonic()
    rc, host, _ = vp(f"root@127.0.0.1:{dead_port()}", "--connect-timeout", "3")
    assert host["status"] == "unreachable" and "refused" in host["error"] and rc == 3
    assert time.monotonic() - t0 < 10


def test_a_port_that_is_no_ssh_server_is_said_so(reap) -> None:
    """Found by a helper: an HTTP port given for SSH's read "the server closed the connection
    (Connection lost)" and no more."""
    srv = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline().split(" port ")[1].split()[0])
    rc, host, _ = vp(f"root@127.0.0.1:{port}", "--connect-timeout", "5")
    assert host["status"] == "unreachable" and host["verdict"] == "unknown" and rc == 3, host
    assert host["error"].endswith(f"before the SSH handshake finished (Connection lost); is port {port} an SSH server?")


@pytest.mark.slow
def test_hanging_force_command_times_out(tmp_path: Path) -> None:
    s = start_sshd(tmp_path / "hang", force_command="sleep 600")
    try:
        t0 = time.monotonic()
        rc, host, _ = vp(
            s.target, "-i", str(s.user_key), "--known-hosts", str(s.known_hosts), "--timeout", "3", "--sample", "0"
        )
        assert host["status"] == "timeout" and "--timeout 3" in host["error"] and rc == 3
        assert time.monotonic() - t0 < 15
        # the session opened and nothing came: the login shell's startup is the likely place
        assert "not one byte of the probe's output arrived" in host["error"] and "~/.bashrc" in host["error"]
    finally:
        s.stop()


def test_random_bytes_are_probe_error(tmp_path: Path) -> None:
    s = start_sshd(tmp_path / "garbage", force_command="head -c 4096 /dev/urandom")
    try:
        rc, host, _ = vp(s.target, "-i", str(s.user_key), "--known-hosts", str(s.known_hosts))
        assert host["status"] == "probe-error" and "framing" in host["error"] and rc == 3
    finally:
        s.stop()


def test_huge_output_is_capped_and_marked(tmp_path: Path) -> None:
    """A target that never stops talking: reading stops at the cap and the report says so."""
    import asyncio

    from vastprobe.transport.ssh.run import run_ssh
    from vastprobe.transport.ssh.settings import SshOptions

    s = start_sshd(tmp_path / "huge", force_command="cat /dev/zero")
    try:
        opts = SshOptions(identities=(str(s.user_key),), known_hosts=str(s.known_hosts), timeout=30)
        t0 = time.monotonic()
        res = asyncio.run(run_ssh(s.target, "echo hi\n", 1024 * 1024, opts))
        assert res.status == "ok" and res.truncated and len(res.output) == 1024 * 1024
        assert time.monotonic() - t0 < 20
    finally:
        s.stop()


def test_proxyjump_through_a_second_sshd(tmp_path: Path) -> None:
    user_key = keygen(tmp_path / "user")
    jump = start_sshd(tmp_path / "jump", user_key=user_key, log_level="DEBUG1")
    inner = start_sshd(tmp_path / "inner", user_key=user_key, address="127.0.0.2")
    try:
        kh = tmp_path / "known_hosts"
        kh.write_text(jump.known_hosts.read_text() + inner.known_hosts.read_text())
        cfg = tmp_path / "ssh_config"
        cfg.write_text(
            f"Host inner\n  HostName 127.0.0.2\n  Port {inner.port}\n  User root\n  ProxyJump root@127.0.0.1:{jump.port}\n"
        )
        # the inner sshd only listens on 127.0.0.2; the jump host reaches it for us
        _rc, host, _ = vp("inner", "-F", str(cfg), "-i", str(user_key), "--known-hosts", str(kh), "--sample", "0")
        assert host["status"] == "ok", host["error"]
        assert jump.log is not None and "direct-tcpip" in jump.log.read_text()  # the jump host carried it
    finally:
        jump.stop()
        inner.stop()


def test_ssh_config_alias(sshd, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host gpu-box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n  IdentityFile {sshd.user_key}\n"
    )
    _rc, host, _ = vp("gpu-box", "-F", str(cfg), "--known-hosts", str(sshd.known_hosts), "--sample", "0")
    assert host["status"] == "ok", host["error"] and host["target"] == "gpu-box"


def test_targets_run_concurrently_and_independently(sshd) -> None:
    dead = f"root@127.0.0.1:{dead_port()}"
    _rc, _, _ = vp(sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(sshd.known_hosts), "--sample", "0")
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "--format", "json", sshd.target, dead, "local",
                        "-i", str(sshd.user_key), "--known-hosts", str(sshd.known_hosts), "--sample", "0"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    hosts = json.loads(r.stdout)["hosts"]
    assert [h["status"] for h in hosts] == ["ok", "unreachable", "ok"]
    assert r.returncode in (1, 3)


def test_port_and_user_options_and_healthy_exit_0(sshd) -> None:
    p = subprocess.Popen(["sleep", "1000"])
    try:
        rc, host, _ = vp("127.0.0.1", "-p", str(sshd.port), "-l", "root", "-i", str(sshd.user_key),
                         "--known-hosts", str(sshd.known_hosts), "--pid", str(p.pid), "--sample", "0.2")  # fmt: skip
        assert host["status"] == "ok" and host["verdict"] == "healthy" and rc == 0
        assert host["scope"] == [p.pid]
    finally:
        p.kill()
        p.wait()


def test_ssh_agent_when_present(sshd, tmp_path: Path) -> None:
    """No -i: the key comes from a real ssh-agent named by SSH_AUTH_SOCK."""
    import shutil

    if shutil.which("ssh-agent") is None:
        pytest.skip("needs ssh-agent (openssh-client)")
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock), "HOME": str(tmp_path)}  # no ~/.ssh keys to fall back on
        # the socket exists from its bind, before the agent listens: ask it (1: no keys yet; 2: no agent)
        wait_for(lambda: subprocess.run(["ssh-add", "-l"], env=env, capture_output=True).returncode in (0, 1),
                 what="the agent answering")  # fmt: skip
        subprocess.run(["ssh-add", "-q", str(sshd.user_key)], env=env, check=True, capture_output=True)
        _rc, host, _ = vp(sshd.target, "--known-hosts", str(sshd.known_hosts), "--sample", "0", env=env)
        assert host["status"] == "ok", host["error"]
        env.pop("SSH_AUTH_SOCK")
        _rc, host, _ = vp(sshd.target, "--known-hosts", str(sshd.known_hosts), "--sample", "0", env=env)
        assert host["status"] == "auth-failed"
    finally:
        agent.kill()
        agent.wait()


def test_collect_over_ssh_then_analyze(sshd, tmp_path: Path) -> None:
    cap = tmp_path / "remote.json"
    r = subprocess.run([sys.executable, "-m", "vastprobe", "collect", sshd.target, "-o", str(cap), "-i", str(sshd.user_key),
                        "--known-hosts", str(sshd.known_hosts), "--sample", "0"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(cap.read_text())
    assert data["transport"] == "ssh" and data["status"] == "ok"
    a = subprocess.run(
        [sys.executable, "-m", "vastprobe", "analyze", str(cap), "--format", "json", "--snapshot"],
        capture_output=True,
        text=True,
    )
    host = json.loads(a.stdout)["hosts"][0]
    assert host["status"] == "ok" and host["snapshot"]["probe"]["transport"] == "ssh"
    dead = subprocess.run([sys.executable, "-m", "vastprobe", "collect", f"root@127.0.0.1:{dead_port()}", "-o",
                           str(tmp_path / "dead.json")], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert dead.returncode == 3 and "refused" in dead.stderr


@pytest.mark.parametrize(
    ("server_kex", "negotiated"),
    [(None, "curve25519-sha256"), ("ecdh-sha2-nistp256,diffie-hellman-group14-sha256", "ecdh-sha2-nistp256")],
    ids=["default-server", "server-without-x25519"],
)
def test_x25519_is_offered_first_and_the_rest_still_serve(
    tmp_path: Path, server_kex: str | None, negotiated: str
) -> None:
    """The client offers curve25519-sha256 first (less CPU a connection than asyncssh's ML-KEM
    hybrid, issue 36), then asyncssh's other key exchanges: a server without X25519 still gets one."""
    s = start_sshd(tmp_path / "d", extra=f"KexAlgorithms {server_kex}\n" if server_kex else "", log_level="DEBUG1")
    try:
        rc, host, err = vp(s.target, "-i", str(s.user_key), "--known-hosts", str(s.known_hosts), "--sample", "0")
        assert host["status"] == "ok", (host["error"], err)
        assert rc in (0, 1) and host["verdict"] in ("healthy", "degraded", "stalled"), host["verdict"]
        assert f"kex: algorithm: {negotiated}" in s.log.read_text()
    finally:
        s.stop()


def test_kex_algorithms_from_the_command_line_is_what_is_offered(tmp_path: Path) -> None:
    """`-o KexAlgorithms=...` is offered as given (OpenSSH's syntax): a server that takes only
    ecdh-sha2-nistp384 is refused by a client told to offer only X25519, and served when told `+`."""
    s = start_sshd(tmp_path / "d", extra="KexAlgorithms ecdh-sha2-nistp384\n", log_level="DEBUG1")
    base = [s.target, "-i", str(s.user_key), "--known-hosts", str(s.known_hosts), "--sample", "0"]
    try:
        rc, host, err = vp(*base, "-o", "KexAlgorithms=curve25519-sha256")
        assert host["status"] != "ok" and rc not in (0, 1), (host["status"], err)
        rc, host, err = vp(*base, "-o", "KexAlgorithms=+ecdh-sha2-nistp384")
        assert host["status"] == "ok" and rc in (0, 1), (host["error"], err)
        assert "kex: algorithm: ecdh-sha2-nistp384" in s.log.read_text()
    finally:
        s.stop()
