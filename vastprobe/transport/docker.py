"""`docker://NAME`: the probe in a running container, through `docker exec -i NAME sh -s`
(container.py's runner and classification; the docker CLI's own settings, DOCKER_HOST and
contexts, are the operator's).

docker's messages (moby's daemon errors, relayed by the CLI as `Error response from daemon: ...`,
exit status 1): `No such container: NAME`, `container ID is not running` (older: `Container ID is
not running`), `Container ID is paused, unpause the container before exec`, `Container ID is
restarting, wait until the container is running`; the CLI's own: `Cannot connect to the Docker
daemon at unix:///var/run/docker.sock. Is the docker daemon running?` (seen here, docker 28.2)
and `permission denied while trying to connect to the Docker daemon socket at ...`."""

from __future__ import annotations

from vastprobe.transport.base import TransportSettings
from vastprobe.transport.container import ContainerTransport, container_name, list_running, rule


class DockerTransport(ContainerTransport):
    name = "docker"
    cli = "docker"
    errors = (
        rule(r"no such container", "unreachable", "no such container"),
        rule(r"container \S+ is not running", "unreachable", "the container is not running"),
        rule(r"container \S+ is (paused|restarting)", "unreachable", "the container is paused or restarting"),
        rule(r"cannot connect to the docker daemon", "unreachable", "the docker daemon cannot be reached"),
        rule(r"permission denied while trying to connect to the docker daemon", "auth-failed",
             "permission denied by the docker daemon's socket (is this user in the docker group?)"),
    )  # fmt: skip


def check_target(target: str) -> None:
    container_name(target, "docker")


def open_transport(target: str, settings: TransportSettings) -> DockerTransport:
    return DockerTransport(target, settings.timeout)


def list_targets(query: str, settings: TransportSettings) -> list[str]:
    """`docker ps`'s running containers, filtered as QUERY says (`label=job=prover,name=rank`)."""
    return list_running("docker", "docker", query)
