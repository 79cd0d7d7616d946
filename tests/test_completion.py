"""Shell completion as a shell runs it: the script vastprobe prints is sourced by a real bash (and
zsh, fish where installed), whose completion function asks the real vastprobe, with an ssh_config
under a temporary HOME or given by -F."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A HOME with an ssh_config (aliases, a wildcard, an Include) and `vastprobe` on PATH."""
    h = tmp_path / "home"
    (h / ".ssh" / "conf.d").mkdir(parents=True)
    (h / ".ssh" / "config").write_text(
        "Host gpu01 gpu02\n  HostName 127.0.0.1\nHost *.internal !bad\n  User root\nInclude conf.d/*.conf\n"
    )
    (h / ".ssh" / "conf.d" / "a.conf").write_text('Host="bastion"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vastprobe"
    exe.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m vastprobe "$@"\n')
    exe.chmod(0o755)
    return h


def env_for(home: Path, **extra: str) -> dict[str, str]:
    bin_dir = home.parent / "bin"
    env = {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    env.pop("_VASTPROBE_COMPLETE", None)
    env.update(extra)
    return env


def bash_complete(home: Path, line: str) -> list[str]:
    """COMPREPLY after TAB at the end of `line` (a trailing space: a new word), in a real bash that
    sourced `vastprobe --show-completion bash`."""
    words = line.split(" ")
    script = (
        "source <(vastprobe --show-completion bash) || exit 9\n"
        f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        '_vastprobe_completion vastprobe\nprintf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True, timeout=60,
                       env=env_for(home))  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [x for x in r.stdout.splitlines() if x]


def test_bash_completes_commands_options_aliases_and_rules(home: Path, tmp_path: Path) -> None:
    assert bash_complete(home, "vastprobe diag") == ["diagnose"]
    assert bash_complete(home, "vastprobe diagnose --sn") == ["--snapshot"]
    assert bash_complete(home, "vastprobe diagnose --format ") == ["table", "json", "ndjson"]
    # ssh_config Host aliases (not the wildcard nor the negation; an Include'd file's too) and local
    assert bash_complete(home, "vastprobe diagnose ") == ["local", "gpu01", "gpu02", "bastion"]
    assert bash_complete(home, "vastprobe diagnose root@g") == ["root@gpu01", "root@gpu02"]
    assert bash_complete(home, "vastprobe sweep -w gpu01,") == ["gpu01,gpu02", "gpu01,bastion"]
    assert bash_complete(home, "vastprobe collect b") == ["bastion"]
    # -F: that file's aliases instead of ~/.ssh/config's
    other = tmp_path / "fleet_config"
    other.write_text("Host trainer-7\n  HostName 127.0.0.1\n")
    assert bash_complete(home, f"vastprobe diagnose -F {other} tr") == ["trainer-7"]
    # rule slugs, and codes once VP is typed
    assert bash_complete(home, "vastprobe rules stop") == ["stopped-child"]
    assert "VP102" in bash_complete(home, "vastprobe rules VP10")
    # --pid: this machine's PIDs for `local` (here: our own), none for a remote target
    me = str(os.getpid())
    assert me in bash_complete(home, f"vastprobe diagnose local --pid {me[:-1]}")
    assert bash_complete(home, f"vastprobe diagnose gpu01 --pid {me[:-1]}") == []
    # no answer (a path): bash's own file names (-o default)
    assert bash_complete(home, f"vastprobe diagnose x -i {home}/.ssh/con") == []
    spec = subprocess.run(["bash", "--norc", "-c", "source <(vastprobe --show-completion bash); complete -p vastprobe"],
                          capture_output=True, text=True, env=env_for(home), timeout=60).stdout  # fmt: skip
    assert "-o default" in spec and "-F _vastprobe_completion vastprobe" in spec


def test_the_protocol_takes_click_and_typer_instructions(home: Path) -> None:
    for instruction in ("bash_complete", "complete_bash"):
        r = subprocess.run(["vastprobe"], capture_output=True, text=True, timeout=60, env=env_for(
            home, _VASTPROBE_COMPLETE=instruction, COMP_WORDS="vastprobe diagnose gpu0", COMP_CWORD="2"))  # fmt: skip
        assert r.stdout.splitlines() == ["plain,gpu01", "plain,gpu02"], (instruction, r.stdout, r.stderr)
    r = subprocess.run(["vastprobe"], capture_output=True, text=True, timeout=60,
                       env=env_for(home, _VASTPROBE_COMPLETE="bash_source"))  # fmt: skip
    assert r.stdout == subprocess.run(["vastprobe", "--show-completion", "bash"], capture_output=True, text=True,
                                      env=env_for(home)).stdout  # fmt: skip
    bad = subprocess.run(["vastprobe"], capture_output=True, text=True, env=env_for(home, _VASTPROBE_COMPLETE="x"))
    assert bad.returncode == 2 and "want SHELL_complete or SHELL_source" in bad.stderr


def test_install_completion_writes_the_script_and_one_line_in_the_rc(home: Path) -> None:
    (home / ".bashrc").write_text("alias ll='ls -l'\n")
    for _ in range(2):  # twice: the rc line is added once
        r = subprocess.run(["vastprobe", "--install-completion"], capture_output=True, text=True, timeout=60,
                           env=env_for(home, SHELL="/bin/bash"))  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "bash completion installed in" in r.stderr
    rc = (home / ".bashrc").read_text()
    assert rc.startswith("alias ll='ls -l'\n") and rc.count("vastprobe completion") == 1
    spec = subprocess.run(["bash", "--rcfile", str(home / ".bashrc"), "-i", "-c", "complete -p vastprobe"],
                          capture_output=True, text=True, env=env_for(home), timeout=60).stdout  # fmt: skip
    assert "_vastprobe_completion vastprobe" in spec
    for shell, path in (("zsh", ".zfunc/_vastprobe"), ("fish", ".config/fish/completions/vastprobe.fish")):
        r = subprocess.run(["vastprobe", "--install-completion", shell], capture_output=True, text=True,
                           env=env_for(home))  # fmt: skip
        assert r.returncode == 0 and (home / path).read_text().startswith(("#compdef", "# vastprobe")), r.stderr
    unknown = subprocess.run(["vastprobe", "--show-completion"], capture_output=True, text=True,
                             env=env_for(home, SHELL="/bin/tcsh"))  # fmt: skip
    assert unknown.returncode == 2 and "cannot tell your shell" in unknown.stderr and not unknown.stdout


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh (apt-get install zsh)")
def test_zsh_script(home: Path) -> None:
    """The zsh function run with its completion builtins stood in by functions that print what they
    are given (they exist only inside a completion widget)."""
    script = (
        "compdef() { :; }\n_describe() { print -rl -- ${(P)3}; }\ncompadd() { print -rl -- ${(P)4}; }\n"
        '_files() { print FILES; }\neval "$(vastprobe --show-completion zsh)" || exit 9\n'
        "words=(vastprobe diag); CURRENT=2; _vastprobe\nwords=(vastprobe diagnose gp); CURRENT=3; _vastprobe\n"
        "words=(vastprobe diagnose -i /no/such/pa); CURRENT=4; _vastprobe\n"
    )
    r = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, env=env_for(home), timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("diagnose:Probe each target once") and lines[1:] == ["gpu01", "gpu02", "FILES"], lines


@pytest.mark.skipif(shutil.which("fish") is None, reason="needs fish (apt-get install fish)")
def test_fish_script(home: Path) -> None:
    """fish's own completion engine (`complete -C`) over the sourced script."""
    script = ("vastprobe --show-completion fish | source; complete -C 'vastprobe diag'; "
              "complete -C 'vastprobe diagnose gp'; complete -C 'vastprobe rules stopped'")  # fmt: skip
    r = subprocess.run(["fish", "--no-config", "-c", script], capture_output=True, text=True, env=env_for(home),
                       timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("diagnose\tProbe each target once") and lines[1:3] == ["gpu01", "gpu02"], lines
    assert lines[3].startswith("stopped-child\t"), lines
