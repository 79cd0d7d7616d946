"""The rule registry: one module per rule, each exporting RULE. Codes are never reused: a retired
rule keeps its code in RETIRED."""

from __future__ import annotations

from vastprobe.rules import (
    culprit_rank,
    d_state,
    db_lock_wait,
    deadlock,
    disk_full,
    do_wait_orphan,
    fifo_no_partner,
    file_lock_wait,
    fork_deadlock,
    fuse_no_answer,
    gpu_busy_no_progress,
    gpu_driver_error,
    gpu_link_degraded,
    gpu_memory_errors,
    gpu_missing,
    gpu_nvswitch_error,
    gpu_throttled,
    gpu_xid,
    idle_gpu,
    log_retry_loop,
    missing_logs,
    no_progress,
    oom_killed_child,
    pool_lost_task,
    socket_peer_wait,
    stopped_child,
    terminal_prompt,
    thread_deadlock,
    zombie_child,
)
from vastprobe.rules.base import Rule

RULES: tuple[Rule, ...] = tuple(
    m.RULE
    for m in (
        do_wait_orphan,
        oom_killed_child,
        idle_gpu,
        missing_logs,
        stopped_child,
        zombie_child,
        gpu_xid,
        gpu_driver_error,
        d_state,
        disk_full,
        file_lock_wait,
        db_lock_wait,
        socket_peer_wait,
        fifo_no_partner,
        fuse_no_answer,
        deadlock,
        fork_deadlock,
        thread_deadlock,
        pool_lost_task,
        culprit_rank,
        terminal_prompt,
        log_retry_loop,
        gpu_busy_no_progress,
        gpu_throttled,
        gpu_link_degraded,
        gpu_memory_errors,
        gpu_missing,
        gpu_nvswitch_error,
        no_progress,
    )
)
#: Codes of rules that were removed; never hand them out again.
RETIRED: dict[str, str] = {}
#: Codes used outside the rule modules (findings about the probe itself).
RESERVED = {
    "VP900": "probe-incomplete",
    "VP901": "probe-output-forged",
    "VP902": "probe-section-unreadable",
    "VP903": "py-spy-unavailable",
}


def find_rule(name: str) -> Rule | None:
    """By slug or by code (`do-wait-orphan`, `VP101`)."""
    return next((r for r in RULES if name in (r.meta.slug, r.meta.code) or name.upper() == r.meta.code), None)
