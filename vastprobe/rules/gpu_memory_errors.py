"""VP123 gpu-memory-errors: the GPU's memory reports damage: volatile uncorrectable ECC errors since the
driver loaded (data in GPU memory was lost: a job that was running there computed on it or died),
a row remapping that failed (the GPU has run out of spare rows: drain the host), a remapping or page
retirement that waits for a GPU reset to take effect. `[N/A]` (a GPU without ECC or row remapping)
says nothing."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.gpu import per_gpu
from vastprobe.model import Evidence, Finding, Severity
from vastprobe.rules.base import Context, Rule, RuleMeta

META = RuleMeta(
    "gpu-memory-errors", "VP123", "error", "a GPU reports uncorrectable memory errors or failed row remapping"
)


def check(ctx: Context) -> Iterator[Finding]:
    g = ctx.snapshot.gpus
    if not g.present or g.error is not None or not g.samples:
        return
    for index, rows in sorted(per_gpu(ctx.snapshot).items()):
        last = rows[-1]
        found: list[tuple[Severity, str, str]] = []
        if last.remapped_rows_failure:
            found.append(("critical", "row remapping failed", "drain the host: the GPU has no spare rows left"))
        ecc = last.ecc_uncorrected_volatile
        if ecc:
            first = rows[0].ecc_uncorrected_volatile
            grew = first is not None and ecc > first
            found.append(
                (
                    "critical" if grew else "error",
                    f"{ecc} volatile uncorrectable ECC error(s)"
                    + (f" ({ecc - (first or 0)} during the probe)" if grew else ""),
                    "restart the job on another GPU or after a GPU reset: data in this GPU's memory was lost",
                )
            )
        if last.remapped_rows_pending:
            found.append(("warning", "a row remapping is pending", "reset the GPU to activate the remapping"))
        if last.retired_pages_pending:
            found.append(("warning", "a page retirement is pending", "reset the GPU (or reboot) to retire the page"))
        if not found:
            continue
        worst = max(found, key=lambda f: ("info", "warning", "error", "critical").index(f[0]))
        ev = [
            Evidence(
                "nvidia-smi",
                f"GPU {index} ({last.name}): ecc.errors.uncorrected.volatile.total {ecc}, remapped_rows.pending "
                f"{last.remapped_rows_pending}, remapped_rows.failure {last.remapped_rows_failure}, "
                f"retired_pages.pending {last.retired_pages_pending}",
            )
        ]
        yield META.finding(
            f"GPU {index}: " + "; ".join(f[1] for f in found),
            [],
            ev,
            "; ".join(dict.fromkeys(f[2] for f in found)),
            worst[0],
        )


RULE = Rule(META, check)
