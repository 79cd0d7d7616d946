"""The snapshot's `excluded_pids`: the probe's own processes (its shell's session and descendants,
the BusyBox `timeout` watchers of this probe and of one run a moment before) and the transport's
that runs it, which the analysis leaves out of what it says about the host. It is a module of its
own because it is no source's parser: it reads the process table that the stat and cmdline
parsers made, with what meta says of the probe's shell and what the transport's kind says of its
own processes (transport/registry.py)."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.parsers import proc_stat
from vastprobe.probe.script import ProbeParams, longest_command_bound
from vastprobe.untrusted.numbers import read_digits


def build_excluded(
    procs: dict[int, proc_stat.StatRecord],
    cmdlines: dict[int, tuple[str, ...]],
    shell_pid: int | None,
    shell_ppid: int | None,
    transport: str,
    clk_tck: int,
    params: ProbeParams,
    uids: dict[int, int | None] | None = None,
) -> tuple[int, ...]:
    """The probe's own processes and its transport's, in pid order (`procs`: the first sample's;
    `uids`: each process's real uid, where its status was read)."""
    longest = longest_command_bound(params)
    excluded = _excluded(procs, cmdlines, shell_pid, shell_ppid, transport, clk_tck, longest, uids or {})
    return tuple(sorted(excluded))


#: Commands the probe runs under BusyBox `timeout`, whose watcher process lives in a session of its own.
_PROBE_TIMEOUT_ARGV = (("-s", "KILL"), ("1", "true"), ("-t", "1", "true"))
#: How long past its bound an earlier probe's BusyBox `timeout` watcher may live: it counts the bound
#: down a second at a time (ending sooner once it sees its command gone), with room for the scheduler
_WATCHER_LINGERS = 2


def _probe_watcher(
    r: proc_stat.StatRecord, argv: tuple[str, ...], shell: proc_stat.StatRecord, clk_tck: int, longest: int
) -> bool:
    """A BusyBox `timeout` watcher with the probe's own arguments, started by this probe, or by an
    earlier one recently enough that it may still be counting down its bound. One whose
    arguments were gone when the probe read them (it ended in between, or is a zombie) is judged by
    the longest bound the probe gives a command."""
    mine = r.starttime >= shell.starttime
    if argv:
        shape = next((a for a in _PROBE_TIMEOUT_ARGV if tuple(argv[1 : 1 + len(a)]) == a), None)
        if shape is None:
            return False
        if mine:
            return True
        # `timeout -s KILL N cmd` (BusyBox 1.30+), `timeout -s KILL -t N cmd` (older); the probe's
        # test of which it is, `timeout [-t] 1 true`, is bounded at 1
        given = (argv[4:5] if argv[3:4] == ("-t",) else argv[3:4]) if shape == ("-s", "KILL") else ("1",)
        secs = read_digits(given[0], 4) if given else None
        # never longer than the probe's own longest bound: a tenant's stalled process named `timeout`
        # with `-s KILL 9999` was dropped from the scope, and the host read HEALTHY
        secs = min(secs, longest) if secs is not None else None
    else:
        secs = longest
    if r.session != r.pid:
        return False  # a watcher is a session of its own
    return mine or (secs is not None and shell.starttime - r.starttime <= (secs + _WATCHER_LINGERS) * clk_tck)


def _excluded(
    procs: dict[int, proc_stat.StatRecord],
    cmdlines: dict[int, tuple[str, ...]],
    shell_pid: int | None,
    shell_ppid: int | None,
    transport: str,
    clk_tck: int,
    longest: int,
    uids: dict[int, int | None],
) -> set[int]:
    """The probe's own session and descendants, and the transport that runs it (what its kind's
    own_processes says, transport/registry.py: for `local`, vastprobe and its ancestors; for ssh,
    the sshd session; for a container's exec, nothing above the shell, whose parent is outside the
    container): found by session and ancestry (one pass over a children index), never by a
    command name alone. A transport this version does not know is taken as ssh's."""
    from vastprobe.transport.registry import SSH, kind_named

    if shell_pid is None:
        return set()
    excluded = {shell_pid}
    shell = procs.get(shell_pid)
    if shell is not None and shell.session > 0:
        excluded |= {pid for pid, r in procs.items() if r.session == shell.session}
    children: dict[int, list[int]] = {}
    for pid, r in procs.items():
        children.setdefault(r.ppid, []).append(pid)
    stack = list(excluded)
    while stack:
        for kid in children.get(stack.pop(), ()):
            if kid not in excluded:
                excluded.add(kid)
                stack.append(kid)
    # BusyBox `timeout` leaves a watcher (a session of its own) per bounded command: ours started
    # after the probe shell and carries exactly the arguments the probe gave it. An earlier probe's
    # (a `watch` round a second ago) outlives its command (to its bound's end at most): one that
    # started before this shell, no longer ago than its own bound and a second or two, is that probe's.
    # A watcher runs as the probe does: a tenant's stalled process named `timeout` is not one.
    if shell is not None:
        own_uid = uids.get(shell_pid)
        for pid, r in procs.items():
            if (
                r.comm == "timeout"
                and (own_uid is None or uids.get(pid) in (None, own_uid))
                and _probe_watcher(r, cmdlines.get(pid, ()), shell, clk_tck, longest)
            ):
                excluded.add(pid)
    own = (kind_named(transport) or SSH).own_processes
    if own == "none":
        return excluded
    if own == "caller":
        parent = cmdlines.get(shell_ppid or -1, ())
        if "vastprobe" in {a.rsplit("/", 1)[-1] for a in parent[:3]}:
            # vastprobe and what ran it: the operator's shell, a wrapper script, cron's sh (whose
            # command line holds --match's own pattern), up to but not including PID 1
            excluded.update(_ancestry(procs, shell_ppid))
        return excluded
    for cur in _ancestry(procs, shell_ppid):
        r = procs[cur]
        joined = " ".join(cmdlines.get(cur, ()))
        session_like = r.comm.startswith("sshd") and ("@" in joined or "[priv]" in joined or r.comm != "sshd")
        if not session_like:
            break
        excluded.add(cur)
    return excluded


def _ancestry(procs: dict[int, proc_stat.StatRecord], pid: int | None) -> Iterator[int]:
    """`pid` and its ancestors, up to but not including PID 1 (a PPid loop ends it too)."""
    seen: set[int] = set()
    while pid and pid in procs and pid > 1 and pid not in seen:
        seen.add(pid)
        yield pid
        pid = procs[pid].ppid
