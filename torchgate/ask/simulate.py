"""``torchgate simulate -f job.yaml``: would this job start now, where, and whom would it preempt?

For each PyTorchJob in the files: a server-side dry run of its creation (the apiserver runs the
webhook's defaulting and validation, and every other admission step, and stores nothing; the
user needs no more rights than to submit the job), then the controller's forecast for the object
the dry run returned, from the leader's live snapshot (``POST /v1/forecast``). The forecast is
what the next admission cycle would do if the job arrived now; nothing is reserved for it.
Files are read as ``kubectl apply -f`` reads them, as ``torchgate check`` reads them
(``pytorchjob.manifests``): directories, and ``kind: List`` items, each (read back from a
cluster) dry-run as the creation of the same job, its status and server-set metadata dropped.

Output: per job, allowed or the refusal's causes, the admission warnings, then whether it starts
now, on which nodes (pod -> node) and domain, whom it preempts, what quota it borrows, or why it
would wait and its place in the queue. ``-o json``: one object per job (``allowed``,
``startsNow``, ``nodes``, ``preempts``, ``reason``, ...), a list when the files hold several.
Exit codes: 0 every job allowed, 1 any refused, 2 unreadable input (as ``torchgate check`` finds
it: an apiVersion other than kubeflow.org/v1, metadata the apiserver cannot decode, a namespace
other than ``-n``'s, ...; said before any cluster is asked) or an unreachable cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torchgate.ask.channel import (
    PoolChannel,
    Unanswered,
    add_channel_arguments,
    cluster_problem,
    target_from,
)
from torchgate.kube.client import ConfigError, KubeClient, current_namespace
from torchgate.kube.errors import AlreadyExists, ApiError, Invalid, status_causes
from torchgate.kube.manifestfiles import namespace_flag, read_manifest_path
from torchgate.kube.resources import PYTORCHJOBS
from torchgate.pytorchjob.manifests import (
    ManifestError,
    flag_namespace_problem,
    is_pytorchjob,
    namespace_of,
)
from torchgate.pytorchjob.outlook import (
    FORECAST_PATH,
    Forecast,
    MalformedAnswer,
    forecast_from_json,
    forecast_warning,
    gpus_phrase,
    names_a_group,
    place_phrase,
)

FIELD_MANAGER = "torchgate-simulate"


@dataclass(frozen=True, slots=True)
class Simulation:
    """One job's dry run and forecast."""

    job: str
    allowed: bool
    errors: tuple[Mapping[str, str], ...] = ()
    warnings: tuple[str, ...] = ()
    forecast: Forecast | None = None
    unanswered: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``-o json`` form."""
        found = self.forecast
        return {
            "job": self.job,
            "allowed": self.allowed,
            "errors": [dict(error) for error in self.errors],
            "warnings": list(self.warnings),
            "startsNow": found.starts_now if found is not None else None,
            "verdict": found.verdict if found is not None else None,
            "nodes": dict(found.nodes) if found is not None else {},
            "domain": found.domain if found is not None else "",
            "preempts": [gang.job for gang in found.preempts] if found is not None else [],
            "forecast": found.to_json() if found is not None else None,
            "reason": found.reason if found is not None else "",
            "message": found.message if found is not None else "",
            "controller": self.unanswered or "answered",
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``torchgate simulate`` flags."""
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML or JSON with PyTorchJobs, or a directory of them (repeatable; - = stdin)",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        type=namespace_flag,
        help="for jobs that name none (default: context's)",
    )
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    add_channel_arguments(parser)
    parser.epilog = (
        "exit codes: 0 every job allowed, 1 any refused, 2 bad input (unreadable, not YAML, an "
        "apiVersion other than kubeflow.org/v1, metadata the apiserver cannot decode, a namespace "
        "other than -n's, no PyTorchJob) or the cluster cannot be reached"
    )


