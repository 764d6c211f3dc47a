"""What the commands that read manifest files read, and what they say about a file they cannot use.

``torchgate check`` and ``torchgate simulate`` read the same files (YAML or JSON, one or more
documents, other kinds skipped) as ``kubectl apply -f`` reads them, so they read the same objects
and say the same about them. The reading itself (files, directories, stdin) is
``torchgate.kube.manifestfiles``; the rules are here.

Rules:

1. A file that is not YAML is one line: ``file:line:column``, what the parser expected, and where
   the construct it was in began; never PyYAML's multi-line message with its
   ``"<unicode string>"`` stream name.
2. A document whose ``kind`` is PyTorchJob spelled otherwise (``PytorchJob``, ``pytorchjob``) is
   an input error, not one more skipped document: kinds are case-sensitive, so kubectl would not
   apply it either, and a command that skipped it would report the file fine without a word.
3. A list (``kind: List``, what ``kubectl get pytorchjobs -o yaml`` writes, or a typed
   ``...List``) stands for its ``items``, each read as a document of its own, with its own YAML
   node so lines still point into the file (``expand_lists``). An ``items`` that is not a list,
   or an item that is not an object, is an input error naming where; a list without items stands
   for itself (nothing in it to check). Lists in a list's items are not opened again.
4. An item of a list is an object read back from a cluster (a list is what ``kubectl get``
   writes), and is judged as the creation of the same object (``as_submitted``): its ``status``
   and the metadata the apiserver sets itself (``uid``, ``resourceVersion``, ``generation``,
   ``creationTimestamp``, deletion marks, ``managedFields``, ``selfLink``) are dropped. What its
   author wrote (spec, labels, annotations, owner references) is kept, so the verdict is the one
   submitting the job today would get, not the webhook's refusal of pasted ``kubectl get``
   output. A document of its own is read as written: it is what a user would submit, and the
   webhook refuses a creation that carries ``uid``, ``resourceVersion`` or ``status``, so the
   commands must say so too.
5. A directory stands for its ``.yaml``, ``.yml`` and ``.json`` files, in name order, not those of
   its subdirectories (kubectl ``-f dir/`` without ``-R``); one without any is an input error
   (``directory_manifests``).
6. A PyTorchJob is ``kubeflow.org/v1``, the one version the training-operator's CRD serves
   (``is_pytorchjob``). A PyTorchJob document without an ``apiVersion``, with one that is not a
   string, or of another version of ``kubeflow.org`` (``v2``, the long-gone ``v1beta1``) or of a
   group no CRD can define (one without a dot: ``v1``, ``batch/v1``) is an input error, as kubectl
   refuses it (``apiVersion not set``, ``no matches for kind "PyTorchJob" in version
   "kubeflow.org/v2"``), not a job checked as if it were v1 (``api_version_problem``). A
   PyTorchJob of another group that a CRD could define (KubeDL's ``training.kubedl.io``) is
   another operator's kind: skipped like other kinds, as the webhook, registered for
   ``kubeflow.org`` only, never sees it.
7. A PyTorchJob's metadata is what the apiserver decodes before any admission step: an object
   whose ``name``, ``generateName`` and ``namespace`` are strings and whose ``labels`` and
   ``annotations`` map to strings (kubectl and the apiserver fail to decode anything else:
   ``cannot unmarshal number into Go struct field ObjectMeta.metadata.namespace``), and a
   namespace that is a DNS-1123 label (the apiserver's ``ValidateNamespaceName``; no namespace
   of another shape can exist, so the job could not be created anywhere: rule 9). Those are
   input errors naming the field and its line (``metadata_problem``). A missing or ill-formed
   name is not: the webhook's own name rule (a DNS-1035 label, stricter than the DNS-1123
   subdomain the apiserver asks of a custom resource's name) denies it at ``metadata.name``, the
   field and reason the apiserver would give, so the commands report that denial.
8. A PyTorchJob's fields are those its CRD declares (``crdschema`` rule 2): ``kubectl apply``
   validates strictly by default, and the apiserver refuses a job with any other field while
   decoding it, before the webhook is asked (HTTP 400, ``strict decoding error: unknown field
   "spec.pytorchReplicaSpecs.Worker.imagePullPolicy"``), however harmless the field. That is an
   input error naming every unknown field as the apiserver does, each with its line and, where
   ``crdschema`` rule 5 knows one, where it belongs (``unknown_fields_problem``), not a job
   checked as if the field were not there.
9. A namespace name is a DNS-1123 label, as the apiserver's ``ValidateNamespaceName`` asks, be it
   written in a job (rule 7) or given to a command (``torchgate check -n``): the one check both
   ask (``namespace_name_problem``). kubectl does not check ``-n Bad_NS`` itself; the apiserver
   answers ``namespaces "Bad_NS" not found``, and no namespace of that shape can ever be made.

Rules 10 and 11 are ``kubectl apply``'s, asked by ``torchgate check`` of all its input; not by
``torchgate simulate``, which dry-runs each job's creation (a POST, as ``kubectl create`` sends).
Rule 12 is both commands' (``kubectl apply`` and ``kubectl create`` alike):

10. ``kubectl apply`` finds the object it applies by name, so a PyTorchJob with a
    ``generateName`` and no ``name`` is an input error in kubectl's words, ``from <generateName>:
    cannot use generate name with apply``, naming the document and the line
    (``generate_name_problem``). ``kubectl create`` accepts it (the apiserver makes the name up);
    with a ``name`` too, the name is used and ``generateName`` is ignored.
11. ``kubectl apply`` applies a file's objects in order, each by its namespace (the document's,
    else ``-n``) and name (``applied_key``). So a job whose namespace and name an earlier
    document of the same input already gave is not a second creation: kubectl creates the
    first, finds it when it comes to the second, and sends the second as a patch of it (an
    UPDATE, which the webhook judges as such), as ``pytorchjob.applying`` computes it. That holds
    only if the earlier one was admitted: one denied left nothing, and the next is a creation.
12. ``kubectl apply -n NS`` (and ``kubectl create -n NS``) refuses an object whose own namespace
    is another, before anything is sent (``resource.RequireNamespace``: a namespace given on the
    command line is enforced), in its words, ``the namespace from the provided object "team-b"
    does not match the namespace "team-a". You must pass '--namespace=team-b' to perform this
    operation.``: an input error naming the document and the line (``flag_namespace_problem``).
    An empty ``-n`` is no namespace given: kubectl takes the context's, and enforces nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from torchgate.pytorchjob import crdschema, names
from torchgate.pytorchjob.fieldpath import FieldPath
from torchgate.pytorchjob.yamlinput import load_documents

MANIFEST_SUFFIXES: Final = (".yaml", ".yml", ".json")
"""The file name endings kubectl reads from a directory (rule 5)."""


NAMESPACE_NAME_RULE: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character, at most 63 characters"
)
"""The apiserver's words for a namespace name (``ValidateNamespaceName``, rule 7)."""


