"""``torchgate explain JOB``: why a PyTorchJob waits, or where and since when it runs.

Reads the job, its pods and its Events with the user's own credentials, asks the controller's
pool service for its live outlook (``channel``), and prints ``explanation.render`` (``-o json``:
``Explanation.to_json``). When the controller does not answer, the job's own status says what it
last wrote, and the output says the live view is missing; pods or Events the user may not list
are left out, and the output says which and why (the apiserver's words name the permission).
Exit codes: 0 explained, 1 no such job, 2 a usage error or the cluster cannot be reached or read.

``JOB`` is a name, or ``NAMESPACE/NAME`` as ``top``, ``simulate`` and ``explain`` itself print a
job, so a job can be pasted from their output; ``-n`` that names another namespace, and a name or
namespace no job or namespace can have (``Train``, ``.``, ``-n Team_A``), are usage errors, not
lookups of a job that cannot exist.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from torchgate.ask.channel import (
    PoolChannel,
    Unanswered,
    add_channel_arguments,
    cluster_problem,
    target_from,
)
from torchgate.ask.explanation import Explanation, explain, render
from torchgate.kube.client import ConfigError, KubeClient, current_namespace
from torchgate.kube.errors import ApiError, Forbidden, NotFound
from torchgate.kube.manifestfiles import namespace_flag
from torchgate.kube.resources import EVENTS, PODS, PYTORCHJOBS
from torchgate.pytorchjob import names
from torchgate.pytorchjob.manifests import namespace_name_problem
from torchgate.pytorchjob.outlook import JOBS_PATH, MalformedAnswer, outlook_from_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``torchgate explain`` flags."""
    parser.add_argument(
        "job", metavar="JOB", help="the PyTorchJob's name, or NAMESPACE/NAME as top prints it"
    )
    parser.add_argument(
        "-n", "--namespace", type=namespace_flag, help="its namespace (default: the context's)"
    )
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    add_channel_arguments(parser)
    parser.epilog = (
        "exit codes: 0 explained (from the job's status alone when the controller does not "
        "answer), 1 no such job, 2 a usage error or the cluster cannot be reached"
    )


def run(args: argparse.Namespace) -> int:
    """Explain the job; print it; return the exit code."""
    try:
        written_namespace, name = job_key(args.job, args.namespace)
    except ValueError as exc:
        print(f"torchgate explain: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args, written_namespace, name))
    except (ConfigError, ApiError) as exc:
        print(f"torchgate explain: {cluster_problem(exc)}", file=sys.stderr)
        return 2


def job_key(job: str, namespace: str | None) -> tuple[str | None, str]:
    """(namespace, name) of ``JOB``: a name, or ``NAMESPACE/NAME``; ``ValueError`` otherwise.

    The namespace is ``None`` when neither ``JOB`` nor ``-n`` names one (the context's applies).
    A name no PyTorchJob can have (``names.resource_name_problem``: ``Train``, ``.``) or a
    namespace no namespace can have is a ``ValueError`` too: asked, ``.`` would read the list of
    jobs and explain it as a job.
    """
    parts = job.split("/")
    if len(parts) == 1 and job:
        written, name = namespace, job
    elif len(parts) != 2 or not all(parts):
        raise ValueError(f"JOB is a name or NAMESPACE/NAME, not {job!r}")
    else:
        written, name = parts
        if namespace and namespace != written:
            raise ValueError(f"-n {namespace} contradicts the namespace of {job}")
    problem = names.resource_name_problem(name)
    if problem is None and written:
        problem = namespace_name_problem(written)
    if problem is not None:
        raise ValueError(f"JOB {job}: {problem}")
    return written, name


async def _run(args: argparse.Namespace, written_namespace: str | None, name: str) -> int:
    namespace = written_namespace or current_namespace(args.kubeconfig)
    api = await KubeClient.connect(args.kubeconfig)
    channel = PoolChannel(
        api, target_from(args.controller, args.controller_ca, args.controller_namespace, os.environ)
    )
    try:
        try:
            job = await api.request("GET", PYTORCHJOBS.path(namespace, name))
        except NotFound:
            print(f"torchgate explain: {names.KIND} {namespace}/{name} not found", file=sys.stderr)
            return 1
        explanation = await gather(api, channel, job)
    finally:
        await channel.close()
        await api.close()
    if args.output == "json":
        json.dump(explanation.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for line in render(explanation, datetime.now(UTC)):
            print(line)
    return 0


async def gather(api: KubeClient, channel: PoolChannel, job: Mapping[str, Any]) -> Explanation:
    """The job's pods, Events and the controller's outlook, explained."""
    metadata = job.get("metadata") or {}
    namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
    selector = ",".join(f"{k}={v}" for k, v in names.job_selector(name).items())
    fields = f"involvedObject.name={name},involvedObject.kind={names.KIND}"

    async def outlook() -> tuple[Any, str | None]:
        try:
            raw = await channel.get(
                f"{JOBS_PATH}/{namespace}/{name}"
            )  # DNS names: nothing to quote
            return outlook_from_json(raw), None
        except Unanswered as exc:
            return None, str(exc)
        except MalformedAnswer as exc:
            return None, f"the controller's answer was malformed: {exc}"

    async def items(path: str, query: dict[str, str]) -> tuple[list[Any], str | None]:
        try:
            found = await api.request("GET", path, query=query)
        except Forbidden as exc:  # explained without them (explanation rule 6)
            return [], exc.message
        return list((found or {}).get("items") or []), None

    (pods, no_pods), (events, no_events), (seen, unanswered) = await asyncio.gather(
        items(PODS.path(namespace), {"labelSelector": selector}),
        items(EVENTS.path(namespace), {"fieldSelector": fields}),
        outlook(),
    )
    unread = {what: why for what, why in (("pods", no_pods), ("events", no_events)) if why}
    return explain(
        job, outlook=seen, pods=pods, events=events, unanswered=unanswered, unread=unread
    )
