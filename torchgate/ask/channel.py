"""How a command line reaches the controller's pool service, with the user's own credentials.

Why not a port of its own: the pool service runs in the cluster behind the Service
``torchgate-controller`` (its endpoint is the leader), so the command goes where ``kubectl`` goes,
the apiserver, which proxies to the Service (``services/proxy``); the apiserver authenticates the
user and RBAC says who may use the proxy. The pool service then checks the user again
(TokenReview and SubjectAccessReview) because the apiserver strips ``Authorization`` before
proxying: the user's bearer token travels in ``X-Torchgate-Authorization`` instead.

Rules:

1. ``--controller URL`` (or ``$TORCHGATE_CONTROLLER``) talks to the pool service directly (a
   controller outside the cluster, as ``torchgate dev up`` runs it; or a port-forward), trusting
   ``--controller-ca`` (``$TORCHGATE_CONTROLLER_CA``); otherwise the apiserver's proxy to
   ``<namespace>/torchgate-controller`` (``--controller-namespace``, default torchgate-system).
2. Credentials are the kubeconfig's (or the pod's ServiceAccount). A kubeconfig that
   authenticates with a client certificate has no token to pass on: the command says so.
3. Any failure of the pool service is a ``Unanswered`` with one line for a person, an answer
   that is not JSON (a web page where the service was expected) too; commands go on without the
   controller's answer where they can (explain falls back to the job's own status).
4. When the cluster itself cannot be asked (no kubeconfig, no apiserver answering), the
   command's one line says so in those words (:func:`cluster_problem`), never ``HTTP 0``. Through
   the proxy, no answer at all is the apiserver's silence (its proxy answers 503 for a
   controller it cannot reach), so the channel lets that ``ApiError`` through rather than say
   the controller did not answer.
5. A refusal says who refused: the apiserver's RBAC, which names the Service it would not
   proxy to (``details``: kind ``services``, the proxied name), or the pool service, whose 400 or
   422 names the fields it could not use (``details.causes``).
"""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from torchgate.kube.client import ConfigError, KubeClient
from torchgate.kube.errors import (
    ApiError,
    Forbidden,
    Invalid,
    Unauthorized,
    status_causes,
    status_details,
)
from torchgate.kube.resources import SERVICES
from torchgate.pytorchjob.outlook import SERVICE_NAME, SERVICE_PORT_NAME, TOKEN_HEADER

CONTROLLER_ENV: Final = "TORCHGATE_CONTROLLER"
CONTROLLER_CA_ENV: Final = "TORCHGATE_CONTROLLER_CA"
DEFAULT_NAMESPACE: Final = "torchgate-system"
# The Service and port the apiserver's proxy is asked for, as the proxy path and RBAC name them.
PROXIED_SERVICE: Final = f"https:{SERVICE_NAME}:{SERVICE_PORT_NAME}"


class Unanswered(Exception):
    """The pool service could not be asked, or refused; the message is one line for a person."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where the pool service is: a URL (direct) or the Service in ``namespace`` (proxied)."""

    url: str | None = None
    ca_file: Path | None = None
    namespace: str = DEFAULT_NAMESPACE


def target_from(
    url: str | None, ca_file: str | None, namespace: str | None, environ: Mapping[str, str]
) -> Target:
    """The target from flags, then the environment (rule 1)."""
    chosen = url or environ.get(CONTROLLER_ENV) or None
    ca = ca_file or environ.get(CONTROLLER_CA_ENV) or None
    return Target(
        url=chosen,
        ca_file=Path(ca) if ca else None,
        namespace=namespace or DEFAULT_NAMESPACE,
    )


