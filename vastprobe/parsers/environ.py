"""The distributed-training variables of multi-threaded processes' environments, and the tmux pane or
screen window of processes asleep on a terminal (TMUX, TMUX_PANE, STY, WINDOW):

    /proc/812/environ:RANK=3
    /proc/812/environ:MASTER_ADDR=10.0.0.1

The probe prints only allow-listed names; the allow-list is applied here again, so a target that
sends more (a forged section, an older probe) can never put another variable in a report: secrets
live in environments.
"""

from __future__ import annotations

import re

from vastprobe.parsers.procfs_lines import group_by_pid
from vastprobe.untrusted.secrets import redact_text

#: The names that say who is who in a distributed job, and which terminal multiplexer pane a process
#: is in; nothing else of an environment is kept.
ALLOWED = re.compile(
    r"(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|ROLE_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_RUN_ID"
    r"|SLURM_JOB_ID|SLURM_PROCID|CUDA_VISIBLE_DEVICES|NCCL_[A-Z0-9_]{1,64}|TORCH_NCCL_[A-Z0-9_]{1,64}"
    r"|TORCH_FR_[A-Z0-9_]{1,64}|TMUX|TMUX_PANE|STY|WINDOW)",
    re.ASCII,
)
MAX_NAMES = 48
MAX_VALUE = 256
#: names that say what the value is a secret, whatever prefix the allow-list admits them by
#: (NCCL_PASSWORD, NCCL_IB_SECRET, TORCH_NCCL_TOKEN, NCCL_PWD, TORCH_NCCL_PW: found by helpers); the
#: probe skips them too
SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|KEY|CRED|AUTH|(?:^|_)PWD?(?:_|$)", re.ASCII)
#: the probe cuts each `NAME=value` entry to this many characters: a value cut there may end in part of
#: a token too short to be told one (its first 23 characters leaked; found by a helper)
PROBE_ENTRY_CUT = 256
_TAIL_WORD = re.compile(r"[A-Za-z0-9_+/=-]+$")


def parse_env_section(text: str) -> dict[int, tuple[tuple[str, str], ...]]:
    """PID -> its allow-listed variables, in the order the environment holds them."""
    out: dict[int, tuple[tuple[str, str], ...]] = {}
    for pid, lines in group_by_pid(text, "environ").lines.items():
        kept: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition("=")
            if (
                sep
                and ALLOWED.fullmatch(name)
                and not SECRET_NAME.search(name)
                and name not in kept
                and len(kept) < MAX_NAMES
            ):
                # an allowed name may still carry one: MASTER_ADDR=http://user:PASSWORD@host, a run id
                # of `token=…`: masked as a command line's are
                text = value.replace("\x1e", "\n")
                if len(line) >= PROBE_ENTRY_CUT or len(text) > MAX_VALUE:
                    text = _TAIL_WORD.sub("", text[:MAX_VALUE]) + "…"  # what was cut, and the word it cut
                kept[name] = redact_text(text)
        if kept:
            out[pid] = tuple(kept.items())
    return out
