"""What kwok fakes: GPU nodes, and the lifecycle of the pods bound to them.

kwok stands in for the kubelet: it marks nodes Ready, renews their leases and moves pods through
phases by playing *Stages* (``kwok.x-k8s.io/v1alpha1``). Standalone kwok v0.8.0 ships no built-in
stages, so the controller is started with the whole set: kwok's own node-initialize,
node-heartbeat-with-lease, pod-ready and pod-delete (copied from the module cache by
``build.sh``), plus torchgate's pod stages below. kwok's stock pod-complete is left out on purpose:
it finishes only pods owned by a ``Job``, and tests want to decide when and how a pod ends.

torchgate's stages, driven by pod annotations:

- ``torchgate.io/fake-exit-code: "<n>"`` (0-255) on a Running pod: every container terminates with
  exit code n; phase ``Succeeded`` with reason ``Completed`` when n is 0, else ``Failed`` with
  reason ``Error``.
- ``torchgate.io/fake-run-seconds: "<s>"`` (whole seconds) on a Running pod without a valid exit
  code: the pod ends by itself with exit code 0, s seconds after its ``status.startTime``. The
  deadline is absolute, so later updates to the pod do not restart the clock.

DRA nodes (``dra_node``, ``gpu_resource_slice``, ``dra_device_classes``): a node whose GPUs are
not in its allocatable but published in a ResourceSlice (``resource.k8s.io/v1``) by the driver
``gpu.nvidia.com``, for kube-scheduler to allocate to ResourceClaims; kwok runs the pods like any
other (no kubelet plugin prepares devices). The DeviceClass ``gpu.nvidia.com`` selects those
devices for claims; ``gpu-extended.nvidia.com`` selects the same devices for pods that ask for the
extended resource ``example.com/gpu`` (KEP-5004).

- ``torchgate.io/fake-sandbox-failure-node: "<node>"`` on a pod: while the pod is bound to that
  node, kwok never starts it. It stays ``Pending`` with every container waiting in
  ``ContainerCreating``, as under a kubelet whose CNI plugin fails every pod sandbox. (kwok's stages
  see only the pod, not its node, so the fault is named on the pod; the upstream pod-ready stage
  is given a selector that leaves such pods alone, since kwok picks at random among stages that
  match.)
- ``torchgate.io/fake-image-pull-failure: "true"`` on a pod: the same on every node, with every
  container waiting in ``ImagePullBackOff``, as for an image that exists in no registry.

And one node label:

- ``torchgate.io/fake-heartbeat: "stopped"`` on a fake node: kwok forgets the node (it manages only
  nodes without it, :data:`NODE_LABEL_SELECTOR`, a selector the apiserver applies to kwok's watch,
  so adding the label reads to kwok as the node's deletion). Its Lease and Ready condition go
  stale and its pods are left as they are, deletions unconfirmed: a node whose kubelet is cut off.
  The controller manager marks it ``Unknown`` after its node-monitor grace period. Removing the
  label hands the node back to kwok, which makes it Ready again.

kwok picks one stage at random when several match a pod, so the selectors are written to be
mutually exclusive, and every jq key must evaluate without error on any pod (an error makes kwok
skip all stages for that pod): hence the ``// ""`` fallbacks.

Everything here is pure except :func:`load_upstream_stages` / :func:`render_stages`, which read
the Stage YAMLs. ``python -m torchgate_dev.controlplane.kwok [STAGES_DIR]`` prints the stage set
(only torchgate's stages when no folder is given, e.g. to add them to an in-cluster kwok).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from torchgate.pytorchjob import names

STAGE_API_VERSION: Final = "kwok.x-k8s.io/v1alpha1"
NODE_ANNOTATION: Final = "kwok.x-k8s.io/node"
NODE_ANNOTATION_VALUE: Final = "fake"
NODE_SELECTOR_FLAG: Final = f"{NODE_ANNOTATION}={NODE_ANNOTATION_VALUE}"
LABEL_FAKE_HEARTBEAT: Final = "torchgate.io/fake-heartbeat"
HEARTBEAT_STOPPED: Final = "stopped"
NODE_LABEL_SELECTOR: Final = f"{LABEL_FAKE_HEARTBEAT}!={HEARTBEAT_STOPPED}"
ANNOTATION_FAKE_EXIT_CODE: Final = "torchgate.io/fake-exit-code"
ANNOTATION_FAKE_RUN_SECONDS: Final = "torchgate.io/fake-run-seconds"
ANNOTATION_FAKE_SANDBOX_FAILURE_NODE: Final = "torchgate.io/fake-sandbox-failure-node"
ANNOTATION_FAKE_IMAGE_PULL_FAILURE: Final = "torchgate.io/fake-image-pull-failure"
RDMA_RESOURCE: Final = "rdma/hca"
DRA_DRIVER: Final = "gpu.nvidia.com"
DRA_CLASS: Final = DRA_DRIVER
DRA_EXTENDED_CLASS: Final = "gpu-extended.nvidia.com"
DRA_EXTENDED_RESOURCE: Final = "example.com/gpu"

UPSTREAM_STAGE_FILES: Final = (
    "node-initialize.yaml",
    "node-heartbeat-with-lease.yaml",
    "pod-ready.yaml",
    "pod-delete.yaml",
)
EXIT_STAGE: Final = "torchgate-pod-exit"
RUN_SECONDS_STAGE: Final = "torchgate-pod-run-seconds"
SANDBOX_FAILURE_STAGE: Final = "torchgate-pod-sandbox-failure"
POD_READY_STAGE: Final = "pod-ready"

_EXIT_CODE_PATTERN = "^(0|[1-9][0-9]?|1[0-9]{2}|2[0-4][0-9]|25[0-5])$"
_RUN_SECONDS_PATTERN = "^[0-9]+$"


def _annotation(key: str) -> str:
    """jq: the annotation's value, or "" when the pod has no such annotation."""
    return f'(.metadata.annotations["{key}"] // "")'


