"""OpenSSH habits against real OpenSSH sshd processes on loopback and a real ssh-agent: keys and
the agent, ssh_config keywords, -o, -J, host keys (accept-new, hashing, a changed key), targets
written the ways people write them."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import wait_for
from tests.sshd import Sshd, dead_port, keygen, start_sshd

VP = [sys.executable, "-m", "vastprobe"]


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """No ~/.ssh, no agent, unless the test gives them."""
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "VASTPROBE_DEBUG")}
    env["HOME"] = str(home)
    env.update(extra)
    return env


def vp(*args: str, env: dict[str, str], timeout: float = 60) -> tuple[int, dict, str]:
    r = subprocess.run([*VP, "diagnose", "--format", "json", "--sample", "0", *args],
                       capture_output=True, text=True, timeout=timeout, env=env)  # fmt: skip
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)["hosts"][0], r.stderr


def fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]  # "256 SHA256:... comment (ED25519)"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> Iterator[Sshd]:
    s = start_sshd(tmp_path_factory.mktemp("sshd"), log_level="DEBUG1")
    yield s
    s.stop()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[str]:
    if shutil.which("ssh-agent") is None or shutil.which("ssh-add") is None:
        pytest.skip("needs ssh-agent and ssh-add (openssh-client)")
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        # listening, not only bound: ssh-add on a socket the agent had bound but not yet listened on exits 2
        # ("could not connect"; a clean-clone CI at 276b617). `ssh-add -l` exits 1 for an empty agent
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        wait_for(lambda: sock.exists() and subprocess.run(["ssh-add", "-l"], env=env, capture_output=True).returncode
                 in (0, 1), what="agent listening")  # fmt: skip
        yield str(sock)
    finally:
        proc.kill()
        proc.wait()


def ssh_add(sock: str, key: Path) -> None:
    subprocess.run(["ssh-add", "-q", str(key)], env={**os.environ, "SSH_AUTH_SOCK": sock}, check=True,
                   capture_output=True)  # fmt: skip


def test_encrypted_key_loaded_in_the_agent_authenticates(sshd: Sshd, agent: str, tmp_path: Path) -> None:
    """As OpenSSH: the key file is encrypted, the agent holds it, so the agent signs."""
    key = tmp_path / "enc"
    shutil.copy(sshd.user_key, key)
    key.chmod(0o600)
    ssh_add(agent, key)
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "secret", "-f", str(key)], check=True)
    import asyncssh

    with pytest.raises(asyncssh.KeyImportError, match="assphrase"):
        asyncssh.import_private_key(key.read_bytes())  # really encrypted; no .pub next to it either
    args = (sshd.target, "-i", str(key), "--known-hosts", str(sshd.known_hosts))
    _rc, host, err = vp(*args, env=clean_env(tmp_path, SSH_AUTH_SOCK=agent))
    assert host["status"] == "ok", host["error"]
    assert "encrypted" not in err  # the agent had it: nothing to say
    # without the agent: skipped with a note, and the failure names it; never a prompt
    rc, host, err = vp(*args, env=clean_env(tmp_path))
    assert host["status"] == "auth-failed" and rc == 3
    assert f"key {key} is encrypted" in err and "ssh-add" in err
    assert "encrypted" in host["error"] and "Traceback" not in err


def test_key_readable_by_others_gets_openssh_warning(sshd: Sshd, tmp_path: Path) -> None:
    key = tmp_path / "open"
    shutil.copy(sshd.user_key, key)
    key.chmod(0o644)
    # two targets (the same sshd, with and without the user: one host written two ways is one target):
    # OpenSSH's warning once per run, not per host
    other = f"{sshd.target.split('@', 1)[1]}" if getpass.getuser() == sshd.target.split("@", 1)[0] else None
    if other is None:
        pytest.skip("needs the test's sshd user to be this user (the second target leaves the user out)")
    r = subprocess.run([*VP, "diagnose", sshd.target, other, "--format", "json", "--sample", "0",
                        "-i", str(key), "--known-hosts", str(sshd.known_hosts)],
                       capture_output=True, text=True, timeout=60, env=clean_env(tmp_path))  # fmt: skip
    hosts = json.loads(r.stdout)["hosts"]
    assert [h["status"] for h in hosts] == ["auth-failed", "auth-failed"] and r.returncode == 3
    assert r.stderr.count("WARNING: UNPROTECTED PRIVATE KEY FILE!") == 1
    assert f"Permissions 0644 for '{key}' are too open." in r.stderr
    assert "This private key will be ignored." in r.stderr
    key.chmod(0o600)
    _rc, host, _err = vp(sshd.target, "-i", str(key), "--known-hosts", str(sshd.known_hosts), env=clean_env(tmp_path))
    assert host["status"] == "ok", host["error"]


def test_public_key_given_to_i_is_named_as_such(sshd: Sshd, agent: str, tmp_path: Path) -> None:
    pub = Path(str(sshd.user_key) + ".pub")
    rc, host, err = vp(sshd.target, "-i", str(pub), "--known-hosts", str(sshd.known_hosts), env=clean_env(tmp_path))
    assert host["status"] == "auth-failed" and rc == 3
    assert f"{pub} is a public key (.pub)" in err and f"({sshd.user_key})" in err
    # OpenSSH lets a .pub pick the agent's key: so does vastprobe
    ssh_add(agent, sshd.user_key)
    _rc, host, err = vp(sshd.target, "-i", str(pub), "--known-hosts", str(sshd.known_hosts),
                        env=clean_env(tmp_path, SSH_AUTH_SOCK=agent))  # fmt: skip
    assert host["status"] == "ok", host["error"]


def test_ssh_config_user_known_hosts_file_verifies_without_known_hosts(sshd: Sshd, tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(f"Host *\n  UserKnownHostsFile {sshd.known_hosts}\n  IdentityFile {sshd.user_key}\n")
    _rc, host, _ = vp(sshd.target, "-F", str(cfg), env=clean_env(tmp_path))
    assert host["status"] == "ok", host["error"]
    # the same through ~/.ssh/config, found by itself
    (tmp_path / ".ssh").mkdir()
    shutil.copy(cfg, tmp_path / ".ssh" / "config")
    _rc, host, _ = vp(sshd.target, env=clean_env(tmp_path))
    assert host["status"] == "ok", host["error"]


def test_strict_host_key_checking_from_config_and_command_line_wins(sshd: Sshd, tmp_path: Path) -> None:
    kh = tmp_path / "kh"
    cfg = tmp_path / "config"
    cfg.write_text(f"Host *\n  UserKnownHostsFile {kh}\n  StrictHostKeyChecking accept-new\n"
                   f"  IdentityFile {sshd.user_key}\n")  # fmt: skip
    rc, host, err = vp(sshd.target, "-F", str(cfg), "--host-key-check", "strict", env=clean_env(tmp_path))
    assert host["status"] == "host-key-rejected" and rc == 3 and not kh.exists()
    assert "is not in " + str(kh) in host["error"] and "SHA256:" in host["error"]
    _rc, host, err = vp(sshd.target, "-F", str(cfg), env=clean_env(tmp_path))
    assert host["status"] == "ok", host["error"]
    name = f"[127.0.0.1]:{sshd.port}"
    fp = fingerprint(Path(str(sshd.host_key) + ".pub"))
    assert f"vastprobe: Permanently added '{name}' (ED25519 {fp}) to {kh}" in err
    assert kh.read_text().startswith(f"{name} ssh-ed25519 ")
    # -o StrictHostKeyChecking=no beats the config too, and warns
    _rc, host, err = vp(sshd.target, "-F", str(cfg), "-o", "StrictHostKeyChecking=no",
                        "-o", f"UserKnownHostsFile={tmp_path / 'none'}", env=clean_env(tmp_path))  # fmt: skip
    assert host["status"] == "ok" and "host key checking is OFF (-o StrictHostKeyChecking)" in err


def test_hash_known_hosts_hashes_the_new_entry(sshd: Sshd, tmp_path: Path) -> None:
    kh = tmp_path / "kh"
    base = (sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(kh))
    _rc, host, err = vp(*base, "--host-key-check", "accept-new", "-o", "HashKnownHosts=yes", env=clean_env(tmp_path))
    assert host["status"] == "ok", host["error"]
    assert f"Permanently added '[127.0.0.1]:{sshd.port}'" in err and f"to {kh}" in err
    line = kh.read_text()
    assert line.startswith("|1|") and "127.0.0.1" not in line and len(line.splitlines()) == 1
    assert oct(kh.stat().st_mode & 0o777) == "0o644"
    # ssh-keygen finds the hashed entry, and a strict run trusts it
    found = subprocess.run(
        ["ssh-keygen", "-F", f"[127.0.0.1]:{sshd.port}", "-f", str(kh)], capture_output=True, text=True
    )
    assert found.returncode == 0 and "found" in found.stdout
    _rc, host, _ = vp(*base, env=clean_env(tmp_path))
    assert host["status"] == "ok", host["error"]


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_changed_host_key_names_both_fingerprints_and_the_line(sshd: Sshd, tmp_path: Path, policy: str) -> None:
    kh = tmp_path / "known_hosts"
    wrong = keygen(tmp_path / "wrong")
    pub = Path(str(wrong) + ".pub").read_text().split()
    kh.write_text(f"# fleet\notherhost {pub[0]} {pub[1]}\n[127.0.0.1]:{sshd.port} {pub[0]} {pub[1]}\n")
    before = kh.read_text()
    rc, host, _ = vp(sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(kh), "--host-key-check", policy,
                     env=clean_env(tmp_path))  # fmt: skip
    err = host["error"]
    assert host["status"] == "host-key-rejected" and rc == 3
    assert "host key CHANGED" in err
    assert fingerprint(Path(str(sshd.host_key) + ".pub")) in err  # what the server sent
    assert fingerprint(Path(str(wrong) + ".pub")) in err  # what was recorded
    assert f"{kh}:3" in err and f"ssh-keygen -f '{kh}' -R '[127.0.0.1]:{sshd.port}'" in err
    assert "accept-new never replaces" in err
    assert kh.read_text() == before


def test_jump_flag_through_a_second_sshd(tmp_path: Path) -> None:
    user_key = keygen(tmp_path / "user")
    jump = start_sshd(tmp_path / "jump", user_key=user_key, log_level="DEBUG1")
    inner = start_sshd(tmp_path / "inner", user_key=user_key, address="127.0.0.2")
    try:
        kh = tmp_path / "known_hosts"
        kh.write_text(jump.known_hosts.read_text() + inner.known_hosts.read_text())
        # -p is the target's port, never the jump host's (as OpenSSH)
        _rc, host, _ = vp("root@127.0.0.2", "-p", str(inner.port), "-J", f"root@127.0.0.1:{jump.port}",
                          "-i", str(user_key), "--known-hosts", str(kh), env=clean_env(tmp_path))  # fmt: skip
        assert host["status"] == "ok", host["error"]
        assert jump.log is not None and "direct-tcpip" in jump.log.read_text()
        # a dead jump host is named as such
        rc, host, _ = vp("root@127.0.0.2", "-p", str(inner.port), "-J", f"root@127.0.0.1:{dead_port()}",
                         "-i", str(user_key), "--known-hosts", str(kh), env=clean_env(tmp_path))  # fmt: skip
        assert host["status"] == "unreachable" and "via jump host" in host["error"] and rc == 3
    finally:
        jump.stop()
        inner.stop()


def test_dash_o_options_and_ssh_url(sshd: Sshd, tmp_path: Path) -> None:
    _rc, host, _ = vp("127.0.0.1", "-o", "User=root", "-o", f"Port={sshd.port}", "-o", f"IdentityFile={sshd.user_key}",
                      "-o", f"UserKnownHostsFile={sshd.known_hosts}", "-o", "IdentitiesOnly=yes",
                      env=clean_env(tmp_path))  # fmt: skip
    assert host["status"] == "ok", host["error"]
    url = f"ssh://root@127.0.0.1:{sshd.port}"
    _rc, host, _ = vp(url, "-i", str(sshd.user_key), "--known-hosts", str(sshd.known_hosts), env=clean_env(tmp_path))
    assert host["status"] == "ok" and host["target"] == url, host["error"]


def test_identities_only_and_identity_agent(sshd: Sshd, agent: str, tmp_path: Path) -> None:
    other = keygen(tmp_path / "other")  # not authorized
    ssh_add(agent, sshd.user_key)
    cfg = tmp_path / "config"
    base = (sshd.target, "-F", str(cfg), "--known-hosts", str(sshd.known_hosts))
    # IdentityAgent from ssh_config, no SSH_AUTH_SOCK: the agent's key works
    cfg.write_text(f"Host *\n  IdentityAgent {agent}\n  IdentityFile {other}\n")
    _rc, host, _ = vp(*base, env=clean_env(tmp_path))
    assert host["status"] == "ok", host["error"]
    # IdentitiesOnly: only the configured identity, so the agent's other key is not offered
    cfg.write_text(f"Host *\n  IdentityAgent {agent}\n  IdentityFile {other}\n  IdentitiesOnly yes\n")
    _rc, host, _ = vp(*base, env=clean_env(tmp_path))
    assert host["status"] == "auth-failed" and str(other) in host["error"]
    # IdentityAgent none beats SSH_AUTH_SOCK
    cfg.write_text(f"Host *\n  IdentityAgent none\n  IdentityFile {other}\n")
    _rc, host, _ = vp(*base, env=clean_env(tmp_path, SSH_AUTH_SOCK=agent))
    assert host["status"] == "auth-failed"


@pytest.mark.slow
def test_connect_timeout_from_ssh_config_and_command_line_wins(tmp_path: Path) -> None:
    """A listener that accepts and never speaks: the handshake bound comes from ConnectTimeout."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        cfg = tmp_path / "config"
        cfg.write_text("Host *\n  ConnectTimeout 1\n")
        t0 = time.monotonic()
        rc, host, _ = vp(f"root@127.0.0.1:{port}", "-F", str(cfg), env=clean_env(tmp_path))
        assert host["status"] == "unreachable" and "--connect-timeout 1s" in host["error"] and rc == 3
        assert time.monotonic() - t0 < 8
        _rc, host, _ = vp(f"root@127.0.0.1:{port}", "-F", str(cfg), "--connect-timeout", "2", env=clean_env(tmp_path))
        assert "--connect-timeout 2s" in host["error"]


