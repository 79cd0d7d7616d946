"""A host's story in the terminal: the headline, incidents root cause first with their
consequences nested, each chain drawn as a tree, findings below the verdict folded under a count
line, and the timeline of key instants."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from vastprobe.clock import utc_text
from vastprobe.model import SEVERITY_ORDER, Finding, HostReport, HostSnapshot, Incident, Instant, WaitPicture
from vastprobe.render.layout import cropped, hanging
from vastprobe.render.styles import SEVERITY_STYLE, VERDICT_STYLE
from vastprobe.render.tree import draw_picture
from vastprobe.units import processes
from vastprobe.untrusted.safe import safe

#: Evidence a drawn chain already shows (the non-verbose report leaves it out).
DRAWN_SOURCES = frozenset({"wait chain", "wait cycle", "/proc/fd", "blocker"})
MAX_EVIDENCE = 6


def worst(inc: Incident) -> int:
    return max(SEVERITY_ORDER[f.severity] for f in inc.findings)


def headline(console: Console, r: HostReport, facts: bool = True) -> None:
    """`local  STALLED  cuzk-bench was OOM-killed … → …`, wrapping under its own text; then the host's
    facts (kernel, scope, samples) unless `facts` is False (`--brief`: the headline alone)."""
    word = r.verdict.upper() + (f" ({r.status})" if r.status != "ok" else "")
    head = Text()
    head.append(safe(r.target, 200), style="bold")
    head.append("  ")
    head.append(word, style=VERDICT_STYLE[r.verdict])
    head.append("  ")
    why = Text(safe(r.headline or r.error or ""))
    if head.cell_len > console.width // 3:  # a long target: the why goes under it
        console.print(head, overflow="fold")
        hanging(console, "    ", Text(""), why)
    else:
        hanging(console, "", head, why)
    snap = r.snapshot
    if snap is not None and facts:
        h = snap.host
        known = [safe(h.hostname, 64), f"kernel {safe(h.kernel, 64)}", f"{processes(len(r.scope))} in scope"]
        ups = snap.probe.sample_uptimes
        known.append(f"{len(ups)} samples {snap.sample_window:.1f}s apart" if len(ups) > 1 else "one sample")
        hanging(console, "  ", Text(""), Text(" · ".join(known), style="dim"))


def last_words(console: Console, r: HostReport) -> None:
    """The last lines of the log that matters, under the headline: escaped like every remote string."""
    if r.last_words is None:
        return
    hanging(console, "  ", Text(""), Text(f"last lines of {safe(r.last_words.log, 200)}:", style="dim"))
    for line in r.last_words.lines:
        hanging(console, "    ", Text(""), Text(safe(line, 300)))


def _finding(
    console: Console, f: Finding, lead: str, cont: str, snap: HostSnapshot | None,
    pic: WaitPicture | None, verbose: bool, said: str | None,
) -> None:  # fmt: skip
    """`lead` starts the finding's first line, `cont` every line after it (a tree's guide)."""
    head = Text()
    head.append(f"{f.severity:<8} ", style=SEVERITY_STYLE[f.severity])
    head.append(f"{f.code} {f.rule}: ", style="bold")
    hanging(console, lead, head, Text(safe(f.summary)), then=cont)
    inner = cont + "  "
    if pic is not None and snap is not None:
        for line in draw_picture(snap, pic):
            cropped(console, inner, line)
    shown = 0
    hidden = 0
    for e in f.evidence:
        if not verbose and ((pic is not None and e.source in DRAWN_SOURCES) or e.source == said):
            continue
        if not verbose and shown >= MAX_EVIDENCE:
            hidden += 1
            continue
        shown += 1
        hanging(console, inner, Text(f"{safe(e.source, 80)}: ", style="dim"), Text(safe(e.detail, 2000), style="dim"))
    if hidden:
        hanging(console, inner, Text(""), Text(f"… {hidden} more evidence line(s) (-v)", style="dim"))
    if f.hint:
        hanging(console, inner, Text("hint: ", style="italic"), Text(safe(f.hint), style="italic"))


def incidents(console: Console, r: HostReport, verbose: bool) -> None:
    level = {"stalled": SEVERITY_ORDER["error"], "degraded": SEVERITY_ORDER["warning"]}.get(r.verdict, 99)
    full = [i for i in r.incidents if verbose or worst(i) >= level]
    folded = [i for i in r.incidents if i not in full]
    snap = r.snapshot
    for inc in full:
        console.print()
        pictures = dict(inc.pictures)
        more = bool(inc.consequences)
        _finding(console, inc.root, "  ", "  │" if more else "   ", snap, pictures.get(inc.root), verbose, None)
        for n, c in enumerate(inc.consequences):
            last = n == len(inc.consequences) - 1
            lead, cont = ("  └─ ", "     ") if last else ("  ├─ ", "  │  ")
            _finding(console, c, lead, cont, snap, pictures.get(c), verbose, inc.root.rule)
    if folded:
        _folded(console, folded, bool(full))


def _folded(console: Console, folded: Sequence[Incident], after: bool) -> None:
    findings = [f for inc in folded for f in inc.findings]
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    words = ", ".join(
        f"{n} {sev}{'s' if n != 1 and sev == 'warning' else ''}"
        for sev, n in sorted(counts.items(), key=lambda kv: -SEVERITY_ORDER[kv[0]])
    )
    console.print()
    console.print(Text(f"  {'also ' if after else ''}{words} (-v for evidence and hints):", style="bold"))
    for inc in folded:
        for n, f in enumerate(inc.findings):
            line = Text()
            line.append(f"{f.severity:<8} ", style=SEVERITY_STYLE[f.severity])
            line.append(f"{f.code} {f.rule}: ", style="bold")
            line.append(safe(f.summary, 400))
            cropped(console, "    " if n == 0 else "    └─ ", line)


def timeline(console: Console, instants: Sequence[Instant]) -> None:
    if not instants:
        return
    console.print()
    console.print(Text("  timeline (the target's clock, UTC):", style="bold"))
    for i in instants:
        when = utc_text(i.wall)  # the target's clock: any number
        hanging(console, "    ", Text(f"{when}  ", style="dim"), Text(safe(i.what, 600)))
