"""What the commands that read manifest files say about a file they cannot use.

``torchgate check`` and ``torchgate simulate`` read the same files (YAML or JSON, one or more
documents, other kinds skipped), so they say the same about them.

Rules:

1. A file that is not YAML is one line: ``file:line:column``, what the parser expected, and where
   the construct it was in began; never PyYAML's multi-line message with its
   ``"<unicode string>"`` stream name.
2. A document whose ``kind`` is PyTorchJob spelled otherwise (``PytorchJob``, ``pytorchjob``) is
   an input error, not one more skipped document: kinds are case-sensitive, so kubectl would not
   apply it either, and a command that skipped it would report the file fine without a word.
"""

from __future__ import annotations

import yaml

from torchgate.pytorchjob import names


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
