"""`kubectl://[NAMESPACE/]POD[/CONTAINER]`: the probe in a pod's container, through
`kubectl exec -i POD -- sh -s` (container.py's runner and classification). kubectl's own
settings (kubeconfig, context, credentials) are the operator's; a context can be named for the
transport (TransportSettings.per_kind["kubectl"]["context"], the CLI's --context later).

kubectl's messages (kubernetes/kubectl's exec.go and the API server's status errors): `Error from
server (NotFound): pods "x" not found`, `... namespaces "x" not found`, `error: unable to upgrade
connection: container not found ("c")`, `error: cannot exec into a container in a completed pod;
current phase is Succeeded`, `Error from server (Forbidden): pods "x" is forbidden: User "u" cannot
create resource "pods/exec" ...`, `error: You must be logged in to the server (Unauthorized)`,
`Error in configuration: context was not found for specified context: x` (seen here, kubectl
1.32), `The connection to the server localhost:8080 was refused ...` (seen here)."""

from __future__ import annotations

import re

from vastprobe.targets import TargetError, split_scheme, text_problem
from vastprobe.transport.base import TransportSettings
from vastprobe.transport.container import ExecTransport, listed, rule

#: A namespace, pod or container name: a DNS-1123 subdomain (pods) or label (namespaces, containers).
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
_FORM = "kubectl://[NAMESPACE/]POD[/CONTAINER]"


def parse_pod(target: str) -> tuple[str | None, str, str | None]:
    """(namespace, pod, container) of a kubectl target; TargetError (one line) when malformed."""
    split = split_scheme(target)
    if split is None or split[0] != "kubectl":
        raise TargetError(f"not a kubectl target: {target!r} (want {_FORM})")
    rest = split[1]
    bad = text_problem(rest, "pod")
    if bad:
        raise TargetError(f"not a kubectl target: {target!r} ({bad}; want {_FORM})")
    parts = rest.split("/")
    if len(parts) > 3 or not all(parts):
        raise TargetError(f"not a kubectl target: {target!r} (want {_FORM})")
    for p in parts:
        if not _NAME.match(p):
            raise TargetError(
                f"not a kubectl target: {target!r} ({p!r} is not a Kubernetes name: lower-case letters, "
                f"digits, '-' and '.'; want {_FORM})"
            )
    if len(parts) == 1:
        return None, parts[0], None
    if len(parts) == 2:
        return parts[0], parts[1], None
    return parts[0], parts[1], parts[2]


class KubectlTransport(ExecTransport):
    name = "kubectl"
    cli = "kubectl"
    errors = (
        rule(r'namespaces "[^"]*" not found', "unreachable", "no such namespace"),
        rule(r'pods "[^"]*" not found', "unreachable", "no such pod"),
        rule(r"container not found", "unreachable", "no such container in the pod"),
        rule(r"cannot exec into a container in a completed pod|does not have a host assigned", "unreachable",
             "the pod is not running"),
        rule(r"\(Forbidden\)|is forbidden|\(Unauthorized\)|must be logged in", "auth-failed",
             "kubectl was refused (forbidden or not logged in)"),
        rule(r"context was not found|context \"[^\"]*\" does not exist", "unreachable", "no such kubectl context"),
        rule(r"connection to the server .* was refused|unable to connect to the server", "unreachable",
             "the Kubernetes API server cannot be reached"),
    )  # fmt: skip

    def __init__(self, target: str, timeout: float = 60.0, context: str | None = None) -> None:
        super().__init__(target, timeout)
        self.namespace, self.pod, self.container = parse_pod(target)
        if context is not None and (text_problem(context, "context") or context.startswith("-")):
            raise TargetError(f"not a kubectl context: {context!r}")
        self.context = context

    def argv(self, exe: str) -> list[str]:
        argv = [exe]
        if self.context is not None:
            argv += ["--context", self.context]
        if self.namespace is not None:
            argv += ["--namespace", self.namespace]
        argv += ["exec", "-i", self.pod]
        if self.container is not None:
            argv += ["--container", self.container]
        return [*argv, "--", "sh", "-s"]


def check_target(target: str) -> None:
    parse_pod(target)


def open_transport(target: str, settings: TransportSettings) -> KubectlTransport:
    return KubectlTransport(target, settings.timeout, settings.per_kind.get("kubectl", {}).get("context"))


def list_targets(query: str, settings: TransportSettings) -> list[str]:
    """The running pods of every namespace that the label selector QUERY picks (`app=prover`), as
    `kubectl://NAMESPACE/POD`: `kubectl get pods -A -l QUERY --field-selector status.phase=Running`."""
    context = settings.per_kind.get("kubectl", {}).get("context")
    argv = ["kubectl", *(["--context", context] if context else []), "get", "pods", "--all-namespaces",
            "--field-selector", "status.phase=Running", "--output",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{'\\n'}{end}"]  # fmt: skip
    if query:
        if query.startswith("-") or text_problem(query, "selector"):
            raise TargetError(f"--from kubectl:{query}: not a label selector")
        argv += ["--selector", query]

    def form(line: str) -> str | None:
        ns, _, pod = line.partition("/")
        return f"kubectl://{ns}/{pod}" if _NAME.match(ns) and _NAME.match(pod) else None

    return listed(argv, f"--from kubectl:{query}" if query else "--from kubectl", form)
