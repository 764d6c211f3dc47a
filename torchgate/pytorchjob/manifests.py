"""How a manifest file that does not parse is named for a person: ``file:line:column: why``.

``torchgate check`` and ``torchgate simulate`` read the same files (YAML or JSON, one or more
documents), so a file that is not YAML reads the same from both: where the parser stopped, what
it expected, and where the construct it was in began; never PyYAML's multi-line message with its
``"<unicode string>"`` stream name.
"""

from __future__ import annotations

import yaml


def yaml_problem(source: str, exc: yaml.YAMLError) -> str:
    """One line naming ``source``, the line and column the parser stopped at, and why."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None and context_mark is not mark:
        problem = f"{problem} ({context} at line {context_mark.line + 1})"
    if mark is None:
        return f"{source}: not valid YAML: {problem}"
    return f"{source}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {problem}"
