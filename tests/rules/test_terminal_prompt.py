"""terminal-prompt on real prompts: ssh asking to trust a host key, under a real pseudo-terminal
(`script`), as a job started from tmux would; and an interactive shell at its own prompt."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import children_of, proc_state, proc_wchan, vastprobe_json, wait_for
from tests.sshd import Sshd, start_sshd
from vastprobe.analysis.terminals import interactive_shell
from vastprobe.model import Process

pytestmark = pytest.mark.skipif(
    shutil.which("script") is None or shutil.which("ssh") is None, reason="needs script (bsdutils) and ssh"
)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> Iterator[Sshd]:
    s = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield s
    s.stop()


def under_a_terminal(reap: list, command: str) -> subprocess.Popen:
    """`command` on a new pseudo-terminal nobody types at (script's own input never ends)."""
    p = subprocess.Popen(
        ["sh", "-c", f"sleep 100000 | exec script -qfc {shlex.quote(command)} /dev/null"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    reap.append(p)
    return p


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def descendant(root: int, name: str) -> int | None:
    stack = [root]
    while stack:
        for k in children_of(stack.pop()):
            if comm(k) == name:
                return k
            stack.append(k)
    return None


def reads_its_terminal(pid: int) -> bool:
    """Blocked in a read of its terminal (/dev/tty, a pty): the fd its system call names."""
    try:
        call = Path(f"/proc/{pid}/syscall").read_text().split()
        return call[0] == "0" and os.readlink(f"/proc/{pid}/fd/{int(call[1], 16)}").startswith(
            ("/dev/tty", "/dev/pts/")
        )
    except (OSError, IndexError, ValueError):
        return False


@pytest.fixture
def host_key_prompt(sshd: Sshd, reap, tmp_path: Path) -> tuple[int, int]:
    """(the job's bash, its ssh), ssh waiting for yes/no on an unknown host key."""
    kh = tmp_path / "known_hosts"
    kh.touch()
    ssh = (f"ssh -o UserKnownHostsFile={kh} -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=ask "
           f"-i {sshd.user_key} -p {sshd.port} root@127.0.0.1 true")  # fmt: skip
    top = under_a_terminal(reap, f"bash -c {shlex.quote(ssh + '; echo done')}")
    # reading its terminal, not still the server's key exchange (wait_woken is a socket read's too: on a
    # loaded CI machine the probe read ssh still waiting on sshd, and found no prompt)
    wait_for(lambda: (s := descendant(top.pid, "ssh")) is not None and reads_its_terminal(s), timeout=20,
             what="ssh at its prompt")  # fmt: skip
    ssh_pid = descendant(top.pid, "ssh")
    assert ssh_pid is not None
    bash = int(Path(f"/proc/{ssh_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return bash, ssh_pid


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_a_prompt_in_a_tmux_pane_names_the_pane_to_attach(sshd: Sshd, reap, tmp_path: Path) -> None:
    """ssh asking to trust a host key inside a detached tmux session on a socket of its own: the finding
    names the pane, the session and the server, and the command that attaches to it; diagnosed as a
    whole host (no scope), a read of /dev/tty unmoved over two samples is a warning, never only a note."""
    kh = tmp_path / "known_hosts"
    kh.touch()
    sock = tmp_path / "tmux.sock"
    name = f"vp-prompt-{os.getpid()}"
    ssh = (f"ssh -o UserKnownHostsFile={kh} -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=ask "
           f"-i {sshd.user_key} -p {sshd.port} root@127.0.0.1 true")  # fmt: skip
    subprocess.run(["tmux", "-S", str(sock), "new-session", "-d", "-s", name, f"bash -c {shlex.quote(ssh + '; sleep 600')}"],
                   check=True, env={k: v for k, v in os.environ.items() if not k.startswith("TMUX")})  # fmt: skip
    try:
        server = int(subprocess.run(["tmux", "-S", str(sock), "display", "-p", "-t", name, "#{pid}"], capture_output=True,
                                    text=True, check=True).stdout)  # fmt: skip
        pane = subprocess.run(["tmux", "-S", str(sock), "display", "-p", "-t", name, "#{pane_id}"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        wait_for(lambda: (s := descendant(server, "ssh")) is not None and proc_wchan(s) in ("wait_woken", "n_tty_read"),
                 timeout=20, what="ssh at its prompt in the pane")  # fmt: skip
        ssh_pid = descendant(server, "ssh")
        assert ssh_pid is not None
        rc, host = vastprobe_json("--pid", str(ssh_pid), "--sample", "0.5")
        [f] = prompts(host)
        assert f"in tmux pane {pane} (session {name}, server {server})" in f["summary"], f["summary"]
        assert f"(`tmux -S {sock} attach -t {pane}`)" in f["hint"], f["hint"]
        assert f["severity"] == "error" and rc == 1
        _rc, whole = vastprobe_json("--sample", "0.5")
        [g] = [g for g in prompts(whole) if ssh_pid in g["pids"]]
        assert g["severity"] == "warning" and f"tmux pane {pane}" in g["summary"], g
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], check=False)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_a_prompt_in_a_later_tmux_session_is_not_named_after_the_first(reap, tmp_path: Path) -> None:
    """Two sessions on one server: a prompt in the second was said to be in the first, whose name the
    server's command line holds (found by a helper). It is named by its own id now."""
    sock = tmp_path / "tmux.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    tmux = ["tmux", "-S", str(sock)]
    subprocess.run([*tmux, "new-session", "-d", "-s", "first", "sleep 600"], check=True, env=env)
    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "second", "bash -c 'read -p ok? x'"], check=True, env=env)
        server = int(subprocess.run([*tmux, "display", "-p", "-t", "second", "#{pid}"], capture_output=True, text=True,
                                    check=True).stdout)  # fmt: skip
        pane, sid = subprocess.run([*tmux, "display", "-p", "-t", "second", "#{pane_id} #{session_id}"],
                                   capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
        wait_for(lambda: (b := descendant(server, "bash")) is not None and proc_wchan(b) in ("wait_woken", "n_tty_read"),
                 what="read at its prompt in the second session")  # fmt: skip
        reader = descendant(server, "bash")
        assert reader is not None
        rc, host = vastprobe_json("--pid", str(reader), "--sample", "0.5")
        [f] = prompts(host)
        assert f"in tmux pane {pane} (session {sid}, server {server})" in f["summary"], f["summary"]
        assert "session first" not in f["summary"] and rc == 1 and host["verdict"] == "stalled"
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)


@pytest.mark.parametrize("sample", ["1", "0"])
def test_a_job_writing_to_a_pane_of_a_stopped_tmux_server_is_stalled(reap, tmp_path: Path, sample: str) -> None:
    """A job printing in a tmux pane whose server is SIGSTOPped blocks writing its terminal: it read
    STALLED as a prompt ("waits for someone to type", the hint to attach a stopped server), and HEALTHY
    with one sample (found by a helper). The write waits on the master's holder, the server: stopped,
    STALLED from one sample too."""
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    sock = tmp_path / "tmux.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    tmux = ["tmux", "-S", str(sock)]
    printer = f"{sys.executable} -c 'while True: print(\"x\" * 200, flush=True)'"
    subprocess.run([*tmux, "new-session", "-d", "-s", "job", printer], check=True, env=env)
    server = int(subprocess.run([*tmux, "display", "-p", "#{pid}"], capture_output=True, text=True, check=True,
                                env=env).stdout)  # fmt: skip
    try:
        wait_for(lambda: descendant(server, "python") or descendant(server, "python3"), what="the job")
        job = descendant(server, "python") or descendant(server, "python3")
        assert job is not None
        os.kill(server, signal.SIGSTOP)
        wait_for(lambda: proc_state(server) == "T" and Path(f"/proc/{job}/syscall").read_text().split()[0] == "1",
                 what="the job blocked writing its terminal")  # fmt: skip
        rc, host = vastprobe_json("--pid", str(job), "--sample", sample)
        found = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
        assert not prompts(host), found
        assert any(str(server) in s and "stopped" in s for r, sev, s in found if sev == "error"), found
        assert host["verdict"] == "stalled" and rc == 1, found
    finally:
        os.kill(server, signal.SIGCONT)
        subprocess.run([*tmux, "kill-server"], check=False, env=env)


def prompts(host: dict) -> list[dict]:
    return [f for f in host["findings"] if f["rule"] == "terminal-prompt"]


def test_ssh_asking_to_trust_a_host_key(host_key_prompt) -> None:
    bash, ssh = host_key_prompt
    rc, host = vastprobe_json("--pid", str(bash), "--sample", "0.5")
    [f] = prompts(host)
    # the named job waited at the prompt the whole window: a stall from the first diagnosis
    assert f["severity"] == "error" and f["pids"] == [ssh] and rc == 1 and host["verdict"] == "stalled"
    assert any(e["source"] == "proof" for e in f["evidence"]), f["evidence"]
    assert f["summary"].startswith(f"ssh ({ssh}) waits for someone to type at /dev/tty (/dev/pts/")
    assert any(e["detail"].endswith("-> /dev/tty") for e in f["evidence"]) and "BatchMode=yes" in f["hint"]
    assert not [g for g in host["findings"] if g["rule"] == "do-wait-orphan"]


def test_with_a_silent_log_it_is_the_stall(host_key_prompt, tmp_path: Path) -> None:
    bash, _ssh = host_key_prompt
    log = tmp_path / "job.log"
    log.write_text("cloning the weights\n")
    os.utime(log, (1, 1))
    rc, host = vastprobe_json("--pid", str(bash), "--sample", "0.5", "--log", str(log), "--stale-after", "60")
    [f] = prompts(host)
    assert f["severity"] == "error" and rc == 1
    assert not [g for g in host["findings"] if g["rule"] == "do-wait-orphan"]  # said once, by its own rule
    # the prompt is why the log went quiet: it leads, the stale log follows from it
    assert host["incidents"][0]["root"]["rule"] == "terminal-prompt", [i["headline"] for i in host["incidents"]]
    assert host["headline"].startswith(f["summary"]), host["headline"]


def test_one_sample_is_a_note(host_key_prompt) -> None:
    bash, _ssh = host_key_prompt
    rc, host = vastprobe_json("--pid", str(bash), "--sample", "0")
    [f] = prompts(host)
    assert f["severity"] == "info" and f["summary"].endswith("(seen in one sample)") and rc == 0


@pytest.mark.parametrize("command", ["dash -i", "sh -c 'dash -i; true'", "sh -c 'dash; true'"])
def test_an_interactive_shell_at_its_own_prompt_is_no_finding(reap, command: str) -> None:
    """dash reads its terminal with read() (bash's readline polls first): the same wait as a prompt.
    Whether script's own $SHELL -c execs it (bash does, dash may not) must not matter: a shell started
    inside another (nobody's session leader) is at its prompt too."""
    if shutil.which("dash") is None:
        pytest.skip("needs dash")
    top = under_a_terminal(reap, command)
    wait_for(lambda: (d := descendant(top.pid, "dash")) is not None and proc_wchan(d) in ("wait_woken", "n_tty_read"),
             what="dash at its prompt")  # fmt: skip
    dash = descendant(top.pid, "dash")
    rc, host = vastprobe_json("--pid", str(dash), "--sample", "0.5")
    assert dash in host["scope"] and not prompts(host) and rc == 0


def test_a_script_reading_the_terminal_is_a_prompt(reap) -> None:
    """The same shell, the same read of its stdin, but a -c script asking a question: a prompt."""
    if shutil.which("dash") is None:
        pytest.skip("needs dash")
    top = under_a_terminal(reap, "dash -c 'printf \"Continue? \"; read answer; echo $answer'")
    wait_for(lambda: (d := descendant(top.pid, "dash")) is not None and proc_wchan(d) in ("wait_woken", "n_tty_read"),
             what="dash at its question")  # fmt: skip
    dash = descendant(top.pid, "dash")
    rc, host = vastprobe_json("--pid", str(dash), "--sample", "0.5")
    [f] = prompts(host)
    assert f["pids"] == [dash] and f["severity"] == "error" and rc == 1 and host["verdict"] == "stalled"


#: A program writing to a pty whose master its parent drains 64 KiB every 3 s (a paced reader: expect,
#: a log collector behind `script`): the writer blocks in write() on its terminal between the reads
PTY_PACED = r"""
import os, pty, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 200 + '\\n')"])
while True:
    os.read(fd, 65536)
    time.sleep(3)
"""


def test_a_program_writing_to_a_slowly_drained_pty_is_not_a_prompt(reap) -> None:
    """A write to a terminal blocks until its master reads: it was said to wait "for someone to type at
    /dev/pts/N" ("reads fd 1"), an error, STALLED, exit 1 (found by a helper). Output nobody drains yet
    is no prompt; here the reader wakes on its timer: HEALTHY."""
    top = subprocess.Popen([sys.executable, "-c", PTY_PACED], start_new_session=True)
    reap.append(top)
    wait_for(lambda: len(children_of(top.pid)) == 1, what="the writer")
    [writer] = children_of(top.pid)
    wait_for(lambda: Path(f"/proc/{writer}/syscall").read_text().split()[0] == "1", what="the writer blocked in write")
    rc, host = vastprobe_json("--pid", str(top.pid), "--sample", "1")
    assert not prompts(host), prompts(host)
    assert host["verdict"] == "healthy" and rc == 0, [
        (f["rule"], f["severity"], f["summary"]) for f in host["findings"]
    ]


#: A driver (pexpect's shape) typing a line every 3 s at a program that reads its terminal; `--stopped`:
#: the driver stops itself after its first line (the control: nobody types any more)
PTY_TYPIST = r"""
import os, pty, signal, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-c", "while True: input()"])
while True:
    os.write(fd, b"1\n")
    if sys.argv[1:] == ["--stopped"]:
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(3)
    os.read(fd, 65536)
"""


@pytest.mark.parametrize("driver", ["typing", "stopped"])
def test_a_program_its_own_driver_types_at_is_no_prompt(reap, driver: str) -> None:
    """A program reading a pty whose master its parent holds and writes a line every 3 s (pexpect,
    expect): said to wait "for someone to type", STALLED, exit 1, between two lines (found by a
    helper). The driver types: no prompt. Stopped, it types no more: the prompt stands."""
    top = subprocess.Popen([sys.executable, "-c", PTY_TYPIST, *(["--stopped"] if driver == "stopped" else [])],
                           start_new_session=True)  # fmt: skip
    reap.append(top)
    wait_for(lambda: len(children_of(top.pid)) == 1, what="the program")
    [reader] = children_of(top.pid)
    wait_for(lambda: proc_wchan(reader) in ("wait_woken", "n_tty_read"), what="the program reading its terminal")
    if driver == "stopped":
        wait_for(lambda: proc_state(top.pid) == "T", what="the driver stopped")
    rc, host = vastprobe_json("--pid", str(top.pid), "--sample", "1")
    found = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    if driver == "stopped":
        assert prompts(host) and host["verdict"] == "stalled" and rc == 1, found
        return
    assert not prompts(host) and host["verdict"] == "healthy" and rc == 0, found


@pytest.mark.parametrize(
    ("argv", "interactive"),
    [
        (("-bash",), True),
        (("bash",), True),
        (("dash", "-i"), True),
        (("bash", "--login"), True),
        (("bash", "--rcfile", "/root/.jobrc"), True),
        (("bash", "-o", "vi"), True),
        (("bash", "-s", "arg"), True),
        (("sh", "-c", "dash -i"), False),
        (("bash", "-ec", "read x"), False),
        (("bash", "setup.sh"), False),
        (("bash", "-x", "--", "setup.sh"), False),
        (("busybox", "sh"), True),
        (("busybox", "sh", "setup.sh"), False),
    ],
)
def test_which_shells_are_at_their_own_prompt(argv: tuple[str, ...], interactive: bool) -> None:
    """By argv as the shells themselves decide (bash(1) INVOCATION): options, -c, then a script."""
    p = Process(pid=9, ppid=1, comm=argv[0].lstrip("-"), state="S", pgrp=9, session=1, tty_nr=0, starttime=0,
                threads=1, rss_kb=None, hwm_kb=None, uid=0, tracer_pid=0, nspid=(9,), sig_ign=None, sig_cgt=None,
                cmdline=argv, wchan="n_tty_read", fds=(), fds_truncated=False, memory_cgroup=None, cgroup_v2=None,
                samples=(), kernel_thread=False)  # fmt: skip
    assert interactive_shell(p) is interactive


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_a_job_suspended_with_ctrl_z_in_an_interactive_shell_is_a_note_on_a_whole_host(tmp_path: Path) -> None:
    """Someone on a shared machine pressed Ctrl-Z on a pager or a REPL in their shell: nothing waits on
    it, its user resumes it with `fg`. The whole host read STALLED, exit 1, on it (found by a helper).
    Named with --pid, it is the job, stopped: a stall. A program that is no such tool (a trainer run
    with `&`, here a `sleep`) stopped the same way is a stall on the whole host too: nothing in /proc
    tells its SIGTTIN or SIGSTOP from a Ctrl-Z (found by a helper)."""
    sock = tmp_path / "tmux.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    tmux = ["tmux", "-S", str(sock)]
    subprocess.run([*tmux, "new-session", "-d", "-s", "z", "bash --norc --noprofile"], check=True, env=env)
    try:
        shell = int(subprocess.run([*tmux, "display", "-p", "-t", "z", "#{pane_pid}"], capture_output=True, text=True,
                                   check=True).stdout)  # fmt: skip
        at_prompt = ("n_tty_read", "wait_woken", "poll_schedule_timeout.constprop.0", "poll_schedule_timeout")
        jobs = {}
        for name, line in (("python3", "/usr/bin/python3 -q"), ("sleep", "sleep 600")):
            wait_for(lambda: proc_wchan(shell) in at_prompt, what="the shell at its prompt")
            subprocess.run([*tmux, "send-keys", "-t", "z", line, "Enter"], check=True)
            wait_for(lambda n=name: descendant(shell, n) is not None, what=f"{name} started")
            job = descendant(shell, name)
            assert job is not None
            if name == "python3":
                wait_for(lambda j=job: proc_wchan(j) in at_prompt, what="the REPL at its prompt")
            subprocess.run([*tmux, "send-keys", "-t", "z", "C-z"], check=True)
            wait_for(lambda j=job: proc_state(j) == "T" and proc_wchan(shell) in at_prompt,
                     what=f"{name} suspended, the shell back at its prompt")  # fmt: skip
            jobs[name] = job
        _rc, whole = vastprobe_json("--sample", "0.5")
        mine = {p: [(f["rule"], f["severity"]) for f in whole["findings"] if p in f["pids"]] for p in jobs.values()}
        assert mine[jobs["python3"]] == [("stopped-child", "info")], whole["findings"]
        assert mine[jobs["sleep"]] == [("stopped-child", "error")], whole["findings"]
        assert whole["verdict"] == "stalled"  # the stopped sleep, at least
        note = next(f for f in whole["findings"] if jobs["python3"] in f["pids"])
        assert "a job suspended in an interactive shell" in note["summary"] and "`fg`" in note["hint"]
        rc, named = vastprobe_json("--pid", str(jobs["python3"]), "--sample", "0.5")
        f = next(f for f in named["findings"] if f["rule"] == "stopped-child")
        assert f["severity"] == "error" and named["verdict"] == "stalled" and rc == 1, named["findings"]
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)


#: A REPL with a connection open, at its prompt: select() on its terminal alone (psql's way)
_REPL = (
    "import select, socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
    "c = socket.create_connection(s.getsockname()); a, _ = s.accept(); "
    "select.select([sys.stdin], [], [])"
)


def test_a_repl_selecting_on_its_terminal_is_not_said_to_poll_its_connection(reap) -> None:
    """Found by a helper: psql at its prompt selects on fd 0, its terminal, and was said to poll its only
    connection, its server blamed for not answering. select()'s first argument says which fds it
    watches: none past the terminal."""
    top = under_a_terminal(reap, f"{shlex.quote(sys.executable)} -c {shlex.quote(_REPL)}")
    wait_for(lambda: (k := descendant(top.pid, "python3") or descendant(top.pid, "python")) is not None
             and proc_wchan(k).startswith(("poll_schedule_timeout", "do_select")), what="the REPL at its prompt")  # fmt: skip
    repl = descendant(top.pid, "python3") or descendant(top.pid, "python")
    assert repl is not None
    rc, host = vastprobe_json("--pid", str(repl), "--sample", "0.5")
    socket_waits = [f for f in host["findings"] if f["rule"] == "socket-peer-wait"]
    assert not socket_waits, socket_waits
    assert not any("polls its only connection" in e["detail"] for f in host["findings"] for e in f["evidence"])
    [f] = prompts(host)  # a named job waiting for typed input over the window: the stall it is
    assert f["severity"] == "error" and host["verdict"] == "stalled" and rc == 1, host["findings"]
