"""What API access torchgate's code needs (read from the code) and what the manifests grant.

Why derive instead of listing: a hand-kept table of calls goes stale the day someone adds a call.
Here the call sites are found in the source (``ast``), so a new call either maps to a permission
automatically or stops the test with its file, function and line:

- every component talks through ``KubeApi.request(METHOD, RESOURCE.path(...))`` and ``.watch``
  (``torchgate/kube``): the HTTP method gives the verb (GET on a name = get, on a collection =
  list, POST = create, PUT = update, PATCH = patch, DELETE = delete), the ``Resource`` constant of
  ``torchgate/kube/resources.py`` the group and resource, a literal first ``path`` argument the
  namespace, a third ``path`` argument the subresource. A resource passed in as a
  parameter (``_create(PODS, ...)``) is resolved at the function's call sites; every
  ``Informer(api, RESOURCE, ...)`` needs list and watch (the import contracts keep any other
  client stack out of the product). ``RESOURCE.discovery_path()`` is API discovery, which the
  default ``system:discovery`` ClusterRole lets every authenticated user read: no Role needed.

Where a call goes (namespace, object name) is not in the code but in the flags the manifests pass
(``--secret``, ``--webhook-config``, ``--leader-election-id``), so those are parsed with the
commands' own argument parsers from the rendered Deployments and Jobs. Which identity runs which
command comes from them too (``args[0]`` and ``serviceAccountName``). An action of a command that
runs in a pod of its own (``torchgate controller stop``, the chart's pre-delete hook Job) is a
component of its own: the calls of its module (:data:`ACTION_MODULES`) are its, not the command's.

The grants side expands every (Cluster)Role bound to a ServiceAccount into one ``Grant`` per
(group, resource, verb). ``tests/unit/test_rbac.py`` compares the two statically;
``tests/e2e/test_rbac.py`` checks the grants against an apiserver audit log.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("controller", "webhook", "certs")

ANY_NAMESPACE = "*"
"""A namespaced call into whichever namespace a user's job is in: only a ClusterRole covers it."""

# Verbs RBAC can limit by resourceNames (create, list, watch and deletecollection it cannot).
# Where the controller patches its own pod (the leader label); it patches a job's pods elsewhere.
OWN_POD_MODULE = "torchgate/controller/poolservice.py:"
NAMED_VERBS = frozenset({"get", "update", "patch", "delete"})

# Granted on purpose although no code calls it; see manifests/base/rbac-controller.yaml.
ADMISSION_ONLY: Mapping[tuple[str, str, str, str], str] = {
    ("controller", "kubeflow.org", "pytorchjobs/finalizers", "update"): (
        "OwnerReferencesPermissionEnforcement admission checks it when the controller creates "
        "pods and Services whose ownerReference sets blockOwnerDeletion"
    ),
    ("webhook", "torchgate.io", "forecasts", "create"): (
        "the controller's pool service asks a SubjectAccessReview whether the caller may have a "
        "forecast (a virtual resource: no API call is made with it)"
    ),
}

# Modules that implement an action of a command, run in a pod of its own: their calls are the
# action's (a component named "<command> <action>"), granted to that pod's identity.
ACTION_MODULES: Mapping[str, str] = {"controller/stop.py": "controller stop"}

# Components only the Helm chart runs (no kustomize rendering deploys them).
CHART_ONLY_COMPONENTS: Mapping[str, str] = {
    "controller stop": "the chart's pre-delete hook Job (the kustomize uninstall scales by hand)"
}

# Modules of the access layer that make API calls on behalf of the packages importing them
# (the pool service's TokenReview and SubjectAccessReview): their calls count for those packages.
DELEGATES: Mapping[str, str] = {"torchgate.kube.access": "kube/access.py"}

# Bindings to users rather than to torchgate's ServiceAccounts, on purpose (the model leaves them
# out; tests/unit/test_rbac.py checks what they grant).
USER_BINDINGS: Mapping[tuple[str, str], str] = {
    ("RoleBinding", "torchgate-controller-proxy"): (
        "every authenticated user may reach the controller's pool service through the "
        "apiserver's Service proxy; the pool service checks each request itself"
    ),
}

_HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


class UnmappedCall(AssertionError):
    """A call site whose permission cannot be derived; the message says where and what to do."""


