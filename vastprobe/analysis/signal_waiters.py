"""Whether a process asleep on its own locks is waiting for a signal: a handler can release a lock
that no thread can (`threading.Event().wait()`, set by a SIGTERM handler, is how a service waits
to be stopped)."""

from __future__ import annotations

from vastprobe.model import Process

#: Signals a program catches to be woken or told to stop: HUP, USR1, USR2, ALRM (its own timer), TERM,
#: CHLD (a child's exit), IO (signal-driven I/O), and the real-time signals from SIGRTMIN (34) up,
#: which only a program's own code uses (a POSIX timer's `timer_create(SIGEV_SIGNAL)`, a peer's
#: `sigqueue`): a job whose timer's SIGRTMIN handler sets what it waits on read STALLED, exit 1, and
#: finished 25 s later (found by a helper). SIGINT is not one: Python catches it in every program;
#: nor glibc's own 32 and 33, which every threaded program catches.
WAKE_SIGNALS = {
    1: "SIGHUP", 10: "SIGUSR1", 12: "SIGUSR2", 14: "SIGALRM", 15: "SIGTERM", 17: "SIGCHLD", 29: "SIGIO",
    34: "SIGRTMIN", **{n: f"SIGRTMIN+{n - 34}" for n in range(35, 65)},
}  # fmt: skip


#: The signal a service waits for to be told to stop: it ends the process, and answers no client
STOP_SIGNAL = "SIGTERM"


def wake_signals(p: Process) -> list[str]:
    """The wake-up signals `p` has a handler for (/proc/PID/status SigCgt)."""
    if not p.sig_cgt:
        return []
    names = [name for n, name in WAKE_SIGNALS.items() if p.sig_cgt >> (n - 1) & 1]
    rt = [x for x in names if x.startswith("SIGRTMIN")]
    if len(rt) > 2:  # a runtime that catches them all (Go's) is named once, not 31 times
        names = [*(x for x in names if x not in rt), f"{len(rt)} real-time signals ({rt[0]} to {rt[-1]})"]
    return names


def forked_from_threaded(p: Process, parent: Process | None) -> bool:
    """Forked without exec from a parent with threads: its parent's program (the same command line),
    the way multiprocessing's and DataLoader's `fork` workers are. Such a worker inherits the
    parent's handlers (a trainer's checkpoint-on-SIGTERM), which say nothing about it."""
    return parent is not None and parent.threads > 1 and bool(p.cmdline) and p.cmdline == parent.cmdline


def waits_for_a_signal(p: Process, parent: Process | None) -> list[str]:
    """The handlers that make `p`'s wait on its own locks a wait for a signal: none for a worker
    forked from a threaded parent."""
    return [] if forked_from_threaded(p, parent) else wake_signals(p)


#: How a person at a terminal ends a launcher that waits for Ctrl-C
CTRL_C = "SIGINT (Ctrl-C at its terminal)"


def waits_for_ctrl_c(p: Process, kids: list[Process]) -> bool:
    """A launcher in the foreground of its terminal, catching SIGINT, with children of its own alive:
    "workers running; Ctrl-C to stop", then `Event().wait()`. SIGINT is no wake-up signal elsewhere
    (Python catches it in every program), but here the terminal's Ctrl-C is how it ends: it read
    STALLED, exit 1, fork-deadlock, while its workers worked (found by a helper)."""
    foreground = p.tty_nr != 0 and p.tpgid is not None and p.tpgid == p.pgrp
    return foreground and bool(p.sig_cgt and p.sig_cgt >> 1 & 1) and any(k.state != "Z" for k in kids)
