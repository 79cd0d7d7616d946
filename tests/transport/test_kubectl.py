"""kubectl://[NS/]POD[/CONTAINER]: its form, the kubectl command it runs (a context named for the
transport), and kubectl's refusals as one line each: the real kubectl where installed, pointed at
a loopback port nothing listens on (no cluster is reached), and kubectl's other messages as
kubernetes/kubectl and the API server write them."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from vastprobe.pipeline import DiagnoseOptions, collect_target
from vastprobe.probe.script import ProbeParams
from vastprobe.targets import TargetError
from vastprobe.transport.base import TransportResult, TransportSettings
from vastprobe.transport.kubectl import KubectlTransport, parse_pod
from vastprobe.transport.registry import check_target, transport_for

OPTIONS = DiagnoseOptions(params=ProbeParams(sample=0), timeout=30)


@pytest.mark.parametrize(
    ("target", "parsed"),
    [
        ("kubectl://trainer-0", (None, "trainer-0", None)),
        ("kubectl://ml/trainer-0", ("ml", "trainer-0", None)),
        ("kubectl://ml/trainer-0/worker", ("ml", "trainer-0", "worker")),
        ("kubectl://ml/web.v2-abc", ("ml", "web.v2-abc", None)),
    ],
)
def test_the_forms(target: str, parsed: tuple[str | None, str, str | None]) -> None:
    assert parse_pod(target) == parsed
    assert check_target(target).name == "kubectl"


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("kubectl://", "empty pod"),
        ("kubectl://Trainer", "not a Kubernetes name"),
        ("kubectl://ml//pod", "want kubectl://"),
        ("kubectl://a/b/c/d", "want kubectl://"),
        ("kubectl://-pod", "not a Kubernetes name"),
        ("kubectl://ml/pod;id", "not a Kubernetes name"),
    ],
)
def test_a_malformed_target_is_one_line(target: str, why: str) -> None:
    with pytest.raises(TargetError, match=why):
        check_target(target)


def test_the_command_it_runs() -> None:
    t = KubectlTransport("kubectl://ml/trainer-0/worker", context="prod")
    assert t.argv("/usr/bin/kubectl") == [
        "/usr/bin/kubectl", "--context", "prod", "--namespace", "ml",
        "exec", "-i", "trainer-0", "--container", "worker", "--", "sh", "-s",
    ]  # fmt: skip
    assert KubectlTransport("kubectl://p").argv("kubectl") == ["kubectl", "exec", "-i", "p", "--", "sh", "-s"]
    settings = TransportSettings(per_kind={"kubectl": {"context": "lab"}})
    opened = transport_for("kubectl://p", settings)
    assert isinstance(opened, KubectlTransport) and opened.context == "lab"
    with pytest.raises(TargetError, match="not a kubectl context"):
        transport_for("kubectl://p", TransportSettings(per_kind={"kubectl": {"context": "--kubeconfig=/x"}}))


@pytest.mark.parametrize(
    ("said", "status", "words"),
    [
        ('Error from server (NotFound): pods "trainer-0" not found', "unreachable", "no such pod"),
        ('Error from server (NotFound): namespaces "ml" not found', "unreachable", "no such namespace"),
        ('error: unable to upgrade connection: container not found ("worker")', "unreachable",
         "no such container in the pod"),
        ("error: cannot exec into a container in a completed pod; current phase is Succeeded", "unreachable",
         "the pod is not running"),
        ('Error from server (Forbidden): pods "trainer-0" is forbidden: User "dev" cannot create resource '
         '"pods/exec" in API group "" in the namespace "ml"', "auth-failed", "kubectl was refused"),
        ("error: You must be logged in to the server (Unauthorized)", "auth-failed", "kubectl was refused"),
        ('OCI runtime exec failed: exec failed: unable to start container process: exec: "sh": executable file '
         "not found in $PATH: unknown\ncommand terminated with exit code 126", "probe-error",
         "the container has no sh"),
    ],
)  # fmt: skip
def test_kubectls_messages(said: str, status: str, words: str) -> None:
    t = KubectlTransport("kubectl://ml/trainer-0")
    got = t.classify(TransportResult("ok", None, said.encode() + b"\n", 1, False))
    assert got.status == status and got.error is not None and got.output == b""
    assert got.error.startswith(f"kubectl://ml/trainer-0: {words}") and "\n" not in got.error


def test_output_of_a_probe_that_ran_is_never_taken_for_kubectls() -> None:
    """A shell that ran and failed (its output framed by the probe) is the pipeline's to judge."""
    t = KubectlTransport("kubectl://p")
    framed = b'\n@@0123456789abcdef0123456789abcdef@@ host\nError from server (NotFound): pods "p" not found\n'
    res = TransportResult("ok", None, framed, 1, False)
    assert t.classify(res) is res


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: nothing listens there


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        f"clusters:\n- name: lab\n  cluster:\n    server: http://127.0.0.1:{_closed_port()}\n"
        "contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: lab\n"
        "users:\n- name: lab\n  user: {}\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(cfg))
    monkeypatch.setenv("HOME", str(tmp_path))  # kubectl's cache under ~/.kube: this test's own
    return cfg


def test_real_kubectl_api_server_refused(kubeconfig: Path) -> None:
    cap = collect_target("kubectl://ml/trainer-0", OPTIONS)
    assert cap.status == "unreachable" and cap.error is not None and "\n" not in cap.error
    assert cap.error.startswith("kubectl://ml/trainer-0: the Kubernetes API server cannot be reached (kubectl said: ")


def test_real_kubectl_no_such_context(kubeconfig: Path) -> None:
    opts = DiagnoseOptions(params=ProbeParams(sample=0), timeout=30, transport_options={"kubectl": {"context": "nope"}})
    cap = collect_target("kubectl://trainer-0", opts)
    assert cap.status == "unreachable" and cap.error is not None
    assert cap.error.startswith("kubectl://trainer-0: no such kubectl context (kubectl said: ")
