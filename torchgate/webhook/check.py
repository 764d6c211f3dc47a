"""``torchgate check``: the webhook's defaulting and validation, offline, on manifest files.

It runs exactly what ``kubectl apply`` would meet (``review.evaluate``: the mutating route's
defaults, then the validating route's rules on the defaulted object), so a CI pipeline or a user
can see a denial before submitting. Documents of other kinds (and another operator's
PyTorchJobs) are skipped. Exit codes: 0 when every job is allowed, 1 when any is denied, 2 when
an input cannot be read or parsed (a message with the file and line, never a traceback), when a
document spells the kind PyTorchJob otherwise, when a PyTorchJob's apiVersion is not one kubectl
can map (missing, ``kubeflow.org/v2``), its metadata not one the apiserver can decode or place,
it has fields its CRD does not declare, a ``generateName`` and no name, or a namespace other
than the one ``-n`` gives (``pytorchjob.manifests`` rules 2, 6, 7, 8, 10 and 12: kubectl or the
apiserver refuses those before the webhook is asked), when ``-n`` names no possible namespace
(rule 9; an empty ``-n`` is none given, as to kubectl), and when the inputs hold no PyTorchJob
at all (an empty file, stdin from a templating step that failed, the wrong file): "0 checked"
would read as a pass.

Inputs are read as ``kubectl apply -f`` reads them (``pytorchjob.manifests``): a directory is its
``.yaml``, ``.yml`` and ``.json`` files, and a ``kind: List`` its items, so ``kubectl get
pytorchjobs -A -o yaml | torchgate check -`` audits the jobs already in a cluster. A job is
judged as a CREATE (check knows no cluster: what ``kubectl apply`` would update there, it cannot
see), so an item of a List, read back from a cluster, is judged as the creation of the same job:
its status and the metadata the apiserver set (uid, resourceVersion, managedFields, ...) are
dropped first, and the verdict is the one submitting it today would get. A document of its own is
judged as written: pasted ``kubectl get`` output is refused as the webhook refuses its creation.
What check does know is the input itself: a job whose namespace and name an earlier admitted
document of the input gave is, to ``kubectl apply``, an update of the job that one created
(``manifests`` rule 11), so it is judged as that UPDATE (``check_documents``): the patch kubectl
sends (``pytorchjob.applying``) applied to the job the earlier document left, then the webhook's
UPDATE routes, which default the templates the patch changed (``defaulting``'s UPDATE rules) and
hold ``managedBy`` immutable.

A manifest's numbers are read as the cluster stores them, which is what its webhooks are sent
(``pytorchjob.yamlinput`` rule 4: ``tolerationSeconds: 1.0`` is ``1``, ``1e3`` is ``1000``), and
the CRD's integers are judged as the apiserver judges the numbers it holds (``crdschema`` rules
4 and 6: ``replicas: 1.5`` is refused with the apiserver's causes).

Before the webhook's validation, a job meets the apiserver's validation against the PyTorchJob
CRD's schema, as on a cluster (the apiserver validates the object the mutating webhook returned,
and asks the validating webhook only when that passed): a value of the wrong type
(``replicas: $NUM_NODES`` left by a templating step) denies the job with the apiserver's causes
(``pytorchjob.crdschema`` rules 3 and 4) and only those (``crd_schema_errors``, which
``review.evaluate`` asks between the two webhooks). Fields the CRD does
not declare are refused earlier still, while the file is read (``manifests`` rule 8, exit 2).

Several ``--policy`` files may hold policies that tie (the same priority on a namespace where
nothing above them matches: ``policyties``): check reports each pair as the webhook warns at
``kubectl apply`` of the second one (``policyWarnings`` in ``-o json``/``yaml``, a ``warning:``
line before the verdicts in text), and judges each job under the policy the tie-break picks, as
the webhook does. A tie is legal: it changes no exit code.

Text output points each error at the line of the manifest it concerns (the YAML node tree is kept
for that) and shows what defaulting changed as a unified diff.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import yaml

from torchgate.kube.manifestfiles import crd_version, namespace_flag, read_manifest_path
from torchgate.pytorchjob import crdschema, names
from torchgate.pytorchjob.applying import merge_patch, three_way_patch
from torchgate.pytorchjob.fieldpath import FieldError, render_warnings
from torchgate.pytorchjob.manifests import (
    Manifest,
    ManifestError,
    applied_key,
    flag_namespace_problem,
    generate_name_problem,
    is_pytorchjob,
    namespace_of,
)
from torchgate.pytorchjob.policy import PlacementPolicy, parse_policy, select_policy
from torchgate.pytorchjob.policyties import tie_warning, ties
from torchgate.pytorchjob.pool import QUOTA_KIND, TeamQuota, parse_team_quota
from torchgate.webhook.policysource import PolicyFileError, read_policy_files
from torchgate.webhook.review import Evaluation, evaluate
from torchgate.webhook.validation.sharing import resolve_team

Parsed = TypeVar("Parsed")


class InputError(Exception):
    """An input that cannot be read or parsed (exit code 2)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``torchgate check`` flags."""
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="YAML or JSON manifests, or directories of them (- = stdin)",
    )
    parser.add_argument(
        "--policy",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help=(
            "PlacementPolicy (and TeamQuota) YAML to check against (repeatable; default: the "
            "built-in policy, no quotas)"
        ),
    )
    parser.add_argument(
        "-n",
        "--namespace",
        type=namespace_flag,
        help=(
            "namespace for jobs that do not name one (selects the policy; default 'default'); "
            "a job naming another is bad input, as kubectl apply -n refuses it"
        ),
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=["text", "yaml", "json"],
        default="text",
        help="text (default): verdicts, errors with their line, the defaults as a diff; yaml or "
        "json: the same as data",
    )
    parser.epilog = (
        "exit codes: 0 every job allowed, 1 any denied, 2 bad input (unreadable, not YAML, a "
        "kind spelled otherwise than PyTorchJob, an apiVersion other than kubeflow.org/v1, "
        "metadata the apiserver cannot decode, a field the PyTorchJob CRD does not declare, "
        "generateName without a name, a namespace other than -n's, no PyTorchJob at all, or a "
        "--policy file without a "
        "policy; a usage error, such as -n naming no possible namespace)"
    )


def run(args: argparse.Namespace) -> int:
    """Check the files; print the report; return 0 (allowed), 1 (denied) or 2 (bad input)."""
    try:
        require_policy_documents(args.policy)
        policies = load_policies(args.policy)
        quotas = load_quotas(args.policy)
        skipped: list[str] = []
        documents = [doc for path in args.files for doc in read_documents(path, skipped)]
        if not documents:
            raise InputError(nothing_to_check(skipped))
        require_names(documents)
        require_flag_namespace(documents, args.namespace)
    except InputError as exc:
        print(f"torchgate check: {exc}", file=sys.stderr)
        return 2
    results = check_documents(documents, policies, default_namespace(args), quotas=quotas)
    tied = policy_warnings(policies)
    report = {"results": [r.as_dict() for r in results], "policyWarnings": tied}
    if args.output == "json":
        json.dump(report, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    elif args.output == "yaml":
        yaml.safe_dump(report, sys.stdout, sort_keys=False, allow_unicode=True)
    else:
        sys.stdout.writelines(f"warning: {warning}\n" for warning in tied)
        print_text(results, sys.stdout)
    return 0 if all(r.evaluation.allowed for r in results) else 1


def policy_warnings(policies: Sequence[PlacementPolicy]) -> list[str]:
    """Each pair of ``policies`` that ties, as the webhook warns of the later one by name."""
    return [
        f'PlacementPolicy "{tie.second.name}" {tie_warning(tie, tie.second.name)}'
        for tie in ties(policies)
    ]


def require_policy_documents(paths: Sequence[Path]) -> None:
    """Each ``--policy`` file holds a PlacementPolicy or a TeamQuota; else it is an input error.

    A file without either (a job passed as the policy, a misspelled kind) would otherwise leave
    the built-in policy in force without a word, and the verdict would not be the one asked for.
    """
    for path in paths:
        try:
            found = read_policy_files([path], kinds=(names.POLICY_KIND, QUOTA_KIND))
        except PolicyFileError as exc:
            raise InputError(str(exc)) from None
        if not found:
            raise InputError(
                f"{path}: no {names.POLICY_KIND} or {QUOTA_KIND} in it (--policy reads those)"
            )


def load_policies(paths: Sequence[Path]) -> list[PlacementPolicy]:
    """Parse ``--policy`` files; any invalid policy is an input error."""
    return _load(paths, names.POLICY_KIND, parse_policy)


def load_quotas(paths: Sequence[Path]) -> list[TeamQuota]:
    """Parse the TeamQuota documents of ``--policy`` files; any invalid one is an input error."""
    return _load(paths, QUOTA_KIND, parse_team_quota)


def _load(
    paths: Sequence[Path],
    kind: str,
    parse: Callable[[object], tuple[Parsed | None, list[FieldError]]],
) -> list[Parsed]:
    try:
        objects = read_policy_files(paths, kinds=(kind,))
    except PolicyFileError as exc:
        raise InputError(str(exc)) from None
    parsed = []
    for raw in objects:
        found, errors = parse(raw)
        if found is None:
            problems = "; ".join(str(e) for e in errors)
            raise InputError(f"invalid {kind} in {[str(p) for p in paths]}: {problems}")
        parsed.append(found)
    return parsed


def read_documents(path: str, skipped: list[str]) -> Iterator[Manifest]:
    """The PyTorchJobs of a file, a directory or stdin (``-``); the others go to ``skipped``."""
    try:
        manifests = read_manifest_path(path)
    except ManifestError as exc:
        raise InputError(str(exc)) from None
    for manifest in manifests:
        obj = manifest.object
        if is_pytorchjob(obj):
            yield manifest
        else:
            skipped.append(f"{manifest.where} {_kind_of(obj)}")


def require_names(documents: Sequence[Manifest]) -> None:
    """Each job has the name ``kubectl apply`` finds it by (``manifests`` rule 10)."""
    for document in documents:
        problem = generate_name_problem(document)
        if problem is not None:
            raise InputError(problem)


def require_flag_namespace(documents: Sequence[Manifest], flag_namespace: str | None) -> None:
    """No job names another namespace than a ``-n`` given (``manifests`` rule 12)."""
    for document in documents:
        problem = flag_namespace_problem(document, flag_namespace or "")
        if problem is not None:
            raise InputError(problem)


def default_namespace(args: argparse.Namespace) -> str:
    """The namespace of jobs that name none: ``-n``'s, else (none, or empty) ``default``.

    kubectl takes the context's namespace then; check knows no context.
    """
    return str(args.namespace or "default")


def _kind_of(obj: object) -> str:
    if not isinstance(obj, dict):
        return "(empty)" if obj is None else "(no kind)"
    kind = obj.get("kind")
    if kind == names.KIND:  # of another group (another operator's kind): say which
        return f"{kind} ({obj.get('apiVersion')})"
    if isinstance(kind, str) and kind:
        return kind
    return "(empty)" if obj is None else "(no kind)"


def nothing_to_check(skipped: Sequence[str]) -> str:
    """Why an input without a PyTorchJob is bad input: what was skipped, the first few named."""
    if not skipped:
        return "no PyTorchJob in the input: it is empty"
    named = ", ".join(skipped[:3]) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
    return (
        f"no PyTorchJob in the input: {len(skipped)} document(s) of other kinds skipped ({named})"
    )


@dataclass(frozen=True, slots=True)
class Applied:
    """What an admitted document left in the cluster: the configuration applied, the job stored."""

    document: Manifest
    stored: Any


@dataclass(frozen=True, slots=True)
class Result:
    """The verdict on one document; ``updates``: the earlier document whose job it updates."""

    document: Manifest
    evaluation: Evaluation
    updates: Manifest | None = None
    unchanged: bool = False

    @property
    def operation(self) -> str:
        """What reaches the webhook: ``CREATE``, ``UPDATE``, or ``NONE`` (kubectl sends nothing)."""
        if self.updates is None:
            return "CREATE"
        return "NONE" if self.unchanged else "UPDATE"

    @property
    def namespace(self) -> str:
        """The job's namespace as written ("" when unset)."""
        return _metadata(self.document.object).get("namespace") or ""

    @property
    def name(self) -> str:
        """The job's name ("" when unset; a generateName alone is bad input)."""
        return str(_metadata(self.document.object).get("name") or "")

    def line_of(self, error: FieldError) -> int | None:
        """The manifest line an error points at (the deepest node of its path that exists)."""
        return _line_of(self.document.node, error.path.segments)

    def as_dict(self) -> dict[str, Any]:
        """The ``-o json``/``-o yaml`` form of this result."""
        return {
            "source": self.document.source,
            "index": self.document.index,
            "item": self.document.item,
            "kind": names.KIND,
            "namespace": self.namespace,
            "name": self.name,
            "operation": self.operation,
            "updates": None if self.updates is None else self.updates.where,
            "allowed": self.evaluation.allowed,
            "errors": [
                {
                    "field": e.field,
                    "type": e.type.value,
                    "message": e.body(),
                    "line": self.line_of(e),
                }
                for e in self.evaluation.errors
            ],
            "warnings": list(render_warnings(self.evaluation.warnings)),
            "patch": self.evaluation.patch,
            "object": self.evaluation.object,
        }


