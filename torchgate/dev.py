"""``torchgate dev up | down | status``: all of torchgate on this machine, in one command.

Why: what users meet is the apiserver calling the webhook (admission order, schema pruning,
``kubectl`` printing the ``torchgate:`` warnings, ``failurePolicy: Fail`` when the webhook is
away), and none of that shows in unit tests. ``up`` gives a newcomer that whole path in seconds,
with no Docker and nothing downloaded at run time:

1. build or reuse the pinned control-plane binaries (build progress on stderr);
2. start etcd, kube-apiserver, KCM, kube-scheduler and kwok *detached* on free loopback ports
   (:class:`~torchgate.controlplane.cluster.ControlPlane`, state in DIR);
3. create fake GPU nodes in pools (default ``a100-0..3`` labelled ``pool=a100`` and ``t4-0..1``
   labelled ``pool=t4``, 8 GPUs each), install both CRDs and the sample PlacementPolicy;
4. make the webhook's CA and serving certificate (IP SAN 127.0.0.1) with the ``certs`` code;
5. start ``torchgate webhook --kubeconfig`` (it watches PlacementPolicies), wait for ``/readyz``,
   register both webhook configurations by URL with the caBundle
   (:func:`torchgate.devcluster.webhook_configurations`), then wait until the apiserver really
   calls both routes (dry-run probes), because a configuration takes effect a moment after it
   is created;
6. start ``torchgate controller --manage-unowned``. If it does not come up, ``up`` says why and
   keeps the rest running: the webhook alone is useful, and a later ``up`` tries again.

Where things live: DIR defaults to ``.dev/`` at the top of the git checkout that contains the
current directory. DIR is the control plane's work dir (``kubeconfig``, ``pki/``, ``etcd/``,
``logs/``, ``state.json``); this module adds ``dev.json`` (PIDs and ports of the webhook and the
controller), ``tls/``, ``webhook.log`` and ``controller.log``.

Process rules: every process runs in its own session, so ``down`` can end its whole group; a PID
is only signalled after its start time (from ``/proc``) matched the recorded one, so a recycled
PID is never hit; state is written after every start, so even an ``up`` killed half-way leaves a
trail that the next ``up`` or ``down`` cleans. A failed ``up`` stops what it started and keeps
only the logs. ``up`` is idempotent: on a healthy cluster it says so; on one whose webhook or
controller died it restarts just those; on one whose control plane died it starts afresh.
``down`` only removes the files it knows, never DIR's other content.

Output: progress and summaries go to stderr; stdout gets only the ``export KUBECONFIG=...``
line, so ``eval "$(torchgate dev up)"`` works. Exit codes: 0 success; 1 failure (a message,
never a traceback); 2 usage error; ``status`` answers 3 when there is no dev cluster and 1 when
part of it is down.

Linux only (process identity and memory figures come from ``/proc``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Final

import yaml

from torchgate import devcluster
from torchgate.controlplane import processes
from torchgate.controlplane.binaries import BinariesUnavailable, ensure_binaries
from torchgate.controlplane.cluster import ControlPlane, ControlPlaneError, Layout
from torchgate.controlplane.processes import ManagedProcess, is_alive, memory_kib

STATE_FILE: Final = "dev.json"
DEFAULT_DIR_NAME: Final = ".dev"
PACKAGE_ROOT: Final = Path(__file__).resolve().parents[1]
CRD_DIR: Final = PACKAGE_ROOT / "manifests" / "crds"
SAMPLE_POLICY: Final = PACKAGE_ROOT / "manifests" / "samples" / "dev-placementpolicy.yaml"
SEEDS_DIR: Final = PACKAGE_ROOT.parent / "shared" / "seeds" / "manifests"
"""The seed manifests and scripts the real node's images are built from (beside the checkout)."""
WEBHOOK: Final = "webhook"
CONTROLLER: Final = "controller"
EXIT_NOT_FOUND: Final = 3
# The file names of certs.store (the names of a kubernetes.io/tls Secret's entries).
CA_CERT: Final = "ca.crt"
TLS_CERT: Final = "tls.crt"
TLS_KEY: Final = "tls.key"

_STATE_VERSION: Final = 1
_POLL_SECONDS: Final = 0.1
_STOP_GRACE_SECONDS: Final = 10.0
_CONTROLLER_SETTLE_SECONDS: Final = 2.0  # it must keep running at least this long
_LOG_TAIL_LINES: Final = 12
_PREFIX: Final = "torchgate dev: "

ApiRequest = Callable[[str, str, Mapping[str, Any] | None], tuple[int, dict[str, Any]]]
"""``(method, path, body) -> (HTTP status, decoded body)`` against the apiserver."""


class DevError(Exception):
    """Something the person running ``torchgate dev`` must know.

    The first line of the message says what failed; further lines may quote the end of a log.
    """


# --------------------------------------------------------------------------- layout and state