class ManifestError(ValueError):
    """Input a command cannot use: one line naming the file and where in it."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """One object of a manifest file, with its YAML node tree for line numbers.

    ``index`` counts the file's documents; ``item`` is the object's place in the ``items`` of
    the list document it came from (rule 3), ``None`` for a document of its own.
    """

    source: str
    index: int
    item: int | None
    object: Any
    node: yaml.Node | None

    @property
    def where(self) -> str:
        """``file[document]``, and ``.items[n]`` for an object of a list."""
        item = "" if self.item is None else f".items[{self.item}]"
        return f"{self.source}[{self.index}]{item}"


def read_manifests(source: str, text: str, *, crd_version: Mapping[str, Any]) -> list[Manifest]:
    """The objects of one file's ``text``, lists opened, kinds and fields checked (rules 1 to 8).

    ``crd_version`` is the PyTorchJob CRD's served version (``crdschema.served_version``), whose
    schema rule 8 checks the fields against.
    """
    try:
        documents = load_documents(text)
    except yaml.YAMLError as exc:
        raise ManifestError(yaml_problem(source, exc)) from None
    manifests: list[Manifest] = []
    for index, (node, obj) in enumerate(documents):
        manifests.extend(expand_lists(Manifest(source, index, None, obj, node)))
    for manifest in manifests:
        misspelled = misspelled_kind(manifest.object)
        if misspelled is not None:
            raise ManifestError(misspelled_kind_problem(manifest.where, misspelled))
    for manifest in manifests:
        problem = (
            api_version_problem(manifest)
            or metadata_problem(manifest)
            or unknown_fields_problem(manifest, crd_version=crd_version)
        )
        if problem is not None:
            raise ManifestError(problem)
    return manifests


def yaml_problem(source: str, exc: yaml.YAMLError) -> str:
    """One line naming ``source``, the line and column the parser stopped at, and why (rule 1)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None and context_mark is not mark:
        problem = f"{problem} ({context} at line {context_mark.line + 1})"
    if mark is None:
        return f"{source}: not valid YAML: {problem}"
    return f"{source}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {problem}"


def misspelled_kind(document: object) -> str | None:
    """The ``kind`` of a document that means PyTorchJob but spells it otherwise (rule 2)."""
    kind = document.get("kind") if isinstance(document, dict) else None
    if isinstance(kind, str) and kind != names.KIND and kind.lower() == names.KIND.lower():
        return kind
    return None