def add_channel_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags every command that asks the controller shares."""
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, then ~/.kube/config")
    parser.add_argument(
        "--controller",
        metavar="URL",
        help="the pool service's URL (default $TORCHGATE_CONTROLLER, else through the "
        "apiserver's proxy to the Service torchgate-controller)",
    )
    parser.add_argument(
        "--controller-ca", metavar="FILE", help="CA of its certificate (with --controller)"
    )
    parser.add_argument(
        "--controller-namespace",
        metavar="NS",
        help="namespace of the Service torchgate-controller (default torchgate-system)",
    )


def cluster_problem(exc: ConfigError | ApiError) -> str:
    """One line for a person on why the cluster could not be asked (rule 4)."""
    if isinstance(exc, ApiError) and exc.status == 0:
        return f"cannot reach the cluster ({exc.method} {exc.path}): {exc.message}"
    return str(exc)


class PoolChannel:
    """Requests to the pool service over the user's cluster client (see the module docstring)."""

    def __init__(self, api: KubeClient, target: Target) -> None:
        self.api = api
        self.target = target
        self._direct: KubeClient | None = None

    async def get(self, path: str) -> Any:
        """GET ``path`` of the pool service; ``Unanswered`` on any failure."""
        return await self._call("GET", path, None)

    async def post(self, path: str, body: Any) -> Any:
        """POST ``body`` to ``path`` of the pool service; ``Unanswered`` on any failure."""
        return await self._call("POST", path, body)

    async def _call(self, method: str, path: str, body: Any) -> Any:
        try:
            if self.target.url is not None:
                return await self._client().request(method, path, body=body)
            credentials: dict[str, str] = {}
            if self.api.authorize is not None:
                await self.api.authorize(credentials)
            token = next(
                (value for key, value in credentials.items() if key.lower() == "authorization"),
                None,
            )
            if not token:
                raise Unanswered(
                    "the kubeconfig has no bearer token to show the controller (client "
                    "certificates cannot pass the apiserver's proxy); use a token, or "
                    "--controller with a port-forward"
                )
            # ":" stays as is: RBAC's resourceNames and the proxy read the name unescaped.
            proxied = f"{SERVICES.path(self.target.namespace)}/{PROXIED_SERVICE}/proxy{path}"
            return await self.api.request(method, proxied, body=body, headers={TOKEN_HEADER: token})
        except (Unauthorized, Forbidden) as exc:
            raise Unanswered(f"{self._refuser(exc)} refused: {exc.message}") from None
        except Invalid as exc:  # the pool service's 400 or 422, with the fields it names
            found = "; ".join(
                f"{cause['field']}: {cause['message']}" if cause["field"] else cause["message"]
                for cause in status_causes(exc.body)
            )
            raise Unanswered(
                f"the controller refused the request: {exc.message}"
                + (f" ({found})" if found else "")
            ) from None
        except ApiError as exc:
            if exc.status == 0 and self.target.url is None:
                raise  # the apiserver itself did not answer: the cluster's problem (rule 4)
            where = self.target.url or f"{self.target.namespace}/{SERVICE_NAME}"
            if 200 <= exc.status < 300:  # something else answered: a web page, not the service
                raise Unanswered(f"the pool service's URL ({where}) gave {exc.message}") from None
            detail = exc.message if exc.status else f"unreachable ({exc.message})"
            raise Unanswered(
                f"the controller's pool service ({where}) did not answer: {detail}"
            ) from None

    def _refuser(self, exc: ApiError) -> str:
        """Who refused (rule 5): the apiserver's RBAC names the Service it would not proxy to."""
        if self.target.url is None and status_details(exc.body) == ("services", PROXIED_SERVICE):
            return "the apiserver (its proxy to the controller)"
        return "the controller"

    def _client(self) -> KubeClient:
        if self._direct is None:
            assert self.target.url is not None
            context = _trusting(self.target.ca_file)
            self._direct = KubeClient.for_server(self.target.url, tls=context, timeout=10.0)
            self._direct.authorize = self.api.authorize
        return self._direct

    async def close(self) -> None:
        """Close the direct connection (the cluster client is the caller's)."""
        if self._direct is not None:
            await self._direct.close()


def _trusting(ca_file: Path | None) -> ssl.SSLContext:
    """A client context trusting ``ca_file``, else the system's CAs.

    A file that cannot be read or holds no PEM certificate is an ``Unanswered`` naming the flag
    and the file (rule 3), not a traceback.
    """
    if ca_file is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except ssl.SSLError:
        problem = "no PEM certificate in it"
    except OSError as exc:
        problem = f"cannot read: {exc.strerror}"
    raise Unanswered(f"--controller-ca {ca_file}: {problem}")