@dataclass(frozen=True, slots=True)
class DevLayout:
    """Everything of one dev cluster inside DIR."""

    root: Path

    @property
    def control_plane(self) -> Layout:
        """The control plane's part (its work dir is DIR itself)."""
        return Layout(self.root)

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig users export."""
        return self.control_plane.kubeconfig

    @property
    def state(self) -> Path:
        """PIDs and ports of the webhook and the controller."""
        return self.root / STATE_FILE

    @property
    def tls(self) -> Path:
        """The webhook's CA and serving certificate (``certs`` file names)."""
        return self.root / "tls"

    @property
    def webhook_log(self) -> Path:
        """The webhook's stdout and stderr."""
        return self.root / "webhook.log"

    @property
    def controller_log(self) -> Path:
        """The controller's stdout and stderr."""
        return self.root / "controller.log"

    @property
    def images_log(self) -> Path:
        """Progress of the seed images' build for the real node."""
        return self.root / "images.log"

    def logs(self) -> tuple[Path, ...]:
        """What ``down --keep-logs`` and a failed ``up`` keep."""
        return (self.control_plane.logs, self.webhook_log, self.controller_log, self.images_log)

    def owned(self) -> tuple[Path, ...]:
        """Every path a dev cluster writes; ``down`` removes these and nothing else."""
        return (
            *self.control_plane.generated(),
            self.root / "kubectl-cache",
            self.state,
            self.tls,
            self.webhook_log,
            self.controller_log,
            self.images_log,
        )


@dataclass(frozen=True, slots=True)
class Product:
    """A torchgate process started here: the webhook or the controller."""

    process: ManagedProcess
    port: int

    def to_json(self) -> dict[str, Any]:
        """JSON form for the state file."""
        return {**self.process.to_json(), "port": self.port}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Product:
        """Inverse of :meth:`to_json`; raises KeyError/TypeError/ValueError on bad input."""
        return cls(process=ManagedProcess.from_json(raw), port=int(raw["port"]))