_HAS_VALID_EXIT_CODE = f'{_annotation(ANNOTATION_FAKE_EXIT_CODE)} | test("{_EXIT_CODE_PATTERN}")'
_HAS_VALID_RUN_SECONDS = (
    f'{_annotation(ANNOTATION_FAKE_RUN_SECONDS)} | test("{_RUN_SECONDS_PATTERN}")'
)
# Bound to the node its annotation names, or bound anywhere with an image that never pulls
# (false when unbound or without either annotation).
_SANDBOX_FAILS_HERE = (
    f'({_annotation(ANNOTATION_FAKE_SANDBOX_FAILURE_NODE)} == (.spec.nodeName // "-"))'
    f' or ({_annotation(ANNOTATION_FAKE_IMAGE_PULL_FAILURE)} == "true"'
    ' and (.spec.nodeName // "") != "")'
)
# An RFC 3339 time, which kwok turns into "delay until then". startTime is set by pod-ready.
_RUN_DEADLINE = (
    "((.status.startTime // (now | floor | todate)) | fromdate)"
    f' + (.metadata.annotations["{ANNOTATION_FAKE_RUN_SECONDS}"] | tonumber) | todate'
)


def _jq(key: str, operator: str, values: Sequence[str] = ()) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return {"jq": requirement}


def _finish_status_template(exit_code: str) -> str:
    """Go template (kwok's renderer, ``.`` is the pod) ending every container with ``exit_code``.

    ``running: null`` deletes the running state in the strategic merge patch kwok sends, so a
    container never reports two states.
    """
    return f"""\
{{{{ $now := Now }}}}
{{{{ $code := {exit_code} }}}}
{{{{ $succeeded := eq $code "0" }}}}
{{{{ $startedAt := or .status.startTime $now }}}}
conditions:
- type: Ready
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{{{ $now | Quote }}}}
- type: ContainersReady
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{{{ $now | Quote }}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    running: null
    terminated:
      exitCode: {{{{ $code }}}}
      reason: {{{{ if $succeeded }}}}Completed{{{{ else }}}}Error{{{{ end }}}}
      startedAt: {{{{ $startedAt | Quote }}}}
      finishedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
phase: {{{{ if $succeeded }}}}Succeeded{{{{ else }}}}Failed{{{{ end }}}}
"""


