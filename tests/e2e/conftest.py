"""The e2e tests' cluster: one real control plane per session, a fresh namespace per test.

``cluster`` starts the local control plane (etcd, kube-apiserver, KCM, kube-scheduler, kwok) once
per session and installs torchgate's CRDs, or wraps the cluster named by
``TORCHGATE_E2E_KUBECONFIG``. Binaries are built (or found in the cache) right after collection,
before any test's timeout starts, with the build's progress shown live.

The Kubernetes version is ``$TORCHGATE_KUBERNETES_VERSION`` (default: the newest supported one);
every control plane a session starts, the real node's included, runs it. The header names it.

When the binaries cannot be had, e2e tests fail with the reason on CI (``CI=true``) and whenever
Go is present but the build broke; only locally without Go do they skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from torchgate_dev.controlplane import kwok, versions
from torchgate_dev.controlplane.binaries import Binaries, BinariesUnavailable, ensure_binaries
from torchgate_dev.controlplane.cluster import ATTACH_ENV, ControlPlane, KubectlError

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "manifests" / "crds"
CRD_NAMES = (
    "pytorchjobs.kubeflow.org",
    "placementpolicies.torchgate.io",
    "teamquotas.torchgate.io",
)
WORKDIR_ENV = "TORCHGATE_E2E_WORKDIR"

_BINARIES = pytest.StashKey["Binaries | BinariesUnavailable"]()
_SUMMARY = pytest.StashKey[list[str]]()


def pytest_report_header(config: pytest.Config) -> str:
    """Which Kubernetes the e2e tests run on."""
    if os.environ.get(ATTACH_ENV):
        return f"Kubernetes: the cluster of {ATTACH_ENV}"
    supported = versions.supported()
    try:
        chosen = supported.select(environ=os.environ)
    except versions.UnsupportedVersion as error:
        return f"Kubernetes: {error}"
    source = f"from ${versions.VERSION_ENV}" if os.environ.get(versions.VERSION_ENV) else "default"
    return f"Kubernetes: {chosen} ({source}; supported: {supported.describe()})"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build or find the binaries before the first test, so a cold build is not timed out."""
    config = session.config
    if config.option.collectonly or os.environ.get(ATTACH_ENV):
        return
    if not any(item.get_closest_marker("e2e") for item in session.items):
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    shown = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with shown:
        try:
            config.stash[_BINARIES] = ensure_binaries()
        except BinariesUnavailable as error:
            config.stash[_BINARIES] = error
        if any(item.get_closest_marker("real_node") for item in session.items):
            # The seed images' first build (debootstrap, torch's wheels) takes minutes; it runs
            # here, progress shown, so no test's timeout includes it. Later runs take seconds.
            subprocess.run([sys.executable, "-m", "torchgate_dev.node.images"], check=False)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Report how long the control plane took to start and how much memory it used."""
    for line in config.stash.get(_SUMMARY, []):
        terminalreporter.write_line(line)


def _binaries(config: pytest.Config) -> Binaries:
    result = config.stash.get(_BINARIES, None)
    if result is None:
        try:
            result = ensure_binaries()
        except BinariesUnavailable as error:
            result = error
        config.stash[_BINARIES] = result
    if isinstance(result, Binaries):
        return result
    if result.go_missing and os.environ.get("CI", "").lower() != "true":
        pytest.skip(f"control-plane binaries unavailable: {result}")
    pytest.fail(f"control-plane binaries unavailable: {result}", pytrace=False)


@pytest.fixture(scope="session")
def control_plane_binaries(request: pytest.FixtureRequest) -> Binaries:
    """The built binaries (skips or fails as described in the module docstring)."""
    return _binaries(request.config)


class Cluster:
    """What e2e tests use: kubectl, apply, fake GPU nodes, pod endings, waiting, namespaces."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._test_namespaces: list[str] = []
        self._test_nodes: list[str] = []

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig of the cluster."""
        return self.plane.kubeconfig

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> Any:
        """Run kubectl (see ``ControlPlane.kubectl``)."""
        return self.plane.kubectl(*args, input=input, check=check, timeout=timeout)

    def apply(self, obj_or_yaml: Mapping[str, Any] | Sequence[Mapping[str, Any]] | str) -> None:
        """``kubectl apply`` one object, a list of objects, or YAML text."""
        if isinstance(obj_or_yaml, str):
            text = obj_or_yaml
        elif isinstance(obj_or_yaml, Mapping):
            text = json.dumps(obj_or_yaml)
        else:
            text = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(obj_or_yaml)})
        self.kubectl("apply", "-f", "-", input=text)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object as JSON, or None when it does not exist."""
        scope = ["--namespace", namespace] if namespace else []
        result = self.kubectl("get", kind, name, *scope, "--ignore-not-found", "-o", "json")
        return json.loads(result.stdout) if result.stdout.strip() else None

    def list_objects(
        self, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Objects of a kind (in a namespace, matching a label selector)."""
        args = ["get", kind, "-o", "json"]
        args += ["--namespace", namespace] if namespace else []
        args += ["--selector", selector] if selector else []
        return list(json.loads(self.kubectl(*args).stdout)["items"])

    def api_request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """A raw API call; returns (HTTP status, decoded body). Needs the admin token."""
        token = self.plane.token
        if token is None:
            pytest.skip("raw API calls need a token; the attached kubeconfig has none")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.plane.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Content-Type", "application/json")
        context = ssl.create_default_context(
            cafile=str(self.plane.ca_file) if self.plane.ca_file else None
        )
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return int(response.status), json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            with error:
                return int(error.code), json.loads(error.read() or b"{}")

    def add_gpu_nodes(
        self,
        count: int,
        prefix: str = "gpu",
        *,
        gpus: int = 8,
        labels: Mapping[str, str] | None = None,
        rdma: int = 0,
        taints: Sequence[Mapping[str, str]] = (),
        keep: bool = False,
    ) -> list[str]:
        """Create ``count`` fake GPU nodes ``<prefix>-<i>`` (kwok makes them Ready).

        They are deleted after the current test unless ``keep``. Existing nodes of the same
        name keep their original capacity (node status cannot be changed by apply).
        """
        names = [f"{prefix}-{index}" for index in range(count)]
        self.apply(
            [
                kwok.gpu_node(name, gpus=gpus, rdma=rdma, labels=labels, taints=taints)
                for name in names
            ]
        )
        if not keep:
            self._test_nodes.extend(names)
        return names

    def finish_pod(self, namespace: str, name: str, exit_code: int) -> None:
        """Make kwok end a Running pod's containers with ``exit_code``."""
        (annotation,) = kwok.exit_code_annotation(exit_code).items()
        self.kubectl(
            "annotate", "pod", name, "--namespace", namespace, "--overwrite", "=".join(annotation)
        )

    def wait_for(
        self, predicate: Callable[[], T | None], timeout: float = 30, what: str = "the condition"
    ) -> T:
        """Poll ``predicate`` until it returns something truthy, and return that.

        Exceptions from the predicate count as "not yet" (the last one is reported).
        """
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
            except (KubectlError, KeyError, IndexError, TypeError) as error:
                last_error = error
            if time.monotonic() > deadline:
                detail = f"; last error: {last_error}" if last_error else ""
                pytest.fail(f"timed out after {timeout}s waiting for {what}{detail}")
            time.sleep(0.2)

    def new_namespace(self, prefix: str = "e2e", *, keep: bool = False) -> str:
        """A fresh namespace (deleted after the current test unless ``keep``)."""
        name = f"{prefix}-{secrets.token_hex(3)}"
        self.kubectl("create", "namespace", name)
        if not keep:
            self._test_namespaces.append(name)
        # The ServiceAccount admission plugin refuses pods until KCM created this account.
        self.wait_for(
            lambda: self.get("serviceaccount", "default", name),
            what=f"ServiceAccount {name}/default",
        )
        return name

    def clean_up_test(self) -> None:
        """Delete the namespaces and nodes the current test created."""
        namespaces, self._test_namespaces = self._test_namespaces, []
        nodes, self._test_nodes = self._test_nodes, []
        for namespace in namespaces:
            # Pods go first and at once: a pod whose node is deleted before kwok confirmed its
            # deletion would stay Terminating, and so would its namespace.
            self.kubectl(
                "delete", "pods", "--all", "--namespace", namespace,
                "--force", "--grace-period=0", "--wait=false", check=False, timeout=120,
            )  # fmt: skip
            self.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        if nodes:
            self.kubectl("delete", "nodes", *nodes, "--wait=false", "--ignore-not-found")

    def install_crds(self) -> None:
        """Apply torchgate's CRDs and wait until the apiserver serves them."""
        self.kubectl("apply", "-f", str(CRD_DIR))
        self.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            *(f"crd/{name}" for name in CRD_NAMES),
        )  # fmt: skip


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The session's cluster: attached via ``TORCHGATE_E2E_KUBECONFIG`` or started here."""
    plane = ControlPlane.attach_from_environment()
    if plane is None:
        workdir = os.environ.get(WORKDIR_ENV)
        plane = ControlPlane(
            binaries=_binaries(request.config), workdir=Path(workdir) if workdir else None
        )
    with plane:
        helper = Cluster(plane)
        helper.install_crds()
        yield helper
        _record_summary(request.config, plane)


def _record_summary(config: pytest.Config, plane: ControlPlane) -> None:
    if plane.attached:
        return
    peaks = plane.peak_rss()
    memory = ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in peaks.items())
    config.stash[_SUMMARY] = [
        f"control plane: Kubernetes {plane.kubernetes_version}, ready in "
        f"{plane.startup_seconds:.1f}s; peak RSS {memory} "
        f"(total {sum(peaks.values()) / 2**20:.0f} MiB)"
    ]


@pytest.fixture(autouse=True)
def _cluster_hygiene(request: pytest.FixtureRequest) -> Iterator[None]:
    """Cluster tests must be marked e2e; what a test created is deleted after it."""
    if "cluster" not in request.fixturenames:
        yield
        return
    if request.node.get_closest_marker("e2e") is None:
        pytest.fail("tests that use the cluster fixture must be marked @pytest.mark.e2e")
    helper: Cluster = request.getfixturevalue("cluster")
    yield
    helper.clean_up_test()


def load_yaml(path: Path) -> Any:
    """One YAML document from a file."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))
