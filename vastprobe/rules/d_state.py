"""VP109 d-state: a watched process in uninterruptible sleep (D) for the whole window: block I/O,
NFS/FUSE, or a driver call (NVIDIA). It cannot be killed until the call returns.

With one sample (--sample 0) there is no window: `rm`, `awk` or an exec passes through D for a few
milliseconds all the time. Then only the kernel's hung-task report for that PID (D for 120 s or
more) makes it a warning; otherwise it is a note."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.stalls import stall_evidence
from vastprobe.analysis.wchan_families import BLOCK_IO_WAITS, NVIDIA_PREFIXES, family, wait_kind
from vastprobe.model import CgroupMemory, Evidence, Finding, Process, Unavailable
from vastprobe.rules.base import ONE_SAMPLE, Context, Rule, RuleMeta
from vastprobe.rules.chains import asleep_throughout

#: The freezer's own waits (v1's refrigerator, v2's trap): a task there is frozen
FREEZER_WAITS = frozenset({"refrigerator", "do_freezer_trap"})

#: Waits that sleep interruptibly (S): seen in D, the task was frozen there (a frozen task keeps its
#: wait channel and reads D). A paused container read as a storage hang (found by a helper)
FROZEN_WAITS = frozenset(
    {"sleep", "futex", "event-loop", "signal", "child", "accept", "pipe-read", "socket-read", "tty"}
)

#: Of those, the waits no kernel path sleeps in uninterruptibly (a socket's wait_woken and a terminal's
#: are generic waits some drivers use so): D there proves a freezer from one read
FROZEN_FOR_SURE = FROZEN_WAITS - {"socket-read", "tty"}

#: Where a vfork's parent waits (D) for its child to exec or exit: not storage (found by a helper)
VFORK_WAITS = frozenset({"kernel_clone", "wait_for_vfork_done", "do_fork", "copy_process"})

META = RuleMeta("d-state", "VP109", "error", "a watched process is stuck in uninterruptible sleep (D)")


#: Where cgroup v2's freezer holds a task: asleep (S) in its signal-delivery trap, which nothing but
#: a thaw ends (do_freezer_trap, inlined into get_signal on some kernels; a stop reads T there)
V2_FROZEN_WAITS = frozenset({"do_freezer_trap", "get_signal"})


def check(ctx: Context) -> Iterator[Finding]:
    for p in ctx.in_scope():
        if _frozen_by_v2(ctx, p):
            w = family(p.wchan) if isinstance(p.wchan, str) else ""
            yield META.finding(
                f"{p.comm} ({p.pid}) is frozen in {w} (its cgroup's freezer)",
                [p.pid],
                [
                    Evidence("/proc/stat", f"state S in {len(p.samples)} sample(s), in the freezer's trap"),
                    Evidence(
                        "proof", f"asleep in {w}, where only cgroup v2's freezer holds a task: only a thaw moves it"
                    ),
                ],
                f"its cgroup is frozen (`docker pause`, `podman pause`, `systemctl freeze`): see `cat /proc/{p.pid}/cgroup` "
                "and that cgroup's cgroup.events (frozen 1), and thaw it (`docker unpause`, `echo 0 > …/cgroup.freeze`)",
                "error",
            )
            continue
        if not ctx.in_d_throughout(p):
            continue  # not D at every read, or moving (heavy I/O): slow rather than stuck
        if ctx.gone_by_second_sample(p):
            continue  # seen once, gone by the second sample: it was not stuck
        w = "" if isinstance(p.wchan, Unavailable) else family(p.wchan)
        nvidia = w.startswith(NVIDIA_PREFIXES)
        frozen = w in FREEZER_WAITS or wait_kind(w, None) in FROZEN_WAITS
        ev = [Evidence("/proc/stat", f"state D in {len(p.samples)} sample(s) over {ctx.snapshot.sample_window:.1f}s")]
        ev.append(Evidence("/proc/wchan", w or "unknown"))
        memcg = _under_oom(ctx, p) if w.startswith("mem_cgroup_oom") else None
        if memcg is not None:
            # the cgroup's OOM killer is off and it is at its limit: nothing moves until memory is freed in
            # it or its limit raised. It read as storage, and HEALTHY at one sample (found by a helper)
            ev.append(Evidence(f"{memcg.directory}/memory.oom_control", "under_oom 1: at a limit, the OOM killer off"))
            if memcg.limit_bytes:
                # its own limit; with none of its own, the limit and the disabled OOM killer are an ancestor's
                # (the kernel marks the whole subtree under_oom): a hint naming its own files fixed nothing
                where = f"at its limit of {memcg.limit_bytes // 2**20} MiB"
                fix = (
                    f"raise its limit (`echo NEW > {memcg.directory}/memory.limit_in_bytes`), kill a process in it, "
                    f"or turn its OOM killer back on (`echo 0 > {memcg.directory}/memory.oom_control`)"
                )
            else:
                where = "at the limit of a cgroup above it"
                fix = (
                    f"find the cgroup above {memcg.path} whose memory.oom_control reads oom_kill_disable 1 and raise "
                    "its memory.limit_in_bytes, kill a process under it, or write 0 to its memory.oom_control"
                )
            yield META.finding(
                f"{p.comm} ({p.pid}) waits for memory in its cgroup {memcg.path}, {where} with the OOM killer disabled",
                [p.pid],
                ev,
                f"nothing there runs until memory is freed: {fix} (docker's --oom-kill-disable sets it)",
                "error",
            )
            continue
        if w in VFORK_WAITS:
            hint = (
                f"a vfork (posix_spawn, or a program's own vfork) waits for its child to exec or exit: the child "
                f"is where it is stuck; see the children of {p.pid} (`ps --ppid {p.pid}`)"
            )
        elif nvidia:
            hint = "blocked inside the NVIDIA driver: check `nvidia-smi` and the kernel log for Xid errors; a GPU reset or reboot may be needed"
        elif frozen:
            hint = (
                f"D in {w}, the freezer's or a wait that sleeps interruptibly unless frozen: its cgroup is likely frozen (`docker pause`, "
                f"`podman pause`, a cgroup's freezer); see `cat /proc/{p.pid}/cgroup` and that cgroup's cgroup.freeze or "
                "freezer.state, and thaw it (`docker unpause`)"
            )
        else:
            hint = "blocked in the kernel (disk, NFS/FUSE, driver): check the kernel log for hung-task lines and the storage it uses"
        summary = f"{p.comm} ({p.pid}) is in uninterruptible sleep in {w or '?'}" + (" (frozen?)" if frozen else "")
        hung = ctx.hung_tasks(p.pid)
        if ctx.two_samples:
            stall = stall_evidence(ctx, (p.pid,), p.pid)
            if w in BLOCK_IO_WAITS and not hung and not stall:
                ev.append(Evidence("progress", f"no I/O completed over {ctx.snapshot.sample_window:.1f}s"))
                hint = (
                    "waiting on its disk, with no request finishing over the window: a device slower than a request "
                    "a window (throttled, saturated) looks the same as a hung one; run again with a longer window "
                    "(--sample 10), see the device's queue (`iostat -x 1`); the kernel logs a task blocked for 120 s"
                )
                yield META.finding(summary, [p.pid], ev, hint, "warning")
                continue
            ev += [Evidence("kernel log", hung[-1].line)] if hung else list(stall.evidence)
            yield META.finding(summary, [p.pid], ev, hint, "error")
            continue
        if hung:
            ev.append(Evidence("kernel log", hung[-1].line))
            yield META.finding(summary, [p.pid], ev, hint, "warning")
            continue
        if w in FREEZER_WAITS or wait_kind(w, None) in FROZEN_FOR_SURE:
            # D in a wait the kernel sleeps in interruptibly, and only there: nothing but a freezer puts it
            # in D, and only a thaw moves it, as only SIGCONT moves a stopped one. A paused container read
            # HEALTHY at --sample 0 (found by a helper)
            ev.append(Evidence("proof", f"D in {w}, which sleeps interruptibly unless frozen: only a thaw moves it"))
            yield META.finding(summary, [p.pid], ev, hint, "error")
            continue
        hint = "seen in one sample: a process doing I/O passes through D all the time; a second sample (--sample 1, the default) tells"
        yield META.finding(summary + ONE_SAMPLE, [p.pid], ev, hint, "info")


def _frozen_by_v2(ctx: Context, p: Process) -> bool:
    """Asleep in cgroup v2's freezer trap at every read (and still over the window). A paused container
    on a cgroup v2 host read HEALTHY, no finding, with one sample or two (found by a helper)."""
    return isinstance(p.wchan, str) and family(p.wchan) in V2_FROZEN_WAITS and asleep_throughout(ctx, p)


def _under_oom(ctx: Context, p: Process) -> CgroupMemory | None:
    """The v1 memory cgroup of `p` when it reads under_oom 1 (its OOM killer disabled, at its limit)."""
    return next(
        (cg for cg in ctx.snapshot.cgroups if cg.version == "v1" and cg.path == p.memory_cgroup and cg.oom == 1),
        None,
    )


RULE = Rule(META, check)
