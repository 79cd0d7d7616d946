"""Shell completion for bash, zsh and fish: the scripts, the answers they ask for, and what is worth
completing besides commands and options (rule slugs and codes; ssh_config Host aliases as targets).

Imported only when a shell asks (`_VASTPROBE_COMPLETE` set) or for --show-completion and
--install-completion: a plain run imports none of it (tests/test_cli_imports.py).

typer's own completion (`add_completion=True`) has been off since the first version, with no reason
written down; it costs little (typer imports its completion modules on every start anyway), but:
its --install-completion writes ~/.bashrc and the script with plain writes, where every file
vastprobe writes goes through vastprobe/fileio.py; it finds the shell by walking parent processes
(shellingham) and takes no shell name unless an environment variable says so; and its zsh and fish
answers run each help text through rich, an import on every TAB. So vastprobe answers the shell
itself, with click's walk of the command line (the command, then the parameter at the cursor).

The protocol: the shell sends the words up to the cursor in COMP_WORDS and the current word's index
in COMP_CWORD (bash's names, for all three shells); the instruction is `SHELL_complete` or
`SHELL_source` (typer's `complete_SHELL` is taken too). Each answer line is `plain,VALUE` (zsh and
fish: `\tHELP` after it). No answer (a path, a word no alias starts) completes file names.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PROG = "vastprobe"
COMPLETE_VAR = "_VASTPROBE_COMPLETE"
SHELLS = ("bash", "zsh", "fish")
MAX_CONFIG_FILES = 64  # ssh_config and the files it includes
MAX_CONFIG_BYTES = 1 << 20

BASH = r"""# vastprobe completion for bash (vastprobe --show-completion bash)
_vastprobe_completion() {
    local line
    local -a lines
    COMPREPLY=()
    mapfile -t lines < <(COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD=$COMP_CWORD _VASTPROBE_COMPLETE=bash_complete "$1" 2>/dev/null)
    for line in "${lines[@]}"; do
        [[ $line == plain,* ]] && COMPREPLY+=("${line#plain,}")
    done
    return 0
}
# -o default: no answer (a word that is no command, option or alias) completes file names
complete -o default -o nosort -F _vastprobe_completion vastprobe 2>/dev/null ||
    complete -o default -F _vastprobe_completion vastprobe
