"""A run's hosts read as one story: every join across hosts, in the order they build on each other."""

from __future__ import annotations

from collections.abc import Sequence

from vastprobe.model import HostReport
from vastprobe.report.connection_joins import join_connections
from vastprobe.report.hops import join_ssh_hops
from vastprobe.report.job_joins import join_jobs


def join_hosts(reports: Sequence[HostReport]) -> list[HostReport]:
    """A job waiting on an ssh session to another host of the run; a wait on a connection another host
    of the run holds; a distributed job's hosts. One host alone is left as it is."""
    if len(reports) < 2:
        return list(reports)
    # jobs before connections: a connection's join quotes the other host's word, and a rank's own word
    # ("waits on TCP …, not on another rank") is only its host's until the job is read across hosts
    return join_connections(join_jobs(join_ssh_hops(reports)))