@dataclass(frozen=True, slots=True)
class DevState:
    """What ``dev.json`` records besides the control plane's own state file."""

    webhook: Product | None = None
    controller: Product | None = None
    controller_error: str | None = None
    images: ManagedProcess | None = None
    pools: tuple[str, ...] = ()
    populated: bool = False
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def products(self) -> list[Product]:
        """The recorded product processes, controller first (it is stopped first)."""
        return [p for p in (self.controller, self.webhook) if p is not None]

    def to_json(self) -> dict[str, Any]:
        """JSON form for the state file."""
        return {
            "version": _STATE_VERSION,
            "webhook": self.webhook.to_json() if self.webhook else None,
            "controller": self.controller.to_json() if self.controller else None,
            "controller_error": self.controller_error,
            "images": self.images.to_json() if self.images else None,
            "pools": list(self.pools),
            "populated": self.populated,
            "started_at": self.started_at,
        }

    @classmethod
    def load(cls, path: Path) -> DevState | None:
        """The state in ``path``; None when there is none.

        Raises:
            DevError: The file exists but cannot be read.
        """
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise DevError(f"unreadable dev state {path}: {error}") from None
        try:
            if raw.get("version") != _STATE_VERSION:
                raise ValueError(f"unsupported version {raw.get('version')!r}")
            webhook, controller = raw.get("webhook"), raw.get("controller")
            controller_error = raw.get("controller_error")
            images = raw.get("images")
            return cls(
                images=ManagedProcess.from_json(images) if images else None,
                webhook=Product.from_json(webhook) if webhook else None,
                controller=Product.from_json(controller) if controller else None,
                controller_error=str(controller_error) if controller_error else None,
                pools=tuple(str(pool) for pool in raw.get("pools", [])),
                populated=bool(raw.get("populated", False)),
                started_at=str(raw.get("started_at", "")),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise DevError(f"unreadable dev state {path}: {error}") from None

    def save(self, path: Path) -> None:
        """Write the state file (owner-only: it names processes to signal)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(self.to_json(), out, indent=2)


def default_dir(start: Path | None = None) -> Path:
    """``.dev`` at the top of the git checkout around ``start`` (the current dir), else there."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return candidate / DEFAULT_DIR_NAME
    return here / DEFAULT_DIR_NAME


# --------------------------------------------------------------------------- process handling


def _child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # children get --kubeconfig; never someone else's cluster
    env["PYTHONUNBUFFERED"] = "1"
    # The children must run this very code, also from a checkout that is not pip-installed.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return env


def spawn(name: str, argv: Sequence[str], log_path: Path, *, cwd: Path) -> ManagedProcess:
    """Start a detached process in its own session, stdout and stderr appended to ``log_path``."""
    return processes.spawn(name, argv, log_path, cwd=cwd, env=_child_environment(), banner=True)


def stop_process(process: ManagedProcess, *, grace: float = _STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds; reap it if it is ours."""
    processes.stop(process, grace=grace)


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    return processes.log_tail(path, lines)


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- probes


def _get_ok(url: str, *, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _tls_context(ca_file: Path) -> ssl.SSLContext | None:
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError):
        return None


def webhook_ready(port: int, ca_file: Path) -> bool:
    """Whether the webhook answers ``/readyz`` over TLS that verifies against our CA."""
    context = _tls_context(ca_file)
    return context is not None and _get_ok(f"https://127.0.0.1:{port}/readyz", context=context)


def controller_healthy(port: int) -> bool:
    """Whether the controller answers ``/healthz`` on its metrics port."""
    return _get_ok(f"http://127.0.0.1:{port}/healthz")


class ApiClient:
    """Raw JSON calls to a control plane's apiserver with its admin token (no kubectl process).

    Why not kubectl: every ``kubectl apply`` on a fresh cluster spends 1.5-2 s on discovery and
    OpenAPI downloads, which was a quarter of ``up``.
    """

    def __init__(self, plane: ControlPlane) -> None:
        self.server = plane.server
        self.token = plane.token
        self.context = ssl.create_default_context(
            cafile=str(plane.ca_file) if plane.ca_file else None
        )

    def __call__(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = "application/json",
    ) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, decoded body)``; raises OSError when the apiserver is unreachable."""
        data = json.dumps(body).encode() if body is not None else None
        call = urllib.request.Request(self.server + path, data=data, method=method)
        if self.token:
            call.add_header("Authorization", f"Bearer {self.token}")
        call.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(call, timeout=10, context=self.context) as response:
                return int(response.status), json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            with error:
                return int(error.code), json.loads(error.read() or b"{}")

    def ready(self) -> bool:
        """Whether the apiserver answers ``/readyz`` with 200."""
        call = urllib.request.Request(self.server + "/readyz")
        if self.token:
            call.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(call, timeout=2, context=self.context) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def apply(self, obj: Mapping[str, Any], *, retry_for: float = 10.0) -> dict[str, Any]:
        """Server-side apply ``obj`` (created or updated); retries while its kind is not served.

        Raises:
            DevError: The apiserver refused it.
        """
        deadline = time.monotonic() + retry_for
        while True:
            status, body = self(
                "PATCH",
                devcluster.apply_path(obj),
                obj,
                content_type="application/apply-patch+yaml",  # JSON is YAML
            )
            if status in (200, 201):
                return body
            # 404 for a kind whose CRD was just established, until the apiserver serves it
            if status != 404 or time.monotonic() > deadline:
                message = " ".join(str(body.get("message", "")).split())[:300]
                raise DevError(
                    f"applying {obj.get('kind')} {obj.get('metadata', {}).get('name')}: "
                    f"HTTP {status} {body.get('reason', '')} {message}".rstrip()
                )
            time.sleep(_POLL_SECONDS)

    def wait_for_condition(
        self, objects: Sequence[Mapping[str, Any]], condition: str, *, timeout: float
    ) -> None:
        """Wait until every object reports ``condition`` True in its status.

        Raises:
            DevError: Not within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        pending = list(objects)
        while pending:
            for obj in list(pending):
                with contextlib.suppress(OSError, ValueError):
                    status, body = self("GET", devcluster.object_path(obj))
                    conditions = body.get("status", {}).get("conditions") or []
                    if status == 200 and any(
                        c.get("type") == condition and c.get("status") == "True" for c in conditions
                    ):
                        pending.remove(obj)
            if not pending:
                return
            if time.monotonic() > deadline:
                waiting = ", ".join(
                    f"{o.get('kind')} {o.get('metadata', {}).get('name')}" for o in pending
                )
                raise DevError(f"timed out after {timeout:.0f}s waiting for {condition}: {waiting}")
            time.sleep(_POLL_SECONDS)


def wait_for_admission(
    request: ApiRequest, *, namespace: str = "default", timeout: float = 30.0
) -> float:
    """Wait until the apiserver calls both webhooks; return the seconds it took.

    Two dry-run creates (nothing is stored): a plain job must come back defaulted (mutating
    webhook), one with a stray ``--world-size`` must be refused with a cause on ``args``
    (validating webhook; the mutating one never refuses that).

    Raises:
        DevError: Not both within ``timeout`` seconds.
    """
    began = time.monotonic()
    path = devcluster.probe_path(namespace)
    probes = {
        "mutating": (devcluster.probe_job(namespace), devcluster.mutation_seen),
        "validating": (
            devcluster.probe_job(namespace, stray_argument=True),
            devcluster.validation_seen,
        ),
    }
    pending = dict(probes)
    last: dict[str, str] = {}
    while True:
        for kind, (probe, seen) in list(pending.items()):
            try:
                status, body = request("POST", path, probe)
            except (OSError, ValueError) as error:
                last[kind] = f"{type(error).__name__}: {error}"
                continue
            if seen(status, body):
                del pending[kind]
            else:
                message = " ".join(str(body.get("message", "")).split())[:300]
                last[kind] = f"HTTP {status} {body.get('reason', '')} {message}".rstrip()
        if not pending:
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            missing = " and ".join(pending)
            answers = "; ".join(
                f"{kind} probe got {last.get(kind, 'no answer')}" for kind in pending
            )
            raise DevError(
                f"the apiserver did not call the {missing} webhook as expected within "
                f"{timeout:.0f}s (dry-run probes in namespace {namespace}): {answers}"
            )
        time.sleep(_POLL_SECONDS)


# --------------------------------------------------------------------------- commands and files


def webhook_command(*, port: int, tls_dir: Path, kubeconfig: Path) -> list[str]:
    """``torchgate webhook`` on loopback, watching the cluster's PlacementPolicies."""
    return [
        sys.executable, "-m", "torchgate", "webhook",
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--tls-cert-file", str(tls_dir / TLS_CERT),
        "--tls-private-key-file", str(tls_dir / TLS_KEY),
        "--kubeconfig", str(kubeconfig),
    ]  # fmt: skip


def controller_command(*, kubeconfig: Path, metrics_port: int) -> list[str]:
    """``torchgate controller`` for every namespace, running jobs that name no other manager.

    No leader election: ``dev`` runs exactly one controller per cluster (its state file says
    which), and a Lease left by a killed controller would only delay the next one.
    """
    return [
        sys.executable, "-m", "torchgate", "controller",
        "--kubeconfig", str(kubeconfig),
        "--manage-unowned",
        "--no-leader-elect",
        "--metrics-bind-address", "127.0.0.1",
        "--metrics-port", str(metrics_port),
    ]  # fmt: skip


def make_certificates(tls_dir: Path, *, now: datetime | None = None) -> bytes:
    """CA and serving certificate (IP SAN 127.0.0.1, DNS localhost) in ``tls_dir``; the CA PEM.

    Valid material already there is kept (the ``certs`` rotation plan decides), so a restarted
    webhook presents the certificate the apiserver already trusts.

    Raises:
        DevError: The files cannot be read or written.
    """
    # Imported here: certs.store loads the Kubernetes client (~1.5 s), which status and down
    # never need.
    from torchgate.certs.authority import CertificateError, plan_rotation
    from torchgate.certs.store import CertsError, read_directory, write_directory

    try:
        plan = plan_rotation(
            read_directory(tls_dir),
            dns_names=("localhost",),
            ips=("127.0.0.1",),
            now=now or datetime.now(UTC),
        )
        write_directory(tls_dir, plan.material)
    except (CertsError, CertificateError) as error:
        raise DevError(f"webhook certificates in {tls_dir}: {error}") from None
    return plan.material.ca_cert


def remove_files(layout: DevLayout, *, keep_logs: bool) -> None:
    """Remove what a dev cluster wrote in DIR (not the logs with ``keep_logs``), then DIR if empty.

    Only known paths are removed, so a mistaken ``--dir`` never loses anyone's files.
    """
    kept = set(layout.logs()) if keep_logs else set()
    for path in layout.owned():
        if path in kept:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    with contextlib.suppress(OSError):
        layout.root.rmdir()  # only when empty


# --------------------------------------------------------------------------- the dev cluster


@dataclass(frozen=True, slots=True)
class Health:
    """What runs of one dev cluster."""

    exists: bool
    control_plane: ControlPlane | None
    control_plane_processes: tuple[tuple[ManagedProcess, bool], ...]
    apiserver_ready: bool
    state: DevState | None
    webhook_alive: bool
    webhook_ready: bool
    controller_alive: bool
    controller_healthy: bool

    @property
    def control_plane_running(self) -> bool:
        """Every control-plane process runs."""
        return bool(self.control_plane_processes) and all(
            alive for _, alive in self.control_plane_processes
        )

    @property
    def webhook_ok(self) -> bool:
        """The webhook runs and is ready."""
        return self.webhook_alive and self.webhook_ready

    @property
    def controller_ok(self) -> bool:
        """The controller runs and answers /healthz."""
        return self.controller_alive and self.controller_healthy


@dataclass
class UpOptions:
    """What ``up`` creates; the programmatic form of its flags."""

    pools: tuple[devcluster.NodePool, ...] = devcluster.DEFAULT_POOLS
    controller: bool = True
    sample_policy: bool = True
    webhook_port: int = 0
    timeout: float = 120.0
    real_node: bool = True
    seed_images: bool = True


class DevCluster:
    """One dev cluster in DIR: start it, check it, stop it. Messages go to ``report``."""

    def __init__(self, root: Path, *, report: Callable[[str], None] | None = None) -> None:
        self.layout = DevLayout(root.resolve())
        self._report = report or _to_stderr

    # ---------------------------------------------------------------- inspection

    def _control_plane(self) -> ControlPlane | None:
        if not self.layout.control_plane.state.exists():
            return None
        try:
            return ControlPlane.from_state(self.layout.root)
        except ControlPlaneError as error:
            raise DevError(str(error)) from None

    def _control_plane_processes(self) -> list[ManagedProcess]:
        """The control plane's processes, read from its documented state file."""
        try:
            raw = json.loads(self.layout.control_plane.state.read_text(encoding="utf-8"))
            return [ManagedProcess.from_json(item) for item in raw["processes"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return []

    def health(self) -> Health:
        """What runs now (reads ``/proc``, probes ``/readyz`` and ``/healthz``).

        Raises:
            DevError: A state file is unreadable.
        """
        state = DevState.load(self.layout.state)
        plane = self._control_plane()
        processes = tuple((p, is_alive(p)) for p in self._control_plane_processes())
        running = bool(processes) and all(alive for _, alive in processes)
        apiserver_ready = False
        if plane is not None and running:
            apiserver_ready = ApiClient(plane).ready()
        webhook = state.webhook if state else None
        controller = state.controller if state else None
        webhook_alive = webhook is not None and is_alive(webhook.process)
        controller_alive = controller is not None and is_alive(controller.process)
        return Health(
            exists=plane is not None or state is not None,
            control_plane=plane,
            control_plane_processes=processes,
            apiserver_ready=apiserver_ready,
            state=state,
            webhook_alive=webhook_alive,
            webhook_ready=webhook_alive
            and webhook is not None
            and webhook_ready(webhook.port, self.layout.tls / CA_CERT),
            controller_alive=controller_alive,
            controller_healthy=controller_alive
            and controller is not None
            and controller_healthy(controller.port),
        )

    # ---------------------------------------------------------------- up

    def up(self, options: UpOptions | None = None) -> DevState:
        """Start the dev cluster, or complete or confirm a running one; see the module doc.

        Raises:
            DevError: It could not be started; what had been started here is stopped again.
        """
        options = options or UpOptions()
        began = time.monotonic()
        self.layout.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        health = self.health()
        if health.exists and health.control_plane_running and health.control_plane is not None:
            return self._complete(health, health.control_plane, options, began)
        if health.exists:
            self._report(
                f"found a stopped or broken dev cluster in {self.layout.root}; clearing it"
            )
            self._stop_everything(health)
            remove_files(self.layout, keep_logs=True)
            self.layout.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self._fresh(options, began)

    def _complete(
        self, health: Health, plane: ControlPlane, options: UpOptions, began: float
    ) -> DevState:
        state = health.state or DevState(pools=tuple(pool.describe() for pool in options.pools))
        if (
            state.populated
            and health.webhook_ok
            and (health.controller_ok or not options.controller)
        ):
            self._report(f"already up in {self.layout.root}")
            return state
        self._report(f"control plane already up in {self.layout.root}; starting what is down")
        before = {product.process.pid for product in state.products()}
        try:
            if not state.populated:
                self._populate(plane, options)
                state = replace(state, populated=True)
                state.save(self.layout.state)
            state = self._start_products(
                plane,
                state,
                options,
                webhook=not health.webhook_ok,
                controller=options.controller and not health.controller_ok,
            )
        except BaseException:
            # The control plane ran before this call, so it stays; what this call started goes.
            with contextlib.suppress(DevError):
                for product in (DevState.load(self.layout.state) or state).products():
                    if product.process.pid not in before:
                        stop_process(product.process)
            raise
        self._report(f"complete again in {time.monotonic() - began:.1f}s")
        return state

    def _fresh(self, options: UpOptions, began: float) -> DevState:
        for path in (CRD_DIR, *((SAMPLE_POLICY,) if options.sample_policy else ())):
            if not path.exists():
                raise DevError(f"{path} not found; torchgate dev needs a source checkout")
        self._report("building or finding the control-plane binaries")
        try:
            binaries = ensure_binaries(progress=sys.stderr)
        except BinariesUnavailable as error:
            remove_files(self.layout, keep_logs=True)  # leaves no empty DIR behind
            raise DevError(str(error)) from None
        plane = ControlPlane(
            binaries=binaries,
            workdir=self.layout.root,
            startup_timeout=options.timeout,
            real_node=options.real_node,
            # The real node joins the first pool, so the sample policy's nodeSelector sends
            # CPU jobs there (they fit no fake GPU node better: it has no GPU to spare).
            node_labels={"pool": options.pools[0].name} if options.pools else None,
        )
        self._report(f"starting the control plane in {self.layout.root}")
        state = DevState(pools=tuple(pool.describe() for pool in options.pools))
        state.save(self.layout.state)
        try:
            # The certificates (key generation, and loading the certs package) take 1-2 s;
            # they are made while the control plane starts, which mostly waits.
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as worker:
                certificates = worker.submit(make_certificates, self.layout.tls)
                plane.start(detach=True)
                self._report(f"control plane ready in {plane.startup_seconds or 0:.1f}s")
                self._populate(plane, options)
                state = replace(state, populated=True)
                state.save(self.layout.state)
                ca_bundle = certificates.result()
            state = self._start_products(
                plane,
                state,
                options,
                webhook=True,
                controller=options.controller,
                ca_bundle=ca_bundle,
            )
            if options.real_node and options.seed_images:
                state = self._start_image_build(state)
        except BaseException as error:
            self._report("start-up failed; stopping what was started (logs are kept)")
            with contextlib.suppress(DevError):
                for product in (DevState.load(self.layout.state) or state).products():
                    stop_process(product.process)
            plane.stop()
            remove_files(self.layout, keep_logs=True)
            if isinstance(error, ControlPlaneError):
                raise DevError(str(error)) from None
            raise
        self._report(f"up in {time.monotonic() - began:.1f}s")
        return state

    def _start_image_build(self, state: DevState) -> DevState:
        """Build the seeds' images for the real node in the background (minutes, first time)."""
        if not SEEDS_DIR.is_dir():
            self._report(f"no seed manifests in {SEEDS_DIR}: the seed images are not built")
            return state
        process = spawn(
            "images",
            [sys.executable, "-m", "torchgate", "dev", "images", "--dir", str(self.layout.root)],
            self.layout.images_log,
            cwd=self.layout.root,
        )
        self._report(
            "building the seed images (pytorch-demo, kubeflowkatib/pytorch-mnist) in the "
            f"background: first time several minutes, then seconds; progress in "
            f"{self.layout.images_log}; wait for them with: torchgate dev images"
        )
        state = replace(state, images=process)
        state.save(self.layout.state)
        return state

    def build_images(self) -> dict[str, str]:
        """Build the seeds' images and push them to the real node's registry (cached).

        Raises:
            DevError: No dev cluster with a real node here, or the build failed.
        """
        plane = self._control_plane()
        if plane is None or plane.registry is None:
            raise DevError(
                f"no dev cluster with a real node in {self.layout.root} (torchgate dev up)"
            )
        if not SEEDS_DIR.is_dir():
            raise DevError(f"no seed manifests in {SEEDS_DIR}")
        from torchgate.node import images

        try:
            return images.ensure_images(
                images.seed_images(SEEDS_DIR),
                registry=plane.registry,
                cache=images.node_cache(),
                report=self._report,
            )
        except images.ImageBuildError as error:
            raise DevError(f"building the seed images: {error}") from None

    def _populate(self, plane: ControlPlane, options: UpOptions) -> None:
        """Fake GPU nodes, the CRDs (Established), the sample PlacementPolicy; nodes Ready."""
        api = ApiClient(plane)
        nodes = devcluster.pool_nodes(options.pools)
        self._report(f"creating {len(nodes)} fake GPU nodes and installing the CRDs")
        crds = _load_documents(sorted(CRD_DIR.glob("*.yaml")))
        for obj in [*nodes, *crds]:
            api.apply(obj)
        api.wait_for_condition(crds, "Established", timeout=60)
        if options.sample_policy:
            for obj in _load_documents([SAMPLE_POLICY]):
                api.apply(obj)
        api.wait_for_condition(nodes, "Ready", timeout=60)

    def _start_products(
        self,
        plane: ControlPlane,
        state: DevState,
        options: UpOptions,
        *,
        webhook: bool,
        controller: bool,
        ca_bundle: bytes | None = None,
    ) -> DevState:
        """(Re)start the webhook and/or the controller; both start at once, then are awaited.

        A webhook that does not come up is an error; a controller that does not is recorded in
        the state (``controller_error``) and reported, and everything else stays up.
        """
        kubeconfig = self.layout.kubeconfig
        if webhook:
            if state.webhook is not None:
                stop_process(state.webhook.process)
            state = replace(state, webhook=None)
            state.save(self.layout.state)
            if ca_bundle is None:
                ca_bundle = make_certificates(self.layout.tls)
            port = options.webhook_port or free_port()
            self._report(f"starting the webhook on https://127.0.0.1:{port}")
            process = spawn(
                WEBHOOK,
                webhook_command(port=port, tls_dir=self.layout.tls, kubeconfig=kubeconfig),
                self.layout.webhook_log,
                cwd=self.layout.root,
            )
            state = replace(state, webhook=Product(process, port))
            state.save(self.layout.state)
        if controller:
            # Started now, so its start-up overlaps the webhook's (it does not need the webhook).
            if state.controller is not None:
                stop_process(state.controller.process)
            self._report("starting the controller (--manage-unowned)")
            metrics_port = free_port()
            process = spawn(
                CONTROLLER,
                controller_command(kubeconfig=kubeconfig, metrics_port=metrics_port),
                self.layout.controller_log,
                cwd=self.layout.root,
            )
            state = replace(state, controller=Product(process, metrics_port), controller_error=None)
            state.save(self.layout.state)
        if webhook and state.webhook is not None and ca_bundle is not None:
            self._register_webhook(plane, state.webhook, ca_bundle, options)
        if controller and state.controller is not None:
            state = self._await_controller(state, state.controller, options)
        return state

    def _register_webhook(
        self, plane: ControlPlane, webhook: Product, ca_bundle: bytes, options: UpOptions
    ) -> None:
        self._wait_for(
            webhook.process,
            lambda: webhook_ready(webhook.port, self.layout.tls / CA_CERT),
            what="the webhook's /readyz",
            timeout=options.timeout,
        )
        self._report("registering the webhook configurations 'torchgate' by URL")
        configurations = devcluster.webhook_configurations(
            f"https://127.0.0.1:{webhook.port}", ca_bundle=ca_bundle
        )
        api = ApiClient(plane)
        for obj in configurations:
            api.apply(obj)
        wait_for_admission(api, timeout=min(options.timeout, 60.0))

    def _await_controller(
        self, state: DevState, controller: Product, options: UpOptions
    ) -> DevState:
        process = controller.process
        started = time.monotonic()
        try:
            self._wait_for(
                process,
                lambda: (
                    time.monotonic() - started >= _CONTROLLER_SETTLE_SECONDS
                    and controller_healthy(controller.port)
                ),
                what="the controller's /healthz",
                timeout=min(options.timeout, 30.0),
            )
            status = processes.exit_status(process)  # a crash right after it started to serve
            if status is not None:
                raise DevError(
                    f"controller exited with status {status} right after start-up; "
                    f"last lines of {process.log_path}:\n{_log_tail(process.log_path)}"
                )
        except DevError as error:
            stop_process(process)
            summary = f"{str(error).split(';')[0]} (log {process.log_path})"
            state = replace(state, controller=None, controller_error=summary)
            state.save(self.layout.state)
            self._report(f"WARNING: the controller did not start; the rest stays up. {error}")
        return state

    def _wait_for(
        self, process: ManagedProcess, ready: Callable[[], bool], *, what: str, timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            status = processes.exit_status(process)
            if status is not None:
                raise DevError(
                    f"{process.name} exited with status {status} during start-up; "
                    f"last lines of {process.log_path}:\n{_log_tail(process.log_path)}"
                )
            if time.monotonic() > deadline:
                raise DevError(
                    f"timed out after {timeout:.0f}s waiting for {what}; "
                    f"last lines of {process.log_path}:\n{_log_tail(process.log_path)}"
                )
            time.sleep(_POLL_SECONDS)

    # ---------------------------------------------------------------- down

    def down(self, *, keep_logs: bool = False) -> bool:
        """Stop everything of this dev cluster and remove its files; False if there was none.

        Raises:
            DevError: A state file is unreadable (nothing is removed then).
        """
        health = self.health()
        if not health.exists:
            remove_files(self.layout, keep_logs=keep_logs)
            return False
        self._stop_everything(health)
        remove_files(self.layout, keep_logs=keep_logs)
        return True

    def _stop_everything(self, health: Health) -> None:
        if health.state is not None and health.state.images is not None:
            stop_process(health.state.images)
        for product in health.state.products() if health.state else []:
            stop_process(product.process)
        if health.control_plane is not None:
            health.control_plane.stop()
        elif health.control_plane_processes:
            for process, _ in health.control_plane_processes:
                stop_process(process)

    # ---------------------------------------------------------------- status

    def describe(self, health: Health) -> list[str]:
        """Human lines on what runs, with PIDs, endpoints, readiness and memory."""
        lines: list[str] = []
        names = ", ".join(
            f"{p.name} {p.pid}{'' if alive else ' (dead)'}"
            for p, alive in health.control_plane_processes
        )
        plane = health.control_plane
        if plane is None or not health.control_plane_processes:
            lines.append("  control plane  not running")
        else:
            verdict = "running" if health.control_plane_running else "BROKEN"
            ready = "readyz ok" if health.apiserver_ready else "readyz failing"
            lines.append(f"  control plane  {verdict}  {plane.server}  {ready}")
            lines.append(f"                 {names}  (logs {self.layout.control_plane.logs})")
        state = health.state or DevState()
        if state.pools:
            lines.append(f"  GPU nodes      {'; '.join(state.pools)}")
        if plane is not None and plane.node_name is not None:
            lines.append(
                f"  real node      {plane.node_name} (containerd, kubelet, CoreDNS; images from "
                f"{plane.registry})"
            )
            if state.images is not None:
                building = is_alive(state.images)
                lines.append(
                    f"  seed images    {'building' if building else 'build finished'}  "
                    f"(log {self.layout.images_log}; wait: torchgate dev images)"
                )
        webhook = state.webhook
        if webhook is None:
            lines.append("  webhook        not running")
        else:
            verdict = "running" if health.webhook_alive else "DEAD"
            ready = "readyz ok" if health.webhook_ready else "not ready"
            lines.append(
                f"  webhook        {verdict}  pid {webhook.process.pid}  "
                f"https://127.0.0.1:{webhook.port}  {ready}  (log {self.layout.webhook_log})"
            )
        controller = state.controller
        if controller is None:
            reason = state.controller_error or "not started"
            lines.append(f"  controller     not running: {reason}")
        else:
            verdict = "running" if health.controller_alive else "DEAD"
            ready = "healthz ok" if health.controller_healthy else "healthz failing"
            lines.append(
                f"  controller     {verdict}  pid {controller.process.pid}  "
                f"metrics http://127.0.0.1:{controller.port}/metrics  {ready}  "
                f"(log {self.layout.controller_log})"
            )
        processes = [p for p, _ in health.control_plane_processes]
        processes += [product.process for product in state.products()]
        memory = [memory_kib(process) for process in processes]
        if any(current for current, _ in memory):
            lines.append(
                f"  memory         {sum(c for c, _ in memory) / 1024:.0f} MiB resident "
                f"(sum of per-process peaks {sum(p for _, p in memory) / 1024:.0f} MiB)"
            )
        return lines


def _load_documents(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The YAML documents (objects) in ``paths``.

    Raises:
        DevError: A file is unreadable or not YAML.
    """
    documents: list[dict[str, Any]] = []
    for path in paths:
        try:
            loaded = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as error:
            raise DevError(f"cannot read {path}: {' '.join(str(error).split())}") from None
        documents += [doc for doc in loaded if isinstance(doc, dict)]
    return documents


def _to_stderr(message: str) -> None:
    print(f"{_PREFIX}{message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- command line


def _pool(value: str) -> devcluster.NodePool:
    try:
        return devcluster.parse_pool(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number (0 = any free port)")
    return int(value)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 1 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{value!r} is not between 1 and 3600 seconds")
    return seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``torchgate dev`` actions and flags."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the dev cluster keeps its state (default: .dev at the top of this checkout)",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser(
        "up",
        parents=[common],
        help="start the local cluster, webhook and controller (idempotent)",
        description="Start a local control plane with fake GPU nodes, the torchgate webhook "
        "(registered with the apiserver) and the controller. Prints the KUBECONFIG export line "
        "on stdout; everything else goes to stderr.",
    )
    up.add_argument(
        "--pool",
        dest="pools",
        metavar="NAME=COUNT[xGPUS]",
        action="append",
        type=_pool,
        help="a pool of fake GPU nodes NAME-0.. labelled pool=NAME (repeatable; "
        "default: a100=4x8 and t4=2x8)",
    )
    up.add_argument(
        "--no-controller", action="store_true", help="do not start torchgate controller"
    )
    up.add_argument(
        "--no-sample-policy",
        action="store_true",
        help="do not install manifests/samples/dev-placementpolicy.yaml",
    )
    up.add_argument(
        "--webhook-port", type=_port, default=0, help="the webhook's port (default: a free one)"
    )
    up.add_argument(
        "--no-real-node",
        action="store_true",
        help="no real node (containerd + kubelet): only fake GPU nodes, nothing really runs",
    )
    up.add_argument(
        "--no-seed-images",
        action="store_true",
        help="do not build the seeds' images for the real node in the background",
    )
    up.add_argument(
        "--timeout",
        type=_seconds,
        default=120.0,
        help="seconds to wait for each part to be ready (default 120)",
    )
    down = actions.add_parser(
        "down",
        parents=[common],
        help="stop everything and remove the state",
        description="Stop the controller, the webhook and the control plane; remove the state.",
    )
    down.add_argument(
        "--keep-logs", action="store_true", help="keep logs/, webhook.log and controller.log"
    )
    actions.add_parser(
        "images",
        parents=[common],
        help="build the seeds' images for the real node (waits for a build in progress)",
        description="Build pytorch-demo and kubeflowkatib/pytorch-mnist from the seeds and "
        "push them to the real node's registry; cached on their inputs, so a second run takes "
        "seconds. Progress goes to stderr.",
    )
    actions.add_parser(
        "status",
        parents=[common],
        help="show what runs",
        description="Show PIDs, endpoints and readiness; exit 0 when up, 1 when partly "
        "down, 3 when there is no dev cluster.",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``torchgate dev ACTION``."""
    root = args.dir if args.dir is not None else default_dir()
    dev = DevCluster(root)
    try:
        with _interruptible():
            if args.action == "up":
                return _run_up(dev, args)
            if args.action == "down":
                return _run_down(dev, keep_logs=args.keep_logs)
            if args.action == "images":
                return _run_images(dev)
            return _run_status(dev)
    except DevError as error:
        _to_stderr(f"error: {error}")
        return 1
    except KeyboardInterrupt:
        _to_stderr("interrupted")
        return 130
    except Exception as error:  # the command-line boundary: one line, never a traceback
        _to_stderr(f"unexpected {type(error).__name__}: {' '.join(str(error).split())}")
        return 1


def _run_up(dev: DevCluster, args: argparse.Namespace) -> int:
    pools = tuple(args.pools) if args.pools else devcluster.DEFAULT_POOLS
    try:
        devcluster.pool_nodes(pools)
    except ValueError as error:
        raise DevError(str(error)) from None
    options = UpOptions(
        pools=pools,
        controller=not args.no_controller,
        sample_policy=not args.no_sample_policy,
        webhook_port=args.webhook_port,
        timeout=args.timeout,
        real_node=not args.no_real_node,
        seed_images=not args.no_seed_images,
    )
    dev.up(options)
    health = dev.health()
    for line in dev.describe(health):
        print(line, file=sys.stderr)
    print(f"  stop it with: torchgate dev down --dir {dev.layout.root}", file=sys.stderr)
    print(f"export KUBECONFIG={dev.layout.kubeconfig}", flush=True)
    return 0


def _run_images(dev: DevCluster) -> int:
    built = dev.build_images()
    for reference, digest in sorted(built.items()):
        _to_stderr(f"{reference} {digest}")
    return 0


def _run_down(dev: DevCluster, *, keep_logs: bool) -> int:
    if dev.down(keep_logs=keep_logs):
        kept = f"; logs kept in {dev.layout.root}" if keep_logs else ""
        _to_stderr(f"stopped and removed the dev cluster in {dev.layout.root}{kept}")
    else:
        _to_stderr(f"no dev cluster in {dev.layout.root}; nothing to stop")
    return 0


def _run_status(dev: DevCluster) -> int:
    health = dev.health()
    if not health.exists:
        _to_stderr(f"no dev cluster in {dev.layout.root} (start one with: torchgate dev up)")
        return EXIT_NOT_FOUND
    state = health.state or DevState()
    controller_started = state.controller is not None
    up = (
        health.control_plane_running
        and health.apiserver_ready
        and health.webhook_ok
        and (health.controller_ok or not controller_started)
    )
    _to_stderr(f"{'up' if up else 'PARTLY DOWN'} in {dev.layout.root}")
    for line in dev.describe(health):
        print(line, file=sys.stderr)
    if health.control_plane_running:
        print(f"export KUBECONFIG={dev.layout.kubeconfig}", flush=True)
    return 0 if up else 1


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so a killed ``up`` still stops what it started."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        del frame
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    for signum, handler in previous.items():
        if handler in (signal.SIG_DFL, None):
            signal.signal(signum, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler in (signal.SIG_DFL, None):
                signal.signal(signum, handler or signal.SIG_DFL)
