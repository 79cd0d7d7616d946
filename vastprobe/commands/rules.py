"""`vastprobe rules` (the rule catalogue, or one rule's page) and `vastprobe probe-script` (the
script that runs on targets): what vastprobe checks and what it runs, for a person to audit."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from vastprobe.commands.common import usage_error
from vastprobe.commands.option_groups import with_groups
from vastprobe.commands.options import PROBE_GROUP, JsonOpt, ListingFormatOpt, ProbeFlags, complete_rules
from vastprobe.commands.settings import output_format, probe_options


def rules(
    name: Annotated[
        Optional[str],
        typer.Argument(metavar="[RULE]", help="A slug or code: explain that rule.", autocompletion=complete_rules),
    ] = None,
    fmt: ListingFormatOpt = None,
    json_flag: JsonOpt = False,
) -> None:
    """The rule catalogue: slug, code, severity, one line each; with a name, that rule's page (docs/rules).

    [b]Examples[/b]
      vastprobe rules
      vastprobe rules VP102
      vastprobe rules --format json
    """
    from vastprobe.report.probe_findings import PROBE_FINDINGS
    from vastprobe.rules import RULES, find_rule

    if name is not None:
        rule = find_rule(name)
        # the probe's own findings (VP900-903) have pages too: a user who saw VP900 in a report got "no rule"
        meta = (
            rule.meta
            if rule is not None
            else next((m for m in PROBE_FINDINGS if name in (m.slug, m.code) or name.upper() == m.code), None)
        )
        if meta is None:
            usage_error(f"no rule {name!r}; `vastprobe rules` lists them")
        page = _rule_page(meta.slug)
        if page is None:  # an installation without its docs: the module's own words
            doc = (sys.modules[rule.check.__module__].__doc__ or "") if rule is not None else ""
            page = f"{meta.code} {meta.slug} ({meta.severity}): {meta.summary}\n\n{doc.strip()}\n"
        sys.stdout.write(page)
        return

    rows = [
        {"rule": m.slug, "code": m.code, "severity": m.severity, "summary": m.summary}
        for m in (*(r.meta for r in RULES), *PROBE_FINDINGS)
    ]
    # not through render.formats: the catalogue is no host report, and its JSON is written as it always was
    chosen = output_format(fmt, json_flag).name
    if chosen == "table":
        for row in rows:
            typer.echo(f"{row['code']}  {row['rule']:<20} {row['severity']:<9} {row['summary']}")
    elif chosen == "ndjson":
        for row in rows:
            typer.echo(json.dumps(row))
    else:
        typer.echo(json.dumps(rows, indent=1))


def _rule_page(slug: str) -> str | None:
    """docs/rules/<slug>.md, as shipped in the package (vastprobe/ruledocs links to docs/rules)."""
    from importlib.resources import files

    try:
        return (files("vastprobe") / "ruledocs" / f"{slug}.md").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None


@with_groups(probe=PROBE_GROUP.only("sample", "log", "artifacts", "py_spy"))
def probe_script(probe: ProbeFlags) -> None:
    """Print the exact script that runs on targets, for audit.

    [b]Examples[/b]
      vastprobe probe-script
      vastprobe probe-script --log /workspace/run.log | less
    """
    options = probe_options(probe)
    from vastprobe.probe.script import render_script

    sys.stdout.write(render_script(options.params))