def check_documents(
    documents: Sequence[Manifest],
    policies: Sequence[PlacementPolicy],
    default_namespace: str,
    *,
    quotas: Sequence[TeamQuota] = (),
) -> list[Result]:
    """Judge the documents in order, as ``kubectl apply`` applies them (``manifests`` rule 11).

    A job whose namespace and name an earlier admitted document gave updates the job that one
    left; any other is a creation.
    """
    applied: dict[tuple[str, str], Applied] = {}
    results = []
    for document in documents:
        key = applied_key(document, default_namespace)
        earlier = applied.get(key) if key is not None else None
        result = check_document(
            document, policies, default_namespace, quotas=quotas, earlier=earlier
        )
        if key is not None and result.evaluation.allowed and not result.unchanged:
            applied[key] = Applied(document, result.evaluation.object)
        results.append(result)
    return results


def check_document(
    document: Manifest,
    policies: Sequence[PlacementPolicy],
    default_namespace: str,
    *,
    quotas: Sequence[TeamQuota] = (),
    earlier: Applied | None = None,
) -> Result:
    """Evaluate one document against the policy (and TeamQuota) that apply to its namespace.

    A creation, or, given what an ``earlier`` document of the same job left, the update
    ``kubectl apply`` makes of it: nothing sent when the manifest is the one applied and the
    patch is empty (``applying`` rule 2).
    """
    namespace = namespace_of(document.object, default_namespace)
    policy = select_policy(policies, namespace)
    team = resolve_team(quotas, namespace)
    if earlier is None:
        evaluation = evaluate(document.object, policy, team=team, between=crd_schema_errors)
        return Result(document, evaluation)
    patch = three_way_patch(earlier.document.object, document.object, earlier.stored)
    if not patch and document.object == earlier.document.object:
        nothing_sent = Evaluation(
            allowed=True, errors=(), warnings=(), patch=[], object=earlier.stored
        )
        return Result(document, nothing_sent, updates=earlier.document, unchanged=True)
    updated = merge_patch(earlier.stored, patch)
    evaluation = evaluate(updated, policy, old=earlier.stored, team=team, between=crd_schema_errors)
    return Result(document, evaluation, updates=earlier.document)


