"""One dev cluster in DIR: bring it up (fresh, or completing a running one), check it, stop it.

``up`` runs the steps of :mod:`torchgate_dev` in order and records every process in the state file
right after it starts, so an ``up`` killed half-way leaves a trail the next ``up`` or ``down``
cleans. A failed fresh ``up`` stops what it started and keeps only the logs; a failed ``up`` that
completed a running cluster stops only what it started itself.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from torchgate_dev import devcluster, seeds
from torchgate_dev.apiserver import ApiClient, controller_healthy, wait_for_admission, webhook_ready
from torchgate_dev.controlplane import processes
from torchgate_dev.controlplane.binaries import BinariesUnavailable, ensure_binaries
from torchgate_dev.controlplane.cluster import ClusterFeatures, ControlPlane, ControlPlaneError
from torchgate_dev.controlplane.processes import ManagedProcess, is_alive, memory_kib
from torchgate_dev.launch import (
    controller_command,
    log_tail,
    make_certificates,
    spawn,
    stop_process,
    webhook_command,
)
from torchgate_dev.paths import (
    CA_CERT,
    CRD_DIR,
    PYTORCHJOB_CRD,
    SAMPLE_POLICY,
    DevLayout,
    crd_files,
)
from torchgate_dev.ports import free_port
from torchgate_dev.state import DevError, DevState, Product, remove_files

WEBHOOK: Final = "webhook"
CONTROLLER: Final = "controller"

_POLL_SECONDS: Final = 0.1
_CONTROLLER_SETTLE_SECONDS: Final = 2.0  # it must keep running at least this long
_PREFIX: Final = "torchgate dev: "


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
    webhook_registered: bool
    controller_alive: bool
    controller_healthy: bool

    @property
    def control_plane_running(self) -> bool:
        """Every control-plane process runs."""
        return bool(self.control_plane_processes) and all(
            alive for _, alive in self.control_plane_processes
        )

    @property
    def webhook_serving(self) -> bool:
        """The webhook runs and is ready."""
        return self.webhook_alive and self.webhook_ready

    @property
    def webhook_ok(self) -> bool:
        """The webhook runs, is ready, and the apiserver's configurations send jobs to it."""
        return self.webhook_serving and self.webhook_registered

    @property
    def controller_ok(self) -> bool:
        """The controller runs and answers /healthz."""
        return self.controller_alive and self.controller_healthy


