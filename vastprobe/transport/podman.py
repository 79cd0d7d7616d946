"""`podman://NAME`: the probe in a running container, through `podman exec -i NAME sh -s`
(container.py's runner and classification). Messages from podman 4 (libpod's errors: seen here
with podman 4.3.1 and runc; tests/transport/test_podman.py runs them for real)."""

from __future__ import annotations

from vastprobe.transport.base import TransportSettings
from vastprobe.transport.container import ContainerTransport, container_name, list_running, rule


class PodmanTransport(ContainerTransport):
    name = "podman"
    cli = "podman"
    errors = (
        rule(r"no container with name or ID .* found|no such container", "unreachable", "no such container"),
        rule(r"can only create exec sessions on running containers|container state improper", "unreachable",
             "the container is not running"),
        rule(r"cannot connect to podman|unable to connect to podman", "unreachable",
             "podman's service cannot be reached"),
    )  # fmt: skip


def check_target(target: str) -> None:
    container_name(target, "podman")


def open_transport(target: str, settings: TransportSettings) -> PodmanTransport:
    return PodmanTransport(target, settings.timeout)


def list_targets(query: str, settings: TransportSettings) -> list[str]:
    return list_running("podman", "podman", query)