def _pod_stage(
    name: str, conditions: Sequence[dict[str, Any]], template: str, delay: dict[str, Any] | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {
            "matchExpressions": [
                _jq(".metadata.deletionTimestamp", "DoesNotExist"),
                _jq(".status.phase", "In", ["Running"]),
                *conditions,
            ]
        },
    }
    if delay is not None:
        spec["delay"] = delay
    spec["steps"] = [{"patch": {"subresource": "status", "root": "status", "template": template}}]
    return {
        "apiVersion": STAGE_API_VERSION,
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


_SANDBOX_FAILURE_TEMPLATE = f"""\
{{{{ $pull := index .metadata.annotations "{ANNOTATION_FAKE_IMAGE_PULL_FAILURE}" }}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    waiting:
{{{{ if $pull }}}}
      reason: ImagePullBackOff
      message: Back-off pulling image {{{{ .image | Quote }}}}
{{{{ else }}}}
      reason: ContainerCreating
{{{{ end }}}}
{{{{ end }}}}
phase: Pending
"""


def _sandbox_failure_stage() -> dict[str, Any]:
    """Pending pods bound where their annotation says: containers wait in ContainerCreating.

    Played once per pod: the patch gives it container statuses, which the selector excludes.
    """
    return {
        "apiVersion": STAGE_API_VERSION,
        "kind": "Stage",
        "metadata": {"name": SANDBOX_FAILURE_STAGE},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    _jq(".metadata.deletionTimestamp", "DoesNotExist"),
                    _jq(".status.phase", "In", ["Pending"]),
                    _jq(_SANDBOX_FAILS_HERE, "In", ["true"]),
                    _jq(".status.containerStatuses", "DoesNotExist"),
                ]
            },
            "steps": [
                {
                    "patch": {
                        "subresource": "status",
                        "root": "status",
                        "template": _SANDBOX_FAILURE_TEMPLATE,
                    }
                }
            ],
        },
    }


def _leave_failing_sandboxes(stage: dict[str, Any]) -> dict[str, Any]:
    """The upstream pod-ready stage, made to skip pods whose sandbox fails on their node.

    Written in the form the stage's other requirements use (``key`` directly, or under ``jq``).
    """
    metadata = stage.get("metadata")
    if not isinstance(metadata, Mapping) or metadata.get("name") != POD_READY_STAGE:
        return stage
    stage = copy.deepcopy(stage)
    selector = stage.setdefault("spec", {}).setdefault("selector", {})
    expressions = selector.setdefault("matchExpressions", [])
    skip = _jq(_SANDBOX_FAILS_HERE, "NotIn", ["true"])
    expressions.append(skip if any("jq" in e for e in expressions) else skip["jq"])
    return stage


def torchgate_stages() -> list[dict[str, Any]]:
    """Torchgate's pod stages: end on a fake exit code or after run seconds; fail sandboxes."""
    exit_code = f'index .metadata.annotations "{ANNOTATION_FAKE_EXIT_CODE}"'
    return [
        _pod_stage(
            EXIT_STAGE,
            [_jq(_HAS_VALID_EXIT_CODE, "In", ["true"])],
            _finish_status_template(exit_code),
            delay=None,
        ),
        _pod_stage(
            RUN_SECONDS_STAGE,
            [
                _jq(_HAS_VALID_EXIT_CODE, "NotIn", ["true"]),
                _jq(_HAS_VALID_RUN_SECONDS, "In", ["true"]),
            ],
            _finish_status_template('"0"'),
            delay={
                "durationMilliseconds": 0,
                "durationFrom": {"jq": {"expression": _RUN_DEADLINE}},
            },
        ),
        _sandbox_failure_stage(),
    ]