@dataclass
class UpOptions:
    """What ``up`` creates; the programmatic form of its flags."""

    pools: tuple[devcluster.NodePool, ...] = devcluster.DEFAULT_POOLS
    kubernetes_version: str | None = None
    """None: ``$TORCHGATE_KUBERNETES_VERSION``, else the default supported version."""
    features: ClusterFeatures = field(default_factory=ClusterFeatures)
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
        self._report = report or report_to_stderr

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
        serving = (
            webhook_alive
            and webhook is not None
            and webhook_ready(webhook.port, self.layout.tls / CA_CERT)
        )
        return Health(
            exists=plane is not None or state is not None,
            control_plane=plane,
            control_plane_processes=processes,
            apiserver_ready=apiserver_ready,
            state=state,
            webhook_alive=webhook_alive,
            webhook_ready=serving,
            webhook_registered=serving
            and webhook is not None
            and plane is not None
            and apiserver_ready
            and self._registered(plane, webhook),
            controller_alive=controller_alive,
            controller_healthy=controller_alive
            and controller is not None
            and controller_healthy(controller.port),
        )

    def _registered(self, plane: ControlPlane, webhook: Product) -> bool:
        """Whether the apiserver's webhook configurations send to ``webhook`` (URL and CA)."""
        try:
            ca_bundle = (self.layout.tls / CA_CERT).read_bytes()
            expected = devcluster.webhook_configurations(
                f"https://127.0.0.1:{webhook.port}", ca_bundle=ca_bundle
            )
            api = ApiClient(plane)
            found = []
            for obj in expected:
                status, body = api("GET", devcluster.object_path(obj))
                found.append(body if status == 200 else None)
        except (OSError, ValueError):
            return False
        return devcluster.registration_current(expected, found)

    # ---------------------------------------------------------------- up

    def up(self, options: UpOptions | None = None) -> DevState:
        """Start the dev cluster, or complete or confirm a running one; see the module doc.

        Raises:
            DevError: It could not be started; what had been started here is stopped again.
        """
        options = options or UpOptions()
        began = time.monotonic()
        self._make_dir()
        health = self.health()
        if health.exists and health.control_plane_running and health.control_plane is not None:
            return self._complete(health, health.control_plane, options, began)
        if health.exists:
            self._report(
                f"found a stopped or broken dev cluster in {self.layout.root}; clearing it"
            )
            self._stop_everything(health)
            remove_files(self.layout, keep_logs=True)
            self._make_dir()
        return self._fresh(options, began)

    def _make_dir(self) -> None:
        root = self.layout.root
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            probe = root / ".torchgate-dev-probe"
            probe.touch()
            probe.unlink()
        except OSError as error:
            raise DevError(
                f"cannot keep a dev cluster in {root}: {error.strerror or error}; "
                "choose a writable directory with --dir"
            ) from None

    def _complete(
        self, health: Health, plane: ControlPlane, options: UpOptions, began: float
    ) -> DevState:
        conflicts = settings_conflicts(plane.kubernetes_version, plane.features, options)
        if conflicts:
            raise DevError(
                f"the dev cluster in {self.layout.root} runs with {'; '.join(conflicts)}; "
                f"stop it first: {self.command('down')}"
            )
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
                webhook=not health.webhook_serving,
                register=not health.webhook_ok,
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
        for path in (CRD_DIR, PYTORCHJOB_CRD, *((SAMPLE_POLICY,) if options.sample_policy else ())):
            if not path.exists():
                raise DevError(f"{path} not found: torchgate-dev is installed without its data")
        self._report("building or finding the control-plane binaries")
        try:
            binaries = ensure_binaries(version=options.kubernetes_version, progress=sys.stderr)
        except BinariesUnavailable as error:
            remove_files(self.layout, keep_logs=True)  # leaves no empty DIR behind
            raise DevError(str(error)) from None
        plane = ControlPlane(
            binaries=binaries,
            features=options.features,
            workdir=self.layout.root,
            startup_timeout=options.timeout,
            real_node=options.real_node,
            # The real node joins the first pool, so the sample policy's nodeSelector sends
            # CPU jobs there (admission offers a GPU-free gang the nodes without GPUs first).
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
                seconds = plane.startup_seconds or 0
                version = plane.kubernetes_version or "(version unknown)"
                self._report(f"control plane ready in {seconds:.1f}s: Kubernetes {version}")
                self._populate(plane, options)
                state = replace(state, populated=True)
                state.save(self.layout.state)
                ca_bundle = certificates.result()
            state = self._start_products(
                plane,
                state,
                options,
                webhook=True,
                register=True,
                controller=options.controller,
                ca_bundle=ca_bundle,
            )
            if options.real_node and options.seed_images:
                state = seeds.start_build(self.layout, state, self._report)
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

    def build_images(self) -> dict[str, str]:
        """Build the seeds' images and push them to the real node's registry (cached).

        Raises:
            DevError: No dev cluster with a real node here, or the build failed.
        """
        return seeds.build(self._control_plane(), self.layout, self._report)

    def _populate(self, plane: ControlPlane, options: UpOptions) -> None:
        """Fake GPU nodes, the CRDs (Established), the sample PlacementPolicy; nodes Ready."""
        api = ApiClient(plane)
        nodes = devcluster.pool_nodes(options.pools)
        self._report(f"creating {len(nodes)} fake GPU nodes and installing the CRDs")
        crds = _load_documents(crd_files())
        for obj in [*nodes, *crds, *devcluster.pool_devices(options.pools)]:
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
        register: bool,
        controller: bool,
        ca_bundle: bytes | None = None,
    ) -> DevState:
        """(Re)start the webhook and/or the controller; both start at once, then are awaited.

        ``register`` (always with ``webhook``) points the apiserver's configurations at the
        webhook: an ``up`` stopped between starting the webhook and registering it left one that
        runs and is never called.

        A webhook that does not come up is an error; a controller that does not is recorded in
        the state (``controller_error``) and reported, and everything else stays up.
        """
        kubeconfig = self.layout.kubeconfig
        if not state.pool_port:  # one port for good: a restarted webhook still finds it
            state = replace(state, pool_port=free_port())
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
                webhook_command(
                    port=port,
                    tls_dir=self.layout.tls,
                    kubeconfig=kubeconfig,
                    controller_port=state.pool_port if options.controller else 0,
                ),
                self.layout.webhook_log,
                cwd=self.layout.root,
            )
            state = replace(state, webhook=Product(process, port))
            state.save(self.layout.state)
        if controller:
            # Started now, so its start-up overlaps the webhook's (it does not need the webhook).
            if state.controller is not None:
                stop_process(state.controller.process)
            self._report(
                "starting the controller (--manage-unowned; pool service on "
                f"https://127.0.0.1:{state.pool_port})"
            )
            metrics_port = free_port()
            if ca_bundle is None:
                make_certificates(self.layout.tls)  # the pool service serves the same pair
            process = spawn(
                CONTROLLER,
                controller_command(
                    kubeconfig=kubeconfig,
                    metrics_port=metrics_port,
                    pool_port=state.pool_port,
                    tls_dir=self.layout.tls,
                ),
                self.layout.controller_log,
                cwd=self.layout.root,
            )
            state = replace(state, controller=Product(process, metrics_port), controller_error=None)
            state.save(self.layout.state)
        if (webhook or register) and state.webhook is not None:
            if ca_bundle is None:
                ca_bundle = make_certificates(self.layout.tls)  # keeps the valid pair there
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
                    f"last lines of {process.log_path}:\n{log_tail(process.log_path)}"
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
                    f"last lines of {process.log_path}:\n{log_tail(process.log_path)}"
                )
            if time.monotonic() > deadline:
                raise DevError(
                    f"timed out after {timeout:.0f}s waiting for {what}; "
                    f"last lines of {process.log_path}:\n{log_tail(process.log_path)}"
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

    def exports(self, health: Health) -> str:
        """The shell line that points kubectl (and ``torchgate explain``/``simulate``) here."""
        state = health.state or DevState()
        line = f"export KUBECONFIG={shlex.quote(str(self.layout.kubeconfig))}"
        if state.controller is not None and state.pool_port:
            line += (
                f" TORCHGATE_CONTROLLER=https://127.0.0.1:{state.pool_port}"
                f" TORCHGATE_CONTROLLER_CA={shlex.quote(str(self.layout.tls / CA_CERT))}"
            )
        return line

    def command(self, action: str) -> str:
        """``torchgate dev ACTION`` for this DIR, as a line to paste into a shell."""
        return f"torchgate dev {action} --dir {shlex.quote(str(self.layout.root))}"

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
            version = f"Kubernetes {plane.kubernetes_version or '(version unknown)'}"
            lines.append(f"  control plane  {verdict}  {version}  {plane.server}  {ready}")
            if plane.features:
                lines.append(f"                 {plane.features.describe()}")
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
            if health.webhook_ready and not health.webhook_registered:
                ready += ", NOT REGISTERED (the apiserver does not call it)"
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
            if state.pool_port:
                lines.append(
                    f"                 pool service https://127.0.0.1:{state.pool_port} "
                    "(forecasts, torchgate explain/simulate)"
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


def settings_conflicts(
    running_version: str | None, running_features: ClusterFeatures, options: UpOptions
) -> list[str]:
    """How ``options`` differ from a running control plane, in words; empty when they agree.

    A running cluster is only completed with the version and features it runs with: both are
    fixed when its processes start. Only what ``options`` ask for explicitly counts (no version
    asked for, or no features, agrees with any).
    """
    conflicts = []
    asked = options.kubernetes_version
    if asked is not None and running_version is not None and asked != running_version:
        conflicts.append(f"Kubernetes {running_version}, not {asked}")
    if options.features and options.features != running_features:
        conflicts.append(f"{running_features.describe()}, not {options.features.describe()}")
    return conflicts


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


def report_to_stderr(message: str) -> None:
    """Print a ``torchgate dev:`` line on stderr (the default ``report`` of :class:`DevCluster`)."""
    print(f"{_PREFIX}{message}", file=sys.stderr, flush=True)
