"""The controller's memory per pod: what its pod cache holds, before and after a change.

The controller watches every pod of the cluster. This benchmark feeds the real pod informer
(``torchgate.kube.informer.Informer`` over ``PODS``, indexed by job as the manager indexes it) N
pods as torchgate builds them (``controller.job.pods.build_pod`` of the webhook benchmark's
16-replica ResNet-50 job, defaulted by the webhook under the sample PlacementPolicy: env, args,
volumes, ``/dev/shm``, node selector, tolerations), each with what the apiserver and the kubelet
add (uid, resourceVersion, managedFields, the service-account token volume, defaults, a Running
status with its conditions and container status). The pods reach the informer through its own
decode path: a list answer (one JSON body, decoded with orjson as ``kube.client`` decodes it)
or a stream of watch ``ADDED`` events (one JSON line each).

Each measurement runs in a fresh interpreter (``--child``), so one source tree's figures never
share a heap with another's; ``--before DIR`` measures the torchgate of another source tree
(e.g. ``git archive`` of main) in the same run, interleaved with this tree's, with the same pods
and the same benchmark code. Per size and path it reports:

- ``traced_bytes_per_pod``: bytes tracemalloc counts as still allocated once the informer holds
  the pods (the list or the stream and the decoded objects freed), divided by N: what the cache
  keeps;
- ``rss_delta_mib_per_1000``: the process's resident set (``/proc/self/statm``) after minus
  before, per 1,000 pods, in a run without tracemalloc: what the controller's memory grows by,
  allocator overhead included.

Usage::

    .venv/bin/python benchmarks/controller_memory.py --before /tmp/base --out r.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parent.parent
REPLICAS_PER_JOB: Final = 16
PAGE: Final = os.sysconf("SC_PAGE_SIZE")


# ------------------------------------------------------------------ the pods


def _job() -> tuple[dict[str, Any], Any]:
    """The webhook benchmark's job, defaulted as the webhook defaults it, and its parsed spec."""
    import yaml

    from benchmarks.webhookbench.workload import build_job
    from torchgate.pytorchjob.policy import parse_policy
    from torchgate.webhook.defaulting import default_job

    policy_file = REPO / "manifests" / "samples" / "placementpolicy.yaml"
    policy, errors = parse_policy(yaml.safe_load(policy_file.read_text()))
    assert policy is not None, errors
    raw = copy.deepcopy(default_job(build_job(), policy).object)
    raw["metadata"].pop("managedFields", None)
    annotations = raw["metadata"].get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return raw, policy