def test_off_warns_once_per_run(tmp_path: Path) -> None:
    key = keygen(tmp_path / "user")
    a = start_sshd(tmp_path / "a", user_key=key, addresses=["127.0.0.1", "127.0.0.2", "127.0.0.3"])
    try:
        targets = ",".join(f"root@127.0.0.{i}:{a.port}" for i in (1, 2, 3))
        r = subprocess.run([*VP, "sweep", "-w", targets, "--format", "json", "--sample", "0", "-i", str(key),
                            "--known-hosts", str(tmp_path / "none"), "--host-key-check", "off"],
                           capture_output=True, text=True, timeout=60, env=clean_env(tmp_path))  # fmt: skip
        assert [h["status"] for h in json.loads(r.stdout)["hosts"]] == ["ok"] * 3, r.stderr
        assert r.stderr.count("host key checking is OFF") == 1, r.stderr
    finally:
        a.stop()


def test_ipv6_targets_keep_their_brackets(tmp_path: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    s6 = start_sshd(tmp_path / "v6", address="::1")
    try:
        target = f"[::1]:{s6.port}"
        _rc, host, _ = vp(target, "-l", "root", "-i", str(s6.user_key), "--known-hosts", str(s6.known_hosts),
                          env=clean_env(tmp_path))  # fmt: skip
        assert host["status"] == "ok" and host["target"] == target, host["error"]
        # a bare address is a host, not host:port; its failure keeps the brackets in the sentence
        _rc, host, _ = vp("::1", "-p", str(dead_port()), "-l", "root", env=clean_env(tmp_path))
        assert host["target"] == "::1" and host["status"] == "unreachable" and "root@[::1]:" in host["error"]
    finally:
        s6.stop()


def test_verbose_shows_the_handshake(sshd: Sshd, tmp_path: Path) -> None:
    _rc, host, err = vp(sshd.target, "-v", "-i", str(sshd.user_key), "--known-hosts", str(sshd.known_hosts),
                        env=clean_env(tmp_path))  # fmt: skip
    assert host["status"] == "ok"
    assert "vastprobe: ssh:" in err and "offering " + str(sshd.user_key) in err
    _rc, _host, quiet = vp(sshd.target, "-i", str(sshd.user_key), "--known-hosts", str(sshd.known_hosts),
                           env=clean_env(tmp_path))  # fmt: skip
    assert quiet == ""


def test_dash_p_and_dash_l_win_over_the_target_as_in_ssh_and_say_so(sshd: Sshd, tmp_path: Path) -> None:
    """`ssh -p 2603 ssh://h:2605` connects to 2603 and `ssh -l bob alice@h` logs in as bob (ssh -G
    says so): the command line wins over the target's own port and user. The target here names a
    port where nothing listens and a user sshd refuses; -p and -l reach the real sshd as root."""
    env = clean_env(tmp_path)
    target = f"nobody@127.0.0.1:{dead_port()}"
    _rc, host, err = vp(target, "-p", str(sshd.port), "-l", "root", "-i", str(sshd.user_key),
                       "--known-hosts", str(sshd.known_hosts), env=env)  # fmt: skip
    assert host["status"] == "ok", host["error"]
    assert f"warning: -p {sshd.port} wins over the port in {target}" in err
    assert f"connecting to port {sshd.port}" in err
    assert f"warning: -l root wins over the user in {target}" in err and "logging in as root" in err
    # the same port or user twice is no conflict, and a target without them is -p's to fill in
    _rc, host, err = vp(f"root@127.0.0.1:{sshd.port}", "-p", str(sshd.port), "-l", "root", "-i", str(sshd.user_key),
                        "--known-hosts", str(sshd.known_hosts), env=env)  # fmt: skip
    assert host["status"] == "ok" and "warning" not in err, err
    if shutil.which("ssh") is not None:  # the rule itself, from OpenSSH
        g = subprocess.run(["ssh", "-G", "-p", "2603", "-l", "bob", "ssh://alice@h:2605"], capture_output=True,
                           text=True, stdin=subprocess.DEVNULL, env=env)  # fmt: skip
        assert {"port 2603", "user bob"} <= set(g.stdout.splitlines()), g.stdout


def test_a_name_that_is_no_alias_in_the_ssh_config_says_so(tmp_path: Path) -> None:
    """The resolver's "cannot resolve" beside what the -F file knows: the name is no Host alias
    there, and the alias it likely meant. In a network namespace of its own (nothing to ask, no
    packet leaves), so the resolver fails at once."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare (util-linux) for a network namespace")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu-07 gpu-08\n  HostName 127.0.0.1\nHost gpu09\n  User root\nHost *\n  User root\n")

    def error(name: str) -> str:
        r = subprocess.run(["unshare", "-n", *VP, "diagnose", name, "-F", str(cfg), "--json", "--sample", "0"],
                           capture_output=True, text=True, timeout=60, env=clean_env(tmp_path))  # fmt: skip
        if not r.stdout:
            pytest.skip(f"no network namespace here: {r.stderr.strip()[:200]}")
        assert r.returncode == 3, r.stderr
        return json.loads(r.stdout)["hosts"][0]["error"]

    typo = error("gpu07")
    assert "cannot resolve host name 'gpu07'" in typo and f"(not a Host alias in {cfg}; did you mean gpu-07?)" in typo
    # named by a Host line (without HostName): an alias, so nothing to add
    assert "cannot resolve host name 'gpu09'" in (named := error("gpu09")) and "alias" not in named, named


def _recorded_line_by_line(path: Path, host: str, addr: str, port: int) -> list[int]:
    """What recorded_keys answered when it read every line for every host (its first version)."""
    from vastprobe.transport.ssh.asyncssh_lib import asyncssh

    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        s = line.strip()
        if not s or s.startswith(("#", "@")):
            continue
        pattern = s.split(None, 1)[0]
        if not (pattern.startswith("|") or host in pattern or addr in pattern or any(c in pattern for c in "*?!")):
            continue
        try:
            keys = asyncssh.import_known_hosts(s).match(host, addr, None if port == 22 else port)[0]
        except ValueError:
            continue
        out += [n for _ in keys]
    return out


def test_recorded_keys_find_what_reading_every_line_finds(tmp_path: Path) -> None:
    """The lines a changed key is compared with (ssh.hostkeys.recorded_keys, which indexes a file
    once per version of it): the same as reading every line, for a host whose name is part of
    others' (127.0.0.1 in 127.0.0.10), bracketed ports, hashed and wildcard entries, comments,
    markers and a broken line; a line added later is seen."""
    import base64
    import hashlib
    import hmac

    from vastprobe.transport.ssh.asyncssh_lib import asyncssh
    from vastprobe.transport.ssh.hostkeys import recorded_keys

    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().strip()
    salt = b"s" * 20
    digest = hmac.new(salt, b"[127.0.0.1]:2222", hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    kh = tmp_path / "known_hosts"
    kh.write_text(
        f"127.0.0.10 {key}\n[127.0.0.1]:2222 {key}\n# 127.0.0.1 in a comment\n[127.0.0.1]:2200 {key}\n"
        f"{hashed} {key}\n127.0.0.* {key}\n@revoked 127.0.0.1 {key}\ngpu01,127.0.0.1 {key}\n"
        "127.0.0.1 ssh-ed25519 AAAAbroken\n\n   gpu010 " + key + "  \n"
    )
    asks = [("127.0.0.1", "127.0.0.1", 2222), ("127.0.0.1", "127.0.0.1", 22), ("gpu01", "127.0.0.1", 22),
            ("gpu010", "10.0.0.1", 22), ("", "", 22), ("127.0.0.10", "127.0.0.10", 2200)]  # fmt: skip
    for host, addr, port in asks:
        got = [n for _path, n, _key in recorded_keys((str(kh),), host, addr, port)]
        assert got == _recorded_line_by_line(kh, host, addr, port), (host, addr, port)
    with kh.open("a") as f:  # accept-new appends: the next look reads the new version of the file
        f.write(f"[127.0.0.1]:2222 {key}\n")
    got = [n for _path, n, _key in recorded_keys((str(kh),), "127.0.0.1", "127.0.0.1", 2222)]
    assert got == _recorded_line_by_line(kh, "127.0.0.1", "127.0.0.1", 2222) and got[-1] == 12
