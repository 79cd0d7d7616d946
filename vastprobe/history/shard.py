"""`--shard K/N`: N controllers split one inventory by a stable hash of each target (sha256, the
same on every machine and Python run, unlike `hash()`), so each host is swept by exactly one.

`--shard auto` reads K and N from the engine that started the controller: a Kubernetes Indexed Job
(`JOB_COMPLETION_INDEX`, 0-based, with N from `--shards`/`VASTPROBE_SHARDS`: a pod cannot see its
Job's completions) or a Slurm array (`SLURM_ARRAY_TASK_ID` within `SLURM_ARRAY_TASK_MIN`,
`_STEP`, `_MAX` and `_COUNT`). Anything missing, contradictory or out of range is a `ShardError`:
a wrong split would sweep some hosts twice and others never."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")
_SHARD = re.compile(r"([0-9]{1,4})/([0-9]{1,4})")
_INDEX = re.compile(r"[0-9]{1,9}")
AUTO = "auto"
MAX_SHARDS = 9999
K8S_INDEX = "JOB_COMPLETION_INDEX"
SHARDS_ENV = "VASTPROBE_SHARDS"
SLURM_ID, SLURM_COUNT, SLURM_MIN = "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"
SLURM_MAX, SLURM_STEP = "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP"


class ShardError(ValueError):
    pass


def parse_shard(text: str) -> tuple[int, int]:
    m = _SHARD.fullmatch(text.strip())
    if m is None:
        raise ShardError(f"--shard {text!r}: want K/N, e.g. 1/3, or auto")
    k, n = int(m.group(1)), int(m.group(2))
    if not 1 <= k <= n:
        raise ShardError(f"--shard {text!r}: K must be between 1 and N")
    return k, n


def shard_of(target: str, n: int) -> int:
    """1-based shard of a target."""
    digest = hashlib.sha256(target.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


def in_shard(items: Sequence[T], targets: Sequence[str], k: int, n: int) -> list[T]:
    return [item for item, t in zip(items, targets, strict=True) if shard_of(t, n) == k]


def _number(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        if default is not None:
            return default
        raise ShardError(f"--shard auto: {name} is not set")
    if _INDEX.fullmatch(raw.strip()) is None:
        raise ShardError(f"--shard auto: {name}={raw[:40]!r} is not a non-negative whole number")
    return int(raw.strip())


def _checked_count(n: int, source: str) -> int:
    if not 1 <= n <= MAX_SHARDS:
        raise ShardError(f"--shard auto: {source} = {n}: want 1 to {MAX_SHARDS} shards")
    return n


def shard_from_environment(env: Mapping[str, str], shards: int | None = None) -> tuple[int, int, str]:
    """(K, N, where they came from) for `--shard auto`; `shards` is `--shards N` (or VASTPROBE_SHARDS)."""
    k8s = (env.get(K8S_INDEX) or "").strip() != ""
    slurm = (env.get(SLURM_ID) or "").strip() != ""
    if k8s and slurm:
        raise ShardError(f"--shard auto: both {K8S_INDEX} (Kubernetes) and {SLURM_ID} (Slurm) are set; use --shard K/N")
    if k8s:
        index = _number(env, K8S_INDEX)
        if shards is None:
            raise ShardError(
                f"--shard auto: {K8S_INDEX}={index} (a Kubernetes Indexed Job) needs the shard count: pass "
                f"--shards N or set {SHARDS_ENV} to the Job's completions"
            )
        n = _checked_count(shards, "--shards")
        if index >= n:
            raise ShardError(f"--shard auto: {K8S_INDEX}={index} is not below --shards {n} (indexes run 0 to N-1)")
        return index + 1, n, f"Kubernetes Indexed Job, {K8S_INDEX}={index}"
    if slurm:
        task = _number(env, SLURM_ID)
        n = _checked_count(_number(env, SLURM_COUNT), SLURM_COUNT)
        low = _number(env, SLURM_MIN)
        step = _number(env, SLURM_STEP, 1) or 1
        high = _number(env, SLURM_MAX, low + (n - 1) * step)
        offset = task - low
        if high != low + (n - 1) * step or offset < 0 or offset % step or offset // step >= n:
            raise ShardError(
                f"--shard auto: the Slurm array ({SLURM_ID}={task}, MIN={low}, MAX={high}, STEP={step}, "
                f"COUNT={n}) is not one range like --array=0-{n - 1}; use --shard K/N"
            )
        if shards is not None and shards != n:
            raise ShardError(f"--shard auto: --shards {shards} but the Slurm array has {SLURM_COUNT}={n}")
        return offset // step + 1, n, f"Slurm array, {SLURM_ID}={task}"
    raise ShardError(
        f"--shard auto: neither a Kubernetes Indexed Job ({K8S_INDEX}) nor a Slurm array ({SLURM_ID}) "
        "started this run; use --shard K/N"
    )