def misspelled_kind_problem(where: str, kind: str) -> str:
    """One line for rule 2: where the document is, and how the kind is spelled."""
    return f"{where}: kind {kind!r} is not {names.KIND} (kinds are case-sensitive)"


def is_pytorchjob(obj: object) -> bool:
    """Whether a document is a Kubeflow PyTorchJob, the objects the commands judge (rule 6)."""
    return (
        isinstance(obj, dict)
        and obj.get("kind") == names.KIND
        and obj.get("apiVersion") == names.API_VERSION
    )


def api_version_problem(manifest: Manifest) -> str | None:
    """Why kubectl would refuse a PyTorchJob document's ``apiVersion``, if it would (rule 6)."""
    obj = manifest.object
    if not isinstance(obj, dict) or obj.get("kind") != names.KIND:
        return None
    api_version = obj.get("apiVersion")
    if api_version is None or api_version == "":
        return f"{manifest.where}: apiVersion not set (a {names.KIND} is {names.API_VERSION})"
    where = f"{manifest.where}.apiVersion{_line(_value_node(manifest.node, 'apiVersion'))}"
    if not isinstance(api_version, str):
        return f"{where}: must be a string ({names.API_VERSION}), not {api_version!r}"
    if api_version.count("/") > 1:
        return f"{where}: unexpected GroupVersion string {api_version!r}"
    group = api_version.rpartition("/")[0]
    if api_version == names.API_VERSION or (
        group != names.GROUP and "." in group and names.is_dns1123_subdomain(group)
    ):
        return None
    return (
        f'{where}: no matches for kind "{names.KIND}" in version "{api_version}" (the '
        f"{names.KIND} CRD serves {names.API_VERSION} only)"
    )


def metadata_problem(manifest: Manifest) -> str | None:
    """What of a PyTorchJob's metadata the apiserver could not decode or place (rule 7)."""
    if not is_pytorchjob(manifest.object):
        return None
    metadata = manifest.object.get("metadata")
    if metadata is None:
        return None
    node = _value_node(manifest.node, "metadata")
    if not isinstance(metadata, dict):
        return f"{manifest.where}.metadata{_line(node)}: must be an object, not {metadata!r}"
    for key in ("name", "generateName", "namespace"):
        value = metadata.get(key)
        if value is not None and not isinstance(value, str):
            where = f"{manifest.where}.metadata.{key}{_line(_value_node(node, key))}"
            return f"{where}: must be a string, not {value!r}"
    for key in ("labels", "annotations"):
        problem = _string_map_problem(manifest.where, node, key, metadata.get(key))
        if problem is not None:
            return problem
    namespace = metadata.get("namespace")
    problem = namespace_name_problem(namespace) if namespace else None
    if problem is not None:
        where = f"{manifest.where}.metadata.namespace{_line(_value_node(node, 'namespace'))}"
        return f"{where}: {problem}"
    return None


def namespace_name_problem(namespace: str) -> str | None:
    """Why no namespace can be named ``namespace``, if none can (rule 9)."""
    if names.is_dns1123_label(namespace):
        return None
    return f"{namespace!r} is not a namespace name: {NAMESPACE_NAME_RULE}"


def generate_name_problem(manifest: Manifest) -> str | None:
    """What ``kubectl apply`` says of a PyTorchJob with a ``generateName`` and no name (rule 10)."""
    if not is_pytorchjob(manifest.object):
        return None
    metadata = manifest.object.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("name"):
        return None
    prefix = metadata.get("generateName")
    if not prefix:
        return None
    node = _value_node(_value_node(manifest.node, "metadata"), "generateName")
    return (
        f"{manifest.where}.metadata.generateName{_line(node)}: from {prefix}: cannot use "
        "generate name with apply (kubectl apply finds a job by its name: give metadata.name, "
        "or submit it with kubectl create)"
    )


def flag_namespace_problem(manifest: Manifest, flag_namespace: str) -> str | None:
    """What ``kubectl apply -n`` says of a PyTorchJob in another namespace (rule 12)."""
    if not flag_namespace or not is_pytorchjob(manifest.object):
        return None
    metadata = manifest.object.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    if not namespace or namespace == flag_namespace:
        return None
    node = _value_node(_value_node(manifest.node, "metadata"), "namespace")
    return (
        f"{manifest.where}.metadata.namespace{_line(node)}: the namespace from the provided "
        f'object "{namespace}" does not match the namespace "{flag_namespace}". You must pass '
        f"'--namespace={namespace}' to perform this operation."
    )


def applied_key(manifest: Manifest, default_namespace: str) -> tuple[str, str] | None:
    """The namespace and name ``kubectl apply`` finds a PyTorchJob by (rule 11).

    ``None`` for a job without a name: kubectl cannot look it up, and the webhook denies it.
    """
    if not is_pytorchjob(manifest.object):
        return None
    metadata = manifest.object.get("metadata")
    if not isinstance(metadata, dict):
        return None
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    return (namespace_of(manifest.object, default_namespace), name)


