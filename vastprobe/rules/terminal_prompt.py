"""VP116 terminal-prompt: a watched process waits for someone to type at a terminal: a password, a
host-key confirmation, an installer's question. Nobody types on a batch host, so the job waits
forever in state S, and no counter, log or kernel message says why.

Read from the process's own wait: its system call reads an fd that is a terminal (/dev/pts/N,
/dev/tty*), or its wait channel is the terminal's read. An interactive shell at its own prompt (a
login shell, -i, or one with neither script nor -c, reading the terminal on its stdin) is no finding. A prompt is an error (a
stall) when --pid/--match named the job and two samples saw it unmoved, or with evidence that work
should be happening (a silent log); on a whole host a warning when it reads /dev/tty (opened to ask:
ssh, sudo, gpg), and otherwise a note: a REPL in someone's terminal waits for input by design. The
finding names the tmux pane or screen window to attach (analysis/terminals.py), else the session."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.stalls import stall_evidence
from vastprobe.analysis.terminals import SHELLS, interactive_shell, terminal_place
from vastprobe.analysis.wchan_families import waited_fd
from vastprobe.model import Evidence, Finding, Process, Severity, Unavailable
from vastprobe.rules.base import ONE_SAMPLE, Context, Rule, RuleMeta
from vastprobe.rules.chains import link, still_evidence

META = RuleMeta("terminal-prompt", "VP116", "warning", "a process waits for input at a terminal nobody types at")


def _controlling(p: Process) -> str | None:
    """/dev/pts/N from stat's tty_nr (Unix 98 ptys: majors 136-143), for a read of /dev/tty."""
    major, minor = (p.tty_nr >> 8) & 0xFFF, (p.tty_nr & 0xFF) | ((p.tty_nr >> 12) & 0xFFF00)
    return f"/dev/pts/{(major - 136) * 256 + minor}" if 136 <= major <= 143 else None


def _own_prompt(p: Process, tty: str | None) -> bool:
    """An interactive shell at its prompt, reading the terminal that is its stdin: the session's
    first shell, or one started inside it (`bash` typed at a prompt, `sh -c 'dash -i'`)."""
    if p.comm not in SHELLS or not interactive_shell(p):
        return False
    stdin = None if isinstance(p.fds, Unavailable) else next((e.path for e in p.fds if e.fd == 0), None)
    return tty is None or stdin == tty


#: Programs that hold a terminal's master for a person to type through: a login over ssh, a tmux or
#: screen session, a console, a container's terminal (docker's shim, podman's conmon), sudo's relay
TERMINAL_HOSTS = frozenset(
    {"sshd", "sshd-session", "tmux: server", "tmux", "screen", "SCREEN", "script", "login", "agetty", "getty",
     "dropbear", "mosh-server", "xterm", "konsole", "gnome-terminal-", "conmon", "containerd-shim", "sudo", "su"}
)  # fmt: skip


def _driver(ctx: Context, p: Process) -> Process | None:
    """The program typing at `p`'s terminal itself: the nearest ancestor holding a pty's master
    (/dev/ptmx), where that is no terminal a person types through (pexpect, expect, a test harness
    driving `bc` a line every 3 s). Said to wait for "someone to type", STALLED, exit 1, between two of
    its driver's lines (found by a helper)."""
    a = ctx.graph.pty_master_holder(p, within=4)
    if a is None or a.comm in TERMINAL_HOSTS or a.comm.startswith("containerd-shim"):
        return None
    return a


def check(ctx: Context) -> Iterator[Finding]:
    for p in ctx.in_scope():
        if ctx.graph.kind(p) != "tty":
            continue
        fd = waited_fd(p.syscall)
        entry = ctx.graph.waited_entry(p)
        tty = entry.path if entry is not None else None
        if _own_prompt(p, tty):
            continue
        pr = ctx.progress.get(p.pid)
        if pr is not None and pr.moved:
            continue  # someone typed, or it did something else in between
        driver = _driver(ctx, p)
        if driver is not None and not ctx.stopped_throughout(driver):
            continue  # its own driver types at it: a wait for its next line, whose pace the driver sets
        stall = stall_evidence(ctx, [p.pid], p.pid)
        # a named job that waited at a prompt over the whole window cannot go on until someone types:
        # nobody does on a batch host, so that is a stall from the first look (docs/evidence.md)
        proven = ctx.two_samples and ctx.options.explicit_scope
        sev: Severity = "error" if stall or proven else "info"
        if sev == "info" and ctx.two_samples and tty == "/dev/tty":
            # /dev/tty opened to ask (ssh's host key or password, sudo, gpg): a prompt, never a REPL's input
            sev = "warning"
        where = tty or "its terminal"
        if tty in (None, "/dev/tty") and (pts := _controlling(p)):
            where = f"{where} ({pts})"
        place = terminal_place(ctx, p)
        summary = f"{p.comm} ({p.pid}) waits for someone to type at {where}" + (
            f" {place.words}" if place.words else ""
        )
        if sev == "info" and not ctx.two_samples:
            summary += ONE_SAMPLE
        ev = [Evidence("wait", link(ctx, p.pid))]
        if fd is not None:
            ev.append(Evidence("/proc/syscall", f"{p.pid} ({p.comm}) reads fd {fd}" + (f" -> {tty}" if tty else "")))
        if p.cmdline:
            ev.append(Evidence("cmdline", " ".join(p.cmdline)[:300]))
        ev += still_evidence(ctx)
        if proven:
            ev.append(Evidence("proof", f"the named job's {p.comm} ({p.pid}) waited for typed input the whole window"))
        ev += stall.evidence
        yield META.finding(
            summary,
            [p.pid],
            ev,
            f"a prompt (a password, a host-key question, an installer's yes/no) that nobody on a batch host answers: "
            f"answer it at {where}"
            + (f" (`{place.attach}`)" if place.attach else f" {place.words}" if place.words else "")
            + f", or kill {p.pid} and make the step "
            "non-interactive (ssh -o BatchMode=yes with known_hosts set up, apt-get -y and "
            "DEBIAN_FRONTEND=noninteractive, GIT_TERMINAL_PROMPT=0, tokens from the environment)",
            sev,
        )


RULE = Rule(META, check)
