"""/proc/PID/cmdline as argv records: the probe turns NULs into newlines and a newline inside an
argument into \\x1e, so argument boundaries survive. Secrets in them (a URL's password,
`--password X`, `HF_TOKEN=…`: vastprobe's own `--history postgresql://user:PASSWORD@…` among them)
are masked here, before any rule, snapshot or capture's parsed form holds them."""

from __future__ import annotations

from vastprobe.parsers.procfs_lines import group_by_pid
from vastprobe.untrusted.secrets import redact_argv


def parse_cmdline_section(text: str) -> dict[int, tuple[str, ...]]:
    grouped = group_by_pid(text, "cmdline")
    return {
        pid: redact_argv(
            tuple(a.replace("\x1e", "\n") for a in args) if any("\x1e" in a for a in args) else tuple(args)
        )
        for pid, args in grouped.lines.items()
    }