def namespace_of(job: object, default_namespace: str) -> str:
    """The namespace kubectl sends a job to: its own, else the command's (``-n``, the context's)."""
    metadata = job.get("metadata") if isinstance(job, Mapping) else None
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return str(namespace or default_namespace)


def unknown_fields_problem(manifest: Manifest, *, crd_version: Mapping[str, Any]) -> str | None:
    """The fields of a PyTorchJob its CRD does not declare, as the apiserver names them (rule 8)."""
    if not is_pytorchjob(manifest.object):
        return None
    unknown = crdschema.unknown_fields(manifest.object, crd_version=crd_version)
    if not unknown:
        return None
    fields = ", ".join(
        f'unknown field "{path}"{_line(_node_at(manifest.node, path))}' for path in unknown
    )
    hints = "".join(
        f"; {path}: {hint}"
        for path in unknown
        if (hint := crdschema.unknown_field_hint(path, crd_version=crd_version)) is not None
    )
    return (
        f"{manifest.where}: {fields}: the {names.KIND} CRD has no such field (kubectl apply "
        f"validates strictly: the apiserver refuses the job before any webhook sees it){hints}"
    )


def _node_at(node: yaml.Node | None, path: FieldPath) -> yaml.Node | None:
    for segment in path.segments:
        if isinstance(segment, int):
            sequence = node.value if isinstance(node, yaml.SequenceNode) else []
            node = sequence[segment] if segment < len(sequence) else None
        else:
            node = _value_node(node, segment)
    return node


def _string_map_problem(
    where: str, metadata_node: yaml.Node | None, key: str, value: object
) -> str | None:
    if value is None:
        return None
    node = _value_node(metadata_node, key)
    if not isinstance(value, dict):
        return f"{where}.metadata.{key}{_line(node)}: must map keys to strings, not {value!r}"
    for entry, entry_value in value.items():
        if entry_value is not None and not isinstance(entry_value, str):
            line = _line(_value_node(node, str(entry)))
            return (
                f"{where}.metadata.{key}[{entry}]{line}: must be a string, not {entry_value!r} "
                "(quote it)"
            )
    return None


def is_list(obj: object) -> bool:
    """Whether a document is a list of objects (``List`` or a typed ``...List``, rule 3)."""
    kind = obj.get("kind") if isinstance(obj, dict) else None
    return isinstance(kind, str) and kind.endswith("List")


def expand_lists(document: Manifest) -> list[Manifest]:
    """A list document's items as manifests of their own; any other document as it is (rule 3)."""
    if document.item is not None or not is_list(document.object):
        return [document]
    items = document.object.get("items")
    if items is None or items == []:
        return [document]
    items_node = _value_node(document.node, "items")
    if not isinstance(items, list):
        line = _line(items_node)
        raise ManifestError(f"{document.where}.items{line}: must be a list of objects")
    expanded = []
    for position, item in enumerate(items):
        item_node = (
            items_node.value[position] if isinstance(items_node, yaml.SequenceNode) else None
        )
        manifest = Manifest(document.source, document.index, position, item, item_node)
        if not isinstance(item, dict):
            raise ManifestError(f"{manifest.where}{_line(item_node)}: must be an object")
        submitted = as_submitted(item)
        expanded.append(Manifest(document.source, document.index, position, submitted, item_node))
    return expanded


def as_submitted(obj: dict[str, Any]) -> dict[str, Any]:
    """What creating ``obj`` would submit: status and server-set metadata dropped (rule 4)."""
    submitted = {key: value for key, value in obj.items() if key != "status"}
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        server_set = crdschema.SERVER_SET_METADATA
        submitted["metadata"] = {
            key: value for key, value in metadata.items() if key not in server_set
        }
    return submitted


def directory_manifests(directory: str, entries: Iterable[tuple[str, bool]]) -> list[str]:
    """The file names of a directory kubectl reads, in name order (rule 5).

    ``entries`` are the directory's (name, is a file) pairs; subdirectories are not opened.
    """
    chosen = sorted(
        name for name, is_file in entries if is_file and name.endswith(MANIFEST_SUFFIXES)
    )
    if not chosen:
        endings = ", ".join(MANIFEST_SUFFIXES)
        raise ManifestError(f"{directory}: a directory without manifests (no {endings} files)")
    return chosen


def _value_node(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.value == key:
                return value_node  # type: ignore[no-any-return]
    return None


def _line(node: yaml.Node | None) -> str:
    return "" if node is None else f" (line {node.start_mark.line + 1})"