@dataclass(frozen=True, order=True)
class Need:
    """One permission a component's code needs.

    ``namespace``: None for a cluster-scoped object or an all-namespaces list/watch,
    :data:`ANY_NAMESPACE` for a user's namespace, else that namespace. ``name``: the object's
    name when the code always touches the same one.
    """

    component: str
    group: str
    resource: str
    verb: str
    namespace: str | None = None
    name: str | None = None
    where: str = field(default="", compare=False)

    def __str__(self) -> str:
        scope = "cluster-wide" if self.namespace is None else f"namespace {self.namespace}"
        named = f" {self.name!r}" if self.name else ""
        return (
            f"{self.component}: {self.verb} {self.group or 'core'}/{self.resource}{named} ({scope})"
        )


@dataclass(frozen=True, order=True)
class Grant:
    """One (group, resource, verb) of one rule of a role bound to a ServiceAccount.

    ``namespace`` None means cluster-wide (ClusterRoleBinding), else the RoleBinding's namespace.
    """

    account: str
    group: str
    resource: str
    verb: str
    namespace: str | None
    names: tuple[str, ...]
    role: str = field(compare=False)

    def __str__(self) -> str:
        scope = "cluster-wide" if self.namespace is None else f"namespace {self.namespace}"
        named = f" {list(self.names)}" if self.names else ""
        return (
            f"{self.account}: {self.verb} {self.group or 'core'}/{self.resource}{named} "
            f"({scope}, {self.role})"
        )


# ------------------------------------------------------------------------------------ code scan


@dataclass(frozen=True)
class _Site:
    """A call site: ``file:function:line`` and the node."""

    path: Path
    function: str
    node: ast.Call
    defining: ast.AST  # the enclosing function (or module)

    @property
    def where(self) -> str:
        relative = self.path.relative_to(REPO_ROOT)
        return f"{relative}:{self.function}:{self.node.lineno}"


def _walk_with_function(tree: ast.Module, path: Path) -> Iterator[_Site]:
    def visit(node: ast.AST, stack: list[str], defining: ast.AST) -> Iterator[_Site]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                inner = child if not isinstance(child, ast.ClassDef) else defining
                yield from visit(child, [*stack, child.name], inner)
                continue
            if isinstance(child, ast.Call):
                yield _Site(path, ".".join(stack) or "<module>", child, defining)
            yield from visit(child, stack, defining)

    yield from visit(tree, [], tree)


def _source_files(package: str) -> list[Path]:
    return sorted((REPO_ROOT / "torchgate" / package).rglob("*.py"))


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _constant_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _argument(call: ast.Call, index: int, keyword: str) -> ast.AST | None:
    if index < len(call.args):
        return call.args[index]
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    return None


def _receiver(call: ast.Call) -> str:
    return ast.unparse(call.func.value) if isinstance(call.func, ast.Attribute) else ""


@dataclass(frozen=True)
class _PathRef:
    """A ``RESOURCE.path(namespace, name, sub)`` expression, resolved or not."""

    resource: str | None  # the Resource constant's name, None when not a constant
    receiver: str  # the text before ``.path``
    has_name: bool
    sub: str
    namespace: str | None = None  # a literal namespace argument


def _path_ref(expression: ast.AST, defining: ast.AST) -> _PathRef | None:
    """Resolve a path argument; a plain name is looked up among its function's assignments."""
    if isinstance(expression, ast.Name):
        for node in ast.walk(defining):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == expression.id
            ):
                return _path_ref(node.value, defining)
        return None
    if not (
        isinstance(expression, ast.Call)
        and isinstance(expression.func, ast.Attribute)
        and expression.func.attr == "path"
    ):
        return None
    name_arg = _argument(expression, 1, "name")
    has_name = name_arg is not None and not (
        isinstance(name_arg, ast.Constant) and name_arg.value is None
    )
    sub = _constant_str(_argument(expression, 2, "sub")) or ""
    target = expression.func.value
    return _PathRef(
        resource=target.id if isinstance(target, ast.Name) and target.id.isupper() else None,
        receiver=ast.unparse(target),
        has_name=has_name,
        sub=sub,
        namespace=_constant_str(_argument(expression, 0, "namespace")),
    )