def crd_schema_errors(defaulted: Any) -> list[FieldError]:
    """The apiserver's validation of the mutated job against the CRD's schema (types, scale)."""
    crd = crd_version()
    return [
        *crdschema.type_errors(defaulted, crd_version=crd),
        *crdschema.scale_errors(defaulted, crd_version=crd),
    ]


def print_text(results: Sequence[Result], out: TextIO) -> None:
    """A person's report: verdicts, errors with lines, warnings, and the defaults as a diff."""
    for result in results:
        doc = result.document
        where = doc.where
        name = result.name or "(no name)"
        target = f"{result.namespace}/{name}" if result.namespace else name
        verdict = "allowed" if result.evaluation.allowed else "DENIED"
        out.write(f"{where} {names.KIND} {target}: {verdict}{_as_update(result)}\n")
        for error in result.evaluation.errors:
            line = result.line_of(error)
            at = f"{doc.source}:{line}: " if line else ""
            out.write(f"  error: {at}{error}\n")
        for warning in result.evaluation.warnings:
            out.write(f"  warning: {warning.render()}\n")
        if result.updates is not None and not result.unchanged:
            stored = _diff(doc.object, result.evaluation.object)
            if stored:
                out.write(f"  stored (the job {result.updates.where} left, patched):\n")
                out.writelines(f"    {diff_line}\n" for diff_line in stored)
        elif result.evaluation.patch:
            out.write("  defaults applied:\n")
            for diff_line in _diff(doc.object, result.evaluation.object):
                out.write(f"    {diff_line}\n")
    allowed = sum(r.evaluation.allowed for r in results)
    denied = len(results) - allowed
    out.write(f"{len(results)} PyTorchJob(s) checked: {allowed} allowed, {denied} denied\n")