def stage_documents(upstream: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The upstream stages followed by torchgate's; names must be unique.

    Raises:
        ValueError: A document is not a Stage, or two stages share a name.
    """
    documents = [_leave_failing_sandboxes(dict(doc)) for doc in upstream] + torchgate_stages()
    seen: set[str] = set()
    for index, document in enumerate(documents):
        if document.get("kind") != "Stage" or document.get("apiVersion") != STAGE_API_VERSION:
            raise ValueError(f"document {index} is not a {STAGE_API_VERSION} Stage")
        metadata = document.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name or name in seen:
            raise ValueError(f"document {index}: stage name {name!r} is empty or repeated")
        seen.add(name)
    return documents


class _StageDumper(yaml.SafeDumper):
    """Writes multi-line strings (the templates) as literal blocks, so the file stays readable."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_StageDumper.add_representer(str, _represent_str)


def dump_stages(documents: Iterable[Mapping[str, Any]]) -> str:
    """Multi-document YAML, the form kwok's ``--config`` reads."""
    return yaml.dump_all(
        [dict(doc) for doc in documents], Dumper=_StageDumper, sort_keys=False, width=1000
    )


def load_upstream_stages(stages_dir: Path) -> list[dict[str, Any]]:
    """Read kwok's upstream Stage YAMLs that ``build.sh`` copied into ``stages_dir``.

    Raises:
        ValueError: A file is missing or is not YAML.
    """
    documents: list[dict[str, Any]] = []
    for file_name in UPSTREAM_STAGE_FILES:
        path = stages_dir / file_name
        try:
            loaded = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except OSError as error:
            raise ValueError(f"cannot read kwok stage {path}: {error.strerror}") from error
        except yaml.YAMLError as error:
            raise ValueError(f"kwok stage {path} is not valid YAML: {error}") from error
        documents.extend(doc for doc in loaded if doc is not None)
    return documents


def render_stages(stages_dir: Path) -> str:
    """The complete stage configuration for the kwok controller, as YAML."""
    return dump_stages(stage_documents(load_upstream_stages(stages_dir)))


def controller_configuration() -> dict[str, Any]:
    """Options of the kwok controller: more stage workers than the default 4 (thousands of pods)."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "podPlayStageParallelism": 16,
            "nodePlayStageParallelism": 8,
            "nodeLeaseParallelism": 8,
            "podsOnNodeSyncParallelism": 2,
        },
    }


def gpu_node(
    name: str,
    *,
    gpus: int = 8,
    rdma: int = 0,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int = 110,
    gpu_resource: str = names.DEFAULT_GPU_RESOURCE,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A Node that kwok manages, with GPUs (and RDMA devices) in capacity and allocatable.

    Unlike kwok's examples it has no ``kwok.x-k8s.io/node=fake:NoSchedule`` taint, so pods
    schedule on it without tolerations; pass ``taints`` to test tolerations on purpose. kwok's
    node-initialize stage keeps the capacity given here.
    """
    if gpus < 0 or rdma < 0 or pods < 0:
        raise ValueError("gpus, rdma and pods must not be negative")
    capacity = {
        "cpu": cpu,
        "memory": memory,
        "pods": str(pods),
        gpu_resource: str(gpus),
        RDMA_RESOURCE: str(rdma),
    }
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                NODE_ANNOTATION: NODE_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {
                "type": "kwok",
                names.HOSTNAME_LABEL: name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }
    if taints:
        node["spec"]["taints"] = [dict(taint) for taint in taints]
    return node


def dra_node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A kwok node whose GPUs are published by DRA (``gpu_resource_slice``), none in allocatable."""
    node = gpu_node(name, gpus=0, labels=labels, taints=taints)
    for section in ("capacity", "allocatable"):
        del node["status"][section][names.DEFAULT_GPU_RESOURCE]
    return node


def gpu_resource_slice(
    node: str, devices: int = 8, *, taints: Mapping[int, Sequence[Mapping[str, str]]] | None = None
) -> dict[str, Any]:
    """The ResourceSlice of ``node``'s GPUs ``gpu-0``..: one pool per node, generation 1.

    ``taints``: device index -> its device taints (``{"key", "effect"}``, KEP-5055).
    """
    entries: list[dict[str, Any]] = []
    for index in range(devices):
        device: dict[str, Any] = {
            "name": f"gpu-{index}",
            "attributes": {"index": {"int": index}},
        }
        if taints and index in taints:
            device["taints"] = [dict(taint) for taint in taints[index]]
        entries.append(device)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRA_DRIVER}"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": entries,
        },
    }


def dra_device_classes() -> list[dict[str, Any]]:
    """The DeviceClasses of the DRA GPUs: for claims, and for ``example.com/gpu`` requests."""
    selectors = [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRA_CLASS},
            "spec": {"selectors": selectors},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRA_EXTENDED_CLASS},
            "spec": {"selectors": selectors, "extendedResourceName": DRA_EXTENDED_RESOURCE},
        },
    ]


def sandbox_failure_annotation(node: str) -> dict[str, str]:
    """The annotation that makes kwok leave a pod stuck in ContainerCreating on ``node``."""
    return {ANNOTATION_FAKE_SANDBOX_FAILURE_NODE: node}


def image_pull_failure_annotation() -> dict[str, str]:
    """The annotation that makes kwok leave a pod waiting for an image that never pulls."""
    return {ANNOTATION_FAKE_IMAGE_PULL_FAILURE: "true"}


def exit_code_annotation(exit_code: int) -> dict[str, str]:
    """The annotation that makes kwok end a Running pod with ``exit_code``."""
    if not 0 <= exit_code <= 255:
        raise ValueError(f"exit code must be within 0..255, got {exit_code}")
    return {ANNOTATION_FAKE_EXIT_CODE: str(exit_code)}


def run_seconds_annotation(seconds: int) -> dict[str, str]:
    """The annotation that makes kwok end a Running pod (exit 0) ``seconds`` after it started."""
    if seconds < 0:
        raise ValueError(f"run seconds must not be negative, got {seconds}")
    return {ANNOTATION_FAKE_RUN_SECONDS: str(seconds)}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the stage set: upstream + torchgate's with a folder argument, else torchgate's."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        text = render_stages(Path(arguments[0])) if arguments else dump_stages(torchgate_stages())
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
