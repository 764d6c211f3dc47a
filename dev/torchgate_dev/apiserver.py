"""HTTP to the dev cluster: the apiserver's JSON API, and the webhook's and controller's probes.

Why not kubectl: every ``kubectl apply`` on a fresh cluster spends 1.5-2 s on discovery and
OpenAPI downloads, which was a quarter of ``up``. Every call here is bounded by a short timeout;
a probe answers a boolean and never raises.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from torchgate.kube import blocking
from torchgate.kube.errors import ApiError
from torchgate_dev import devcluster
from torchgate_dev.controlplane.cluster import ControlPlane
from torchgate_dev.state import DevError

_POLL_SECONDS: Final = 0.1

ApiRequest = Callable[[str, str, Mapping[str, Any] | None], tuple[int, dict[str, Any]]]
"""``(method, path, body) -> (HTTP status, decoded body)`` against the apiserver."""


def _get_ok(url: str, *, context: ssl.SSLContext | None = None) -> bool:
    return blocking.probe(url, tls=context) == 200


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
        self.client = blocking.BlockingClient(self.server, token=self.token, tls=self.context)

    def __call__(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = "application/json",
    ) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, decoded body)``, a success read as 200; OSError when unreachable."""
        try:
            answer = self.client.request(method, path, body=body, content_type=content_type)
        except ApiError as error:
            if error.status == 0:
                raise OSError(error.message) from None
            return error.status, error.body
        return 200, answer if isinstance(answer, dict) else {}

    def ready(self) -> bool:
        """Whether the apiserver answers ``/readyz`` with 200."""
        return self.client.probe("/readyz") == 200

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
