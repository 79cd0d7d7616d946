"""VP124 gpu-missing: fewer GPUs answer than should. Three ways to know: `--expect-gpus N`; the
`/dev/nvidia<N>` nodes the driver (or the container runtime) made, against the GPUs nvidia-smi
lists; nvidia-smi naming a GPU it cannot open ("Unable to determine the device handle"). A kernel
log line saying a GPU "has fallen off the bus" is reported here too when no Xid 79 line goes with
it (newer drivers print the three-line form alone); with an Xid 79, gpu-xid reports it. A job that
was using a GPU that is gone cannot finish."""

from __future__ import annotations

from collections.abc import Iterator

from vastprobe.analysis.gpu import per_gpu
from vastprobe.model import Evidence, Finding
from vastprobe.parsers.nvidia_smi import pci_short
from vastprobe.rules.base import Context, Rule, RuleMeta
from vastprobe.rules.gpu_xid import before, gpu_rules_apply

META = RuleMeta("gpu-missing", "VP124", "critical", "fewer GPUs answer than the host has or the job expects")

HINT = "a GPU that fell off the bus needs a reboot (and a drain if it repeats); the job cannot use it until then"


def check(ctx: Context) -> Iterator[Finding]:
    g = ctx.snapshot.gpus
    if not gpu_rules_apply(ctx):
        return
    rows = per_gpu(ctx.snapshot)
    answering = {r[-1].index: r[-1] for r in rows.values()}
    count = len(answering)
    answered = g.present and g.error is None and bool(g.samples)
    expect = ctx.options.expect_gpus
    ev: list[Evidence] = []
    if g.unreachable:
        ev.append(
            Evidence("nvidia-smi", f"cannot open {', '.join(g.unreachable)} (Unable to determine the device handle)")
        )
    if answered:
        ev.append(Evidence("nvidia-smi", f"{count} GPU(s) answer: {', '.join(str(i) for i in sorted(answering))}"))
    nodes = g.device_nodes
    if nodes is not None:
        ev.append(Evidence("/dev", f"{len(nodes)} /dev/nvidia<N> node(s): {' '.join(nodes[:16])}"))
    if expect is not None and count < expect:
        why = "no nvidia-smi on the target" if not g.present else (g.error or "")
        summary = f"only {count} of the {expect} expected GPU(s) answer" + (f" ({why.split(':')[0]})" if why else "")
        yield META.finding(summary, [], [*ev, Evidence("expected", f"--expect-gpus {expect}")], HINT)
    elif answered and nodes is not None and len(nodes) > count:
        yield META.finding(f"{count} GPU(s) answer but {len(nodes)} /dev/nvidia<N> nodes exist", [], ev, HINT)
    elif answered and g.unreachable:
        yield META.finding(f"nvidia-smi cannot open {len(g.unreachable)} GPU(s)", [], ev, HINT)
    yield from _fallen(ctx, {pci_short(s.pci_bus_id) for s in answering.values()})


def _fallen(ctx: Context, answering_pci: set[str]) -> Iterator[Finding]:
    """Lost-GPU lines without an Xid 79 for the same GPU."""
    events = ctx.snapshot.kernel_log.events
    with_xid = {e.pci for e in events if e.kind == "xid" and e.xid == 79}
    lost: dict[str, list] = {}
    for e in events:
        if e.kind == "gpu-lost" and e.pci not in with_xid:
            lost.setdefault(e.pci or "?", []).append(e)
    for pci, evs in sorted(lost.items()):
        ev = [Evidence("kernel log", e.line[:400]) for e in evs[-3:]]
        sev = META.severity
        if before(ctx, evs[-1]):
            sev = "info"
            ev.append(Evidence("timing", "logged before the watched processes started: context, not the cause"))
        if pci in answering_pci:
            sev = "info"
            ev.append(Evidence("nvidia-smi", f"GPU {pci} answers now: it came back (after a reset or reboot)"))
        yield META.finding(f"GPU {pci} fell off the bus (no Xid line)", [], ev, HINT, sev)


RULE = Rule(META, check)