def run(args: argparse.Namespace) -> int:
    """Simulate every job of the files; print; return the exit code."""
    try:
        jobs = [job for path in args.filename for job in read_jobs(path, args.namespace)]
    except ValueError as exc:
        print(f"torchgate simulate: {exc}", file=sys.stderr)
        return 2
    if not jobs:
        print("torchgate simulate: no PyTorchJob in the input", file=sys.stderr)
        return 2
    try:
        results = asyncio.run(_simulate_all(args, jobs))
    except (ConfigError, ApiError) as exc:
        print(f"torchgate simulate: {cluster_problem(exc)}", file=sys.stderr)
        return 2
    if args.output == "json":
        shown: Any = results[0].to_json() if len(results) == 1 else [r.to_json() for r in results]
        json.dump(shown, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for result in results:
            for line in render(result):
                print(line)
    return 0 if all(result.allowed for result in results) else 1


def read_jobs(path: str, flag_namespace: str | None = None) -> list[dict[str, Any]]:
    """The PyTorchJobs of a file, a directory or stdin (``-``); ``ValueError`` when unusable.

    A job naming another namespace than ``-n``'s is unusable: ``kubectl create -n`` refuses it
    (``manifests`` rule 12).
    """
    jobs = [manifest for manifest in read_manifest_path(path) if is_pytorchjob(manifest.object)]
    for job in jobs:
        problem = flag_namespace_problem(job, flag_namespace or "")
        if problem is not None:
            raise ManifestError(problem)
    return [job.object for job in jobs]


async def _simulate_all(
    args: argparse.Namespace, jobs: Sequence[dict[str, Any]]
) -> list[Simulation]:
    default_namespace = args.namespace or current_namespace(args.kubeconfig)
    api = await KubeClient.connect(args.kubeconfig)
    target = target_from(args.controller, args.controller_ca, args.controller_namespace, os.environ)
    channel = PoolChannel(api, target)
    try:
        return [await simulate(api, channel, job, default_namespace) for job in jobs]
    finally:
        await channel.close()
        await api.close()


async def simulate(
    api: KubeClient, channel: PoolChannel, job: Mapping[str, Any], default_namespace: str
) -> Simulation:
    """Dry-run the job's creation, then ask the controller about the object that would be."""
    metadata = dict(job.get("metadata") or {})
    namespace = namespace_of(job, default_namespace)
    metadata["namespace"] = namespace
    key = f"{namespace}/{metadata.get('name') or metadata.get('generateName') or ''}"
    warnings: list[str] = []
    try:
        created = await api.request(
            "POST",
            PYTORCHJOBS.path(namespace),
            query={"dryRun": "All", "fieldManager": FIELD_MANAGER},
            body={**job, "metadata": metadata},
            warnings=warnings,
        )
    except Invalid as exc:
        errors = tuple(status_causes(exc.body)) or (
            {"field": "", "reason": exc.reason, "message": exc.message},
        )
        return Simulation(key, allowed=False, errors=errors, warnings=tuple(warnings))
    except AlreadyExists:
        return Simulation(
            key,
            allowed=False,
            errors=(
                {
                    "field": "metadata.name",
                    "reason": "AlreadyExists",
                    "message": "a job of this name exists: `torchgate explain` tells about it",
                },
            ),
        )
    try:
        forecast = forecast_from_json(await channel.post(FORECAST_PATH, {"job": created}))
    except (Unanswered, MalformedAnswer) as exc:
        return Simulation(key, allowed=True, warnings=tuple(warnings), unanswered=str(exc))
    own = forecast_warning(forecast)
    return Simulation(
        key,
        allowed=True,
        warnings=tuple(w for w in warnings if w != own),
        forecast=forecast,
    )


def render(result: Simulation) -> list[str]:
    """The lines a person reads for one job."""
    if not result.allowed:
        lines = [f"{result.job}: refused"]
        lines += [f"  error: {e['field']}: {e['message']}" for e in result.errors]
        lines += [f"  warning: {warning}" for warning in result.warnings]
        return lines
    forecast = result.forecast
    if forecast is None:
        lines = [f"{result.job}: allowed; no forecast ({result.unanswered})"]
    else:
        lines = [f"{result.job}: allowed; {forecast_warning(forecast).split(': ', 1)[1]}"]
        if forecast.nodes:
            pairs = [f"{pod} -> {node}" for pod, node in forecast.nodes.items()]
            lines.append(f"  nodes:    {', '.join(pairs)}")
            if names_a_group(forecast.domain):
                lines.append(f"  domain:   {forecast.domain}")
        if forecast.verdict != "Wait":
            victims = ", ".join(gang.phrase() for gang in forecast.preempts) or "nothing"
            lines.append(f"  preempts: {victims}")
        borrowed = forecast.borrows.get("gpus", 0)
        if forecast.verdict == "Start":
            cohort = f"cohort {forecast.cohort}'s idle quota" if forecast.cohort else "idle quota"
            lines.append(
                f"  borrows:  {gpus_phrase(borrowed)} of {cohort}"
                if borrowed
                else "  borrows:  nothing"
            )
        if forecast.verdict == "Wait":
            lines.append(f"  reason:   {forecast.reason}")
            if forecast.place is not None:
                lines.append(f"  queue:    {place_phrase(forecast.place)}")
    if result.warnings:
        lines.append("  admission warnings:")
        lines += [f"    {warning}" for warning in result.warnings]
    return lines