def _served(pod: dict[str, Any], number: int, node: str) -> dict[str, Any]:
    """``pod`` as the apiserver returns it once the scheduler bound it and its kubelet ran it."""
    pod = copy.deepcopy(pod)
    metadata = pod["metadata"]
    metadata.update(
        uid=f"9b2f{number:08x}-5c1e-4c7a-9d1f-3e8a6b{number:06x}",
        resourceVersion=str(100_000 + number),
        creationTimestamp="2026-11-26T12:00:00Z",
    )
    metadata["managedFields"] = [
        {
            "manager": "torchgate",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-11-26T12:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:annotations": {k: {} for k in metadata.get("annotations") or {}},
                    "f:labels": {f"f:{k}": {} for k in metadata.get("labels") or {}},
                    "f:ownerReferences": {".": {}},
                },
                "f:spec": {
                    "f:containers": {'k:{"name":"pytorch"}': {"f:env": {}, "f:args": {}}},
                    "f:volumes": {".": {}},
                },
            },
        },
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-11-26T12:00:05Z",
            "fieldsType": "FieldsV1",
            "subresource": "status",
            "fieldsV1": {
                "f:status": {
                    "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}}},
                    "f:containerStatuses": {},
                    "f:phase": {},
                    "f:podIP": {},
                    "f:startTime": {},
                }
            },
        },
    ]
    spec = pod["spec"]
    spec.update(nodeName=node)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccount", "default")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 1000)
    spec.setdefault("tolerations", []).extend(
        {
            "key": f"node.kubernetes.io/{what}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
        for what in ("not-ready", "unreachable")
    )
    token = f"kube-api-access-{number % 100_000:05d}"
    spec.setdefault("volumes", []).append(
        {
            "name": token,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {
                                        "apiVersion": "v1",
                                        "fieldPath": "metadata.namespace",
                                    },
                                }
                            ]
                        }
                    },
                ],
            },
        }
    )
    statuses = []
    for container in spec["containers"]:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("volumeMounts", []).append(
            {
                "name": token,
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        )
        statuses.append(
            {
                "name": container["name"],
                "state": {"running": {"startedAt": "2026-11-26T12:00:04Z"}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": container.get("image", ""),
                "imageID": "registry.example.com/vision/resnet50@sha256:" + "4f" * 32,
                "containerID": f"containerd://{number:064x}",
                "started": True,
                "volumeMounts": [
                    {"name": m["name"], "mountPath": m["mountPath"]}
                    for m in container["volumeMounts"]
                ],
            }
        )
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": at}
        for kind, at in (
            ("PodReadyToStartContainers", "2026-11-26T12:00:03Z"),
            ("Initialized", "2026-11-26T12:00:01Z"),
            ("Ready", "2026-11-26T12:00:05Z"),
            ("ContainersReady", "2026-11-26T12:00:05Z"),
            ("PodScheduled", "2026-11-26T12:00:00Z"),
        )
    ]
    host = f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"
    pod["status"] = {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": "192.168.0.10",
        "hostIPs": [{"ip": "192.168.0.10"}],
        "podIP": host,
        "podIPs": [{"ip": host}],
        "startTime": "2026-11-26T12:00:01Z",
        "containerStatuses": statuses,
        "qosClass": "Burstable",
    }
    return pod


def pods(count: int) -> list[dict[str, Any]]:
    """``count`` pods of 16-replica jobs, as the apiserver lists them."""
    from torchgate.controller.job.pods import build_pod
    from torchgate.pytorchjob.spec import parse_job

    template, policy = _job()
    out: list[dict[str, Any]] = []
    job_number = 0
    while len(out) < count:
        raw = copy.deepcopy(template)
        raw["metadata"].update(
            name=f"resnet50-{job_number:05d}",
            uid=f"6d0c{job_number:08x}-2a7e-4b1f-8c3d-5e9f1a{job_number:06x}",
            creationTimestamp="2026-11-26T11:59:59Z",
            resourceVersion=str(job_number + 1),
        )
        spec, errors = parse_job(raw)
        assert spec is not None, errors
        for replica in spec.replica_specs:
            for index in range(replica.replicas):
                node = f"h100-{len(out) // 8:05d}"
                built = build_pod(
                    raw,
                    spec,
                    replica.replica_type,
                    index,
                    node=node,
                    attempt=1,
                    gpus=policy.gpu_resource,
                )
                out.append(_served(built, len(out), node))
        job_number += 1
    return out[:count]


# ------------------------------------------------------------------ one measurement (a child)


def prepare(count: int, file: Path) -> None:
    """Write ``count`` served pods to ``file``, one JSON document a line."""
    import orjson

    with file.open("wb") as out:
        for pod in pods(count):
            out.write(orjson.dumps(pod) + b"\n")


class _ServedApi:
    """The apiserver, serving the pods in ``file`` (one JSON document a line).

    ``list``: the pods as a PodList, in pages when the informer asks for them (``limit`` and
    ``continue``), else in one body; ``watch``: an empty list, then one ``ADDED`` event a pod.
    Every body or line is decoded with orjson, as ``kube.client`` decodes the apiserver's.
    """

    def __init__(self, file: Path, path: str) -> None:
        self.file = file
        self.path = path

    async def request(
        self, method: str, path: str, *, query: Mapping[str, str] | None = None, **_: Any
    ) -> Any:
        import orjson

        query = query or {}
        if self.path != "list":
            return {"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []}
        first = int(query.get("continue") or 0)
        limit = int(query["limit"]) if "limit" in query else None
        page: list[bytes] = []
        with self.file.open("rb") as lines:
            for n, line in enumerate(lines):
                if limit is not None and len(page) > limit:
                    break  # one more than the page: there is more
                if n >= first:
                    page.append(line.rstrip(b"\n"))
        more = limit is not None and len(page) > limit
        page = page[:limit] if limit is not None else page
        metadata = b'{"resourceVersion":"999999999"'
        if more:
            metadata += b',"continue":"%d"' % (first + len(page))
        body = b'{"kind":"PodList","metadata":' + metadata + b'},"items":['
        body += b",".join(page) + b"]}"
        del page
        return orjson.loads(body)

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        import orjson

        if self.path == "watch":
            with self.file.open("rb") as stream:
                for line in stream:
                    yield orjson.loads(b'{"type":"ADDED","object":' + line.rstrip(b"\n") + b"}")
        raise asyncio.CancelledError  # the stream ends: stop the informer


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def child(file: Path, path: str, traced: bool) -> dict[str, Any]:
    """Feed the pods in ``file`` to a pod informer; report what stays held once it has them."""
    from torchgate.controller.job.reconciler import job_key_of_pod
    from torchgate.kube.informer import Informer
    from torchgate.kube.resources import PODS

    informer = Informer(_ServedApi(file, path), PODS)  # type: ignore[arg-type]
    informer.index_by(job_key_of_pod)
    gc.collect()
    if traced:
        tracemalloc.start()
    rss_before = _rss_bytes()

    async def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await informer.run()

    asyncio.run(run())
    gc.collect()
    out: dict[str, Any] = {
        "pods": len(informer.store),
        "rss_delta_bytes": _rss_bytes() - rss_before,
    }
    if traced:
        out["traced_bytes"] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    return out


# ------------------------------------------------------------------ the run


def _python(source: Path, *child_args: str) -> Any:
    """Run this file as a child importing torchgate from ``source``; its last line, decoded."""
    env = {**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{REPO}"}
    command = [sys.executable, __file__, "--child", *child_args]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None


def _sizes_child() -> dict[str, int]:
    import orjson

    from torchgate.kube.informer import Informer
    from torchgate.kube.resources import PODS

    pod = pods(1)[0]
    informer = Informer(None, PODS)  # type: ignore[arg-type]
    informer.remember(copy.deepcopy(pod))
    kept = next(informer.values())
    return {"served_json_bytes": len(orjson.dumps(pod)), "kept_json_bytes": len(orjson.dumps(kept))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="pod counts, comma-separated")
    parser.add_argument("--paths", default="list,watch", help="list and/or watch")
    parser.add_argument("--rounds", type=int, default=1, help="repeats of every measurement")
    parser.add_argument("--before", type=Path, help="another source tree to measure alongside")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "sizes":
        print(json.dumps(_sizes_child()))
        return 0
    if args.child:
        what, count_or_file, path, *rest = args.child.split(":")
        if what == "prepare":
            prepare(int(count_or_file), Path(rest[0]))
        else:
            print(json.dumps(child(Path(count_or_file), path, what == "traced")))
        return 0
    trees = {"after": REPO}
    if args.before is not None:
        trees = {"before": args.before.resolve(), "after": REPO}
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    sizes = {name: _python(source, "sizes") for name, source in trees.items()}
    for name, numbers in sizes.items():
        print(
            f"{name}: one pod is {numbers['served_json_bytes']} B of JSON, "
            f"the cache keeps {numbers['kept_json_bytes']} B of it",
            flush=True,
        )
    work = Path(tempfile.mkdtemp(prefix="controller-memory-"))
    for count in (int(s) for s in args.sizes.split(",")):
        file = work / f"{count}.jsonl"
        _python(REPO, f"prepare:{count}:-:{file}")  # the same pods for every tree and path
        for path in args.paths.split(","):
            for round_ in range(args.rounds):
                for name, source in trees.items():  # interleaved: before and after back to back
                    traced = _python(source, f"traced:{file}:{path}")
                    rss = _python(source, f"rss:{file}:{path}")
                    row = {
                        "tree": name,
                        "pods": count,
                        "path": path,
                        "round": round_,
                        "traced_bytes_per_pod": round(traced["traced_bytes"] / count),
                        "rss_delta_mib_per_1000": round(
                            rss["rss_delta_bytes"] / count * 1000 / 2**20, 2
                        ),
                    }
                    assert traced["pods"] == rss["pods"] == count, (traced, rss)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        file.unlink()
    meta = {
        "python": sys.version.split()[0],
        "trees": {name: str(source) for name, source in trees.items()},
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    print(f"load average {load_before[0]:.1f} before, {meta['load_average_after'][0]:.1f} after")
    if args.out is not None:
        report = {"meta": meta, "sizes": sizes, "rows": rows}
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