def _parameter_index(defining: ast.AST, name: str) -> int | None:
    """Position of parameter ``name`` among the call arguments (``self`` not counted)."""
    if not isinstance(defining, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    names = [argument.arg for argument in defining.args.args]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return names.index(name) if name in names else None


def _resource_constants() -> Mapping[str, Any]:
    from torchgate.kube import resources

    return {
        name: value
        for name, value in vars(resources).items()
        if name.isupper() and isinstance(value, resources.Resource)
    }


@dataclass
class CodeScan:
    """What the code does: abstract calls before namespaces and names are filled in."""

    # (component, group, resource, verb, namespace-hint, where); hint: "code:<ns>", "fixed:<key>"
    calls: list[tuple[str, str, str, str, str, str]] = field(default_factory=list)


def _verb_for_http(method: str, *, has_name: bool) -> str:
    if method == "GET":
        return "get" if has_name else "list"
    if method == "DELETE":
        return "delete" if has_name else "deletecollection"
    if method == "WATCH":
        return "watch"
    if method in _HTTP_VERBS:
        return _HTTP_VERBS[method]
    raise UnmappedCall(f"unknown HTTP method {method!r}")


def _scan_raw(component: str, sites: Sequence[_Site], scan: CodeScan) -> None:
    """``api.request``/``api.watch`` and ``Informer(...)`` sites (the controller's port)."""
    constants = _resource_constants()

    def need(
        resource_name: str, verb: str, sub: str, site: _Site, namespace: str | None = None
    ) -> None:
        resource = constants[resource_name]
        plural = resource.plural + (f"/{sub}" if sub else "")
        hint = f"fixed:{resource_name}" if resource.namespaced else "cluster"
        if resource.namespaced and namespace is not None:
            hint = f"code:{namespace}"
        scan.calls.append((component, resource.group, plural, verb, hint, site.where))

    for site in sites:
        call = site.node
        func = call.func
        if isinstance(func, ast.Name) and func.id == "Informer":
            target = _argument(call, 1, "resource")
            if not (isinstance(target, ast.Name) and target.id in constants):
                raise UnmappedCall(f"{site.where}: Informer of a non-constant resource")
            resource = constants[target.id]
            for verb in ("list", "watch"):
                # An informer lists all namespaces unless given one: cluster-wide.
                scan.calls.append(
                    (component, resource.group, resource.plural, verb, "cluster", site.where)
                )
            continue
        if not isinstance(func, ast.Attribute) or func.attr not in ("request", "watch"):
            continue
        if not _receiver(call).split(".")[-1].endswith("api"):
            continue  # e.g. self.admitter.request(...): not an API call
        method = "WATCH" if func.attr == "watch" else _constant_str(_argument(call, 0, "method"))
        path_node = _argument(call, 0 if func.attr == "watch" else 1, "path")
        if method is None or path_node is None:
            raise UnmappedCall(f"{site.where}: API call without a literal method or a path")
        if _is_discovery(path_node):
            continue  # API discovery: non-resource URLs every authenticated user may GET
        ref = _path_ref(path_node, site.defining)
        if ref is None and site.function.startswith("Informer."):
            continue  # the informer's own list/watch: accounted for at Informer(...) sites
        if ref is None:
            raise UnmappedCall(
                f"{site.where}: {method} on a path this scan cannot follow; build it with "
                "RESOURCE.path(...) from torchgate/kube/resources.py in the call, or extend "
                "tests/rbacmodel.py"
            )
        verb = _verb_for_http(method, has_name=ref.has_name)
        if ref.resource is not None:
            if ref.resource not in constants:
                raise UnmappedCall(f"{site.where}: {ref.resource} is not a Resource in kube.py")
            need(ref.resource, verb, ref.sub, site, ref.namespace)
            continue
        # A resource handed in as a parameter: resolve it where the function is called.
        index = _parameter_index(site.defining, ref.receiver)
        function = site.function.rsplit(".", 1)[-1]
        callers = [
            other
            for other in sites
            if isinstance(other.node.func, ast.Attribute | ast.Name)
            and (getattr(other.node.func, "attr", None) or getattr(other.node.func, "id", None))
            == function
            and other.node is not call
        ]
        if index is None or not callers:
            raise UnmappedCall(f"{site.where}: cannot tell which resource {ref.receiver!r} is")
        for caller in callers:
            argument = _argument(caller.node, index, ref.receiver)
            if not (isinstance(argument, ast.Name) and argument.id in constants):
                raise UnmappedCall(f"{caller.where}: {function}() with a non-constant resource")
            need(argument.id, verb, ref.sub, caller)


def _delegated_files(package: str) -> list[Path]:
    """The access layer's modules (``DELEGATES``) the package imports; they call for it."""
    found: list[Path] = []
    for module, relative in DELEGATES.items():
        path = REPO_ROOT / "torchgate" / relative
        imported = any(
            f"from {module} import" in source.read_text(encoding="utf-8")
            for source in _source_files(package)
        )
        if imported and path.exists():
            found.append(path)
    return found


def _is_discovery(node: ast.AST) -> bool:
    """``RESOURCE.discovery_path()``: granted by the default ``system:discovery`` ClusterRole."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "discovery_path"
    )


def scan_code(packages: Iterable[str] = PACKAGES) -> CodeScan:
    """Every API call site in the packages, as abstract needs (see :class:`CodeScan`)."""
    scan = CodeScan()
    for package in packages:
        for path in [*_source_files(package), *_delegated_files(package)]:
            tree = _parse(path)
            sites = list(_walk_with_function(tree, path))
            relative = path.relative_to(REPO_ROOT / "torchgate").as_posix()
            _scan_raw(ACTION_MODULES.get(relative, package), sites, scan)
    return scan


# ------------------------------------------------------------------------------ deployed setup


@dataclass(frozen=True)
class Deployed:
    """Which ServiceAccount runs which command, with which arguments, in which namespace."""

    component: str
    account: str
    namespace: str
    args: argparse.Namespace


def _command_parser(component: str) -> argparse.ArgumentParser:
    from torchgate.cli import build_parser

    return build_parser(component)


def deployed_components(objects: Iterable[Mapping[str, Any]]) -> list[Deployed]:
    """From rendered manifests: one entry per container running a torchgate command (or action)."""
    found: list[Deployed] = []
    for obj in objects:
        if obj.get("kind") not in ("Deployment", "Job"):
            continue
        namespace = obj["metadata"]["namespace"]
        pod = obj["spec"]["template"]["spec"]
        account = pod.get("serviceAccountName", "default")
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            args = [str(arg).replace("$(POD_NAMESPACE)", namespace) for arg in container["args"]]
            parsed = _command_parser(args[0]).parse_args(args)
            action = getattr(parsed, "action", None)
            component = f"{args[0]} {action}" if action else args[0]
            found.append(Deployed(component, account, namespace, parsed))
    return found


def _fixed_place(
    deployed: Deployed, hint: str, resource: str, verb: str, *, own_pod: bool = False
) -> tuple[str | None, tuple[str | None, ...]]:
    """(namespace, names) of a call from its hint and the command's flags.

    ``own_pod``: the controller's patch of its own pod (the leader label), not of a job's.
    """
    args = deployed.args
    if hint == "cluster":
        if deployed.component == "certs" and resource.endswith("webhookconfigurations"):
            names: tuple[str | None, ...] = tuple(args.webhook_config or ())
            return None, names if verb in NAMED_VERBS else (None,)
        return None, (None,)
    if hint.startswith("code:"):
        return hint.removeprefix("code:"), (None,)
    key = hint.removeprefix("fixed:")
    if deployed.component == "controller" and key == "LEASES":
        name = args.leader_election_id if verb in NAMED_VERBS else None
        return args.leader_election_namespace, (name,)
    if deployed.component == "certs" and key == "SECRETS":
        return args.secret.namespace, (args.secret.name if verb in NAMED_VERBS else None,)
    if deployed.component == "controller" and key == "DEPLOYMENTS":
        return args.leader_election_namespace, (args.deployment,)  # its own, read as it stops
    if deployed.component == "controller stop" and key == "DEPLOYMENTS":
        return args.stop_namespace, (args.stop_deployment,)  # the one it scales to zero
    if deployed.component == "controller stop" and key == "PODS":
        return args.stop_namespace, (None,)  # that Deployment's pods
    if deployed.component == "controller" and key == "PODS" and verb == "patch" and own_pod:
        return args.leader_election_namespace, (None,)  # its own pod: the leader label
    return ANY_NAMESPACE, (None,)


def needs(objects: Sequence[Mapping[str, Any]], scan: CodeScan | None = None) -> list[Need]:
    """The permissions the deployed components need, per component (not yet per account)."""
    scan = scan or scan_code()
    result: set[Need] = set()
    for deployed in deployed_components(objects):
        for component, group, resource, verb, hint, where in scan.calls:
            if component != deployed.component:
                continue
            leases = component == "controller" and resource.split("/")[0] == "leases"
            if leases and not deployed.args.leader_elect:
                continue
            own_pod = (
                component == "controller"
                and (resource, verb) == ("pods", "patch")
                and where.startswith(OWN_POD_MODULE)
            )
            if own_pod and not deployed.args.pod_name:
                continue
            own_deployment = component == "controller" and resource == "deployments"
            if own_deployment and not deployed.args.deployment:
                continue
            namespace, names = _fixed_place(deployed, hint, resource, verb, own_pod=own_pod)
            for name in names:
                result.add(Need(component, group, resource, verb, namespace, name, where))
    return sorted(result)


def accounts(objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Component -> the ServiceAccount it runs as (one per component, or the test fails)."""
    mapping: dict[str, set[str]] = {}
    for deployed in deployed_components(objects):
        mapping.setdefault(deployed.component, set()).add(deployed.account)
    for component, found in mapping.items():
        if len(found) != 1:
            raise AssertionError(f"{component} runs as several ServiceAccounts: {sorted(found)}")
    return {component: found.pop() for component, found in mapping.items()}


# ------------------------------------------------------------------------------------- grants


def grants(objects: Sequence[Mapping[str, Any]]) -> list[Grant]:
    """Every (group, resource, verb) bound to a ServiceAccount by the manifests."""
    roles: dict[tuple[str, str | None, str], Mapping[str, Any]] = {}
    for obj in objects:
        if obj.get("kind") in ("Role", "ClusterRole"):
            namespace = obj["metadata"].get("namespace") if obj["kind"] == "Role" else None
            roles[(obj["kind"], namespace, obj["metadata"]["name"])] = obj
    result: list[Grant] = []
    for obj in objects:
        kind = obj.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        namespace = obj["metadata"].get("namespace") if kind == "RoleBinding" else None
        if (kind, obj["metadata"]["name"]) in USER_BINDINGS:
            continue
        ref = obj["roleRef"]
        role_namespace = namespace if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_namespace, ref["name"]))
        if role is None:
            raise AssertionError(f"{kind} {obj['metadata']['name']} binds a missing {ref}")
        for subject in obj.get("subjects", []):
            if subject.get("kind") != "ServiceAccount":
                raise AssertionError(f"{kind} {obj['metadata']['name']} binds {subject}")
            for rule in role.get("rules", []):
                for group in rule.get("apiGroups", []):
                    for resource in rule.get("resources", []):
                        for verb in rule.get("verbs", []):
                            result.append(
                                Grant(
                                    account=subject["name"],
                                    group=group,
                                    resource=resource,
                                    verb=verb,
                                    namespace=namespace,
                                    names=tuple(rule.get("resourceNames", ())),
                                    role=f"{ref['kind']}/{ref['name']}",
                                )
                            )
    return result


def covers(grant: Grant, need: Need, account: str) -> bool:
    """Whether ``grant`` authorizes ``need`` for the component running as ``account``."""
    if grant.account != account:
        return False
    if (grant.group, grant.resource, grant.verb) != (need.group, need.resource, need.verb):
        return False
    if grant.namespace is not None and grant.namespace != need.namespace:
        return False
    return not grant.names or need.name in grant.names


_WILDCARD = re.compile(r"\*")


def has_wildcard(obj: Mapping[str, Any]) -> bool:
    """Whether a Role/ClusterRole uses ``*`` in apiGroups, resources or verbs."""
    for rule in obj.get("rules", []):
        for key in ("apiGroups", "resources", "verbs"):
            if any(_WILDCARD.search(str(item)) for item in rule.get(key, [])):
                return True
    return False