def _as_update(result: Result) -> str:
    if result.updates is None:
        return ""
    if result.unchanged:
        return f" (unchanged: {result.updates.where} applied it already; kubectl sends nothing)"
    return f" (an UPDATE: kubectl apply patches the job as {result.updates.where} left it)"


def _diff(before: Any, after: Any) -> list[str]:
    def dump(obj: Any) -> list[str]:
        return yaml.safe_dump(obj, sort_keys=False, allow_unicode=True).splitlines()

    lines = difflib.unified_diff(dump(before), dump(after), "submitted", "stored", lineterm="", n=2)
    return list(lines)


def _metadata(obj: Any) -> dict[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def _line_of(node: yaml.Node | None, segments: Sequence[str | int]) -> int | None:
    line: int | None = node.start_mark.line + 1 if node is not None else None
    for segment in segments:
        child = _child(node, segment)
        if child is None:
            break
        node = child
        line = node.start_mark.line + 1
    return line


def _child(node: yaml.Node | None, segment: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        pairs = [(k.value, v) for k, v in node.value if isinstance(k.value, str)]
        for key, value in pairs:
            if key == segment:
                return value  # type: ignore[no-any-return]
        for key, value in pairs:  # replica keys may have been renamed (worker -> Worker)
            if key.lower() == str(segment).lower():
                return value  # type: ignore[no-any-return]
    elif (
        isinstance(node, yaml.SequenceNode)
        and isinstance(segment, int)
        and 0 <= segment < len(node.value)
    ):
        return node.value[segment]  # type: ignore[no-any-return]
    return None
