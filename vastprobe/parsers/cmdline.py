"""/proc/PID/cmdline as argv records: the probe turns NULs into newlines and a newline inside an
argument into \\x1e, so argument boundaries survive. Secrets in them (a URL's password,
`--password X`, `HF_TOKEN=…`: vastprobe's own `--history postgresql://user:PASSWORD@…` among them)
are masked here, before any rule, snapshot or capture's parsed form holds them."""

from __future__ import annotations

from vastprobe.parsers.procfs_lines import group_by_pid
from vastprobe.untrusted.secrets import redact_argv, redact_cut

#: the probe keeps the first 1100 bytes of each `/proc/PID/cmdline:ARG` record (vp_cmdline)
RECORD_BYTES = 1100


def parse_cmdline_section(text: str) -> dict[int, tuple[str, ...]]:
    grouped = group_by_pid(text, "cmdline")
    out = {}
    for pid, args in grouped.lines.items():
        argv = redact_argv(
            tuple(a.replace("\x1e", "\n") for a in args) if any("\x1e" in a for a in args) else tuple(args)
        )
        cut = RECORD_BYTES - len(f"/proc/{pid}/cmdline:")
        if any(len(a) >= cut // 4 and len(a.encode("utf-8", "surrogateescape")) >= cut for a in argv):
            # an argument the bound cut: a URL's password may end there, its `@` gone with the rest
            argv = tuple(redact_cut(a) if len(a.encode("utf-8", "surrogateescape")) >= cut else a for a in argv)
        out[pid] = argv
    return out