"""

ZSH = r"""#compdef vastprobe
# vastprobe completion for zsh (vastprobe --show-completion zsh)
_vastprobe() {
    local -a response plain described
    local line rest value
    response=("${(@f)$(COMP_WORDS="${words[1,CURRENT]}" COMP_CWORD=$((CURRENT - 1)) _VASTPROBE_COMPLETE=zsh_complete ${words[1]} 2>/dev/null)}")
    for line in "${response[@]}"; do
        [[ $line == plain,* ]] || continue
        rest=${line#plain,}
        value=${rest%%$'\t'*}
        if [[ $rest == *$'\t'* ]]; then
            described+=("${value//:/\\:}:${rest#*$'\t'}")
        else
            plain+=("$value")
        fi
    done
    (( ${#described} )) && _describe -V vastprobe described
    (( ${#plain} )) && compadd -V vastprobe -a plain
    (( ${#described} + ${#plain} )) || _files  # no answer: file names
    return 0
}
if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then
    _vastprobe "$@"
else
    compdef _vastprobe vastprobe
fi
"""

FISH = r"""# vastprobe completion for fish (vastprobe --show-completion fish)
function __vastprobe_complete
    set -l before (commandline -opc)
    set -l current (commandline -ct)
    set -l response (env COMP_WORDS="$before $current" COMP_CWORD=(count $before) _VASTPROBE_COMPLETE=fish_complete $before[1] 2>/dev/null)
    if test (count $response) -eq 0  # no answer: file names
        __fish_complete_path $current
        return
    end
    for line in $response
        string replace -r '^plain,' '' -- $line
    end
end
complete -c vastprobe -f -a '(__vastprobe_complete)'
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


# ---- answering the shell ---------------------------------------------------------------------


def parse_instruction(instruction: str) -> tuple[str, str] | None:
    """(shell, "complete" | "source") from `bash_complete` or typer's `complete_bash`; None if neither."""
    first, _, second = instruction.partition("_")
    if first in SHELLS and second in ("complete", "source"):
        return first, second
    if second in SHELLS and first in ("complete", "source"):
        return second, first
    return None


def respond(cli: Any, instruction: str) -> int:
    """What the shell's script asked for, on stdout: the script itself, or the completions."""
    import sys

    parsed = parse_instruction(instruction)
    if parsed is None:
        sys.stderr.write(f"vastprobe: {COMPLETE_VAR}={instruction!r}: want SHELL_complete or SHELL_source, "
                         f"SHELL one of {', '.join(SHELLS)}\n")  # fmt: skip
        return 2
    shell, what = parsed
    if what == "source":
        sys.stdout.write(SCRIPTS[shell])
        return 0
    words = shlex_split(os.environ.get("COMP_WORDS", ""))
    try:
        cword = int(os.environ.get("COMP_CWORD", ""))
    except ValueError:
        cword = len(words)
    args = words[1:cword]
    incomplete = words[cword] if 0 <= cword < len(words) else ""
    for item in completions(cli, args, incomplete):
        sys.stdout.write(_line(shell, item) + "\n")
    return 0


def completions(cli: Any, args: list[str], incomplete: str) -> list[Any]:
    """click's own walk of the command line (the command, then the parameter the cursor is at)."""
    from typer._click.shell_completion import ShellComplete

    class Walk(ShellComplete):  # the base class's context resolution, none of its shell formats
        name = "vastprobe"
        source_template = ""

        def source_vars(self) -> dict[str, Any]:
            return {}

        def get_completion_args(self) -> tuple[list[str], str]:
            return args, incomplete

        def format_completion(self, item: Any) -> str:
            return str(item.value)

    return Walk(cli, {}, PROG, COMPLETE_VAR).get_completions(args, incomplete)


def _line(shell: str, item: Any) -> str:
    value = _one_line(str(item.value))
    help_text = _one_line(item.help or "") if shell != "bash" else ""
    return f"plain,{value}\t{help_text}" if help_text else f"plain,{value}"


def _one_line(text: str) -> str:
    return " ".join(text.replace("\t", " ").split())


def shlex_split(text: str) -> list[str]:
    """As the shell split it, tolerating an unclosed quote in the word being typed."""
    lex = shlex.shlex(text, posix=True)
    lex.whitespace_split = True
    lex.commenters = ""
    out: list[str] = []
    try:
        out.extend(lex)
    except ValueError:
        out.append(lex.token)
    return out


# ---- what is worth completing ----------------------------------------------------------------


def rule_names(incomplete: str) -> list[tuple[str, str]]:
    """Rule slugs (and codes, once `VP` is typed) with each rule's one line."""
    from vastprobe.rules import RULES

    if incomplete[:2].upper() == "VP":
        return [(r.meta.code, r.meta.summary) for r in RULES if r.meta.code.startswith(incomplete.upper())]
    return [(r.meta.slug, r.meta.summary) for r in RULES if r.meta.slug.startswith(incomplete)]


def local_pids(ctx: Any, incomplete: str, limit: int = 500) -> list[tuple[str, str]]:
    """`--pid`'s values: this machine's processes (with their command lines) when the command line
    names `local` or no target yet; nothing for a remote target, whose PIDs are not known here."""
    # the targets typed so far: parsed, or (while completing, click parses resiliently) left in args
    named = [*((getattr(ctx, "params", None) or {}).get("targets") or []), *(getattr(ctx, "args", None) or [])]
    if any(t != "local" for t in named):
        return []
    out = []
    for name in sorted((n for n in os.listdir("/proc") if n.isdigit() and n.startswith(incomplete)), key=int):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read(200).split(b"\0")
        except OSError:
            continue
        if argv[0]:  # not a kernel thread
            out.append((name, _one_line(b" ".join(argv).decode("utf-8", "replace").strip())[:80]))
        if len(out) >= limit:
            break
    return out


def targets(ctx: Any, incomplete: str, local: bool = True) -> list[str]:
    """`local` (the registry's one-word targets) and the Host aliases of the ssh_config this command
    line would read (`-F`, else ~/.ssh/config), keeping a `user@` already typed; in a list (`-w a,b`, `-J h1,h2`) the last
    element."""
    done, _, word = incomplete.rpartition(",")
    lead = done + "," if done else ""
    user, at, host = word.rpartition("@")
    lead += user + at
    config = (getattr(ctx, "params", None) or {}).get("ssh_config")
    from vastprobe.transport import registry

    names = (registry.words() if local and not at and not done else []) + ssh_aliases(config)
    listed = set(done.split(","))  # `-w gpu01,<TAB>` offers the others
    return [lead + name for name in dict.fromkeys(names) if name.startswith(host) and name not in listed]


def ssh_aliases(config: str | os.PathLike[str] | None = None) -> list[str]:
    """The names `Host` lines give (no wildcards, no negations) in `config`, else ~/.ssh/config,
    and the files they `Include` (a relative name is under ~/.ssh, as ssh_config(5) says), in file
    order. Bounded: 64 files of at most 1 MiB; what cannot be read is skipped."""
    import glob

    home_ssh = Path("~/.ssh").expanduser()
    queue = [Path(config).expanduser() if config else home_ssh / "config"]
    seen: set[Path] = set()
    out: list[str] = []
    while queue and len(seen) < MAX_CONFIG_FILES:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            with open(path, "rb") as f:
                text = f.read(MAX_CONFIG_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        for key, values in _config_lines(text):
            if key == "host":
                out += [v for v in values if v and not any(c in v for c in "*?!")]
            elif key == "include":
                for pattern in values:
                    p = Path(os.path.expanduser(pattern))
                    p = p if p.is_absolute() else home_ssh / p
                    queue += [Path(m) for m in sorted(glob.glob(str(p)))]
    return list(dict.fromkeys(out))


_KEYWORD = re.compile(r"^\s*([A-Za-z]+)(?:\s*=\s*|\s+)(.*)$")


def _config_lines(text: str) -> Iterable[tuple[str, list[str]]]:
    """(keyword in lower case, its values) for each line: `Host a b`, `Host=a`, quoted values."""
    for line in text.splitlines():
        m = _KEYWORD.match(line)
        if m is None:
            continue
        try:
            values = shlex.split(m.group(2), comments=True)
        except ValueError:
            values = m.group(2).split()
        yield m.group(1).lower(), values


# ---- --show-completion and --install-completion ------------------------------------------------


class ShellError(ValueError):
    """A shell vastprobe cannot complete for, or none named and none detected."""


def shell_for(value: str) -> str:
    """The shell asked for, or (an empty value) the one running vastprobe: $SHELL's name, as the
    shell a user installs completion for is their login shell."""
    asked = value.strip().lower()
    asked = "" if asked == "auto" else asked  # the option given without a shell
    name = asked or Path(os.environ.get("SHELL", "")).name
    if name in SHELLS:
        return name
    if asked:
        raise ShellError(f"no completion for {value!r}: want one of {', '.join(SHELLS)}")
    raise ShellError(
        f"cannot tell your shell ($SHELL is {os.environ.get('SHELL', 'unset')!r}): name one of {', '.join(SHELLS)}"
    )


def install(shell: str) -> tuple[Path, Path | None]:
    """Write the script where the shell looks for completions (atomically); for bash and zsh also
    add one line to the rc file that loads it, unless a line already does. Returns (script, rc
    file changed or None)."""
    from vastprobe.fileio import append_line, write_atomic

    home = Path("~").expanduser()
    if shell == "fish":
        fish_dir = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "fish" / "completions"
        fish_dir.mkdir(parents=True, exist_ok=True)
        return write_atomic(fish_dir / "vastprobe.fish", FISH), None
    if shell == "bash":
        script, rc = home / ".bash_completions" / "vastprobe.sh", home / ".bashrc"
        load = f"source {_home_relative(script)}"
    else:
        script, rc = home / ".zfunc" / "_vastprobe", home / ".zshrc"
        load = "fpath+=(~/.zfunc); autoload -Uz compinit && compinit"
    script.parent.mkdir(parents=True, exist_ok=True)
    written = write_atomic(script, SCRIPTS[shell])
    try:
        current = rc.read_text(errors="replace")
    except FileNotFoundError:
        current = ""
    if load in current:
        return written, None
    append_line(rc, f"{load}  # vastprobe completion\n")
    return written, rc


def _home_relative(path: Path) -> str:
    home = Path("~").expanduser()
    try:
        return "~/" + str(path.relative_to(home))
    except ValueError:
        return shlex.quote(str(path))
