"""`ssh` as a Transport: the target string and the command line's SSH settings, and run_ssh
(run.py) to run the probe. Kept apart from run.py so that the registry can check and name an ssh
target without importing asyncssh (it is imported on the first run)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from vastprobe.targets import parse_target
from vastprobe.transport.base import Render, Take, TransportResult, TransportSettings


class SshTransport:
    """One exec channel per run, `sh -s` with the script on stdin; the snapshot leaves out the
    sshd session processes above the probe's shell (OwnProcesses "sshd")."""

    name = "ssh"

    def __init__(self, target: str, options: Any, kept: list[Any] | None = None) -> None:  # settings.SshOptions
        self.target = target
        self.options = options
        self.timeout: float = options.timeout
        self.kept = kept  # a session's connections (jump hosts first), shared by its runs

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[SshTransport]:
        """Runs over one connection: the first run opens it, a run that fails drops it (the next one
        connects afresh), the end of the session closes it."""
        kept: list[Any] = []
        try:
            yield SshTransport(self.target, self.options, kept)
        finally:
            for conn in reversed(kept):
                conn.abort()

    async def run(self, script: Render, cap: int, timeout: float, take: Take | None = None) -> TransportResult:
        """Within `timeout` (a second try gets what the first left, its connect timeout too)."""
        from vastprobe.transport.ssh.run import run_ssh

        opts = self.options
        if timeout < opts.timeout:
            opts = replace(opts, timeout=timeout, connect_timeout=min(timeout, opts.connect_timeout or timeout))
        return await run_ssh(self.target, script, cap, opts, take, self.kept)


def check_target(target: str) -> None:
    parse_target(target)


def open_transport(target: str, settings: TransportSettings) -> SshTransport:
    from vastprobe.transport.ssh.settings import SshOptions

    return SshTransport(target, settings.ssh or SshOptions(timeout=settings.timeout))
