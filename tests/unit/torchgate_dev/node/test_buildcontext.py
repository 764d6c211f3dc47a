"""Docker's .dockerignore rules and the build context they leave, on tables and small trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchgate_dev.node import buildcontext

REPO_ROOT = Path(__file__).resolve().parents[4]
REPO_RULES = buildcontext.parse_dockerignore((REPO_ROOT / ".dockerignore").read_text())


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("pyproject.toml", False),
        ("README.md", False),
        ("torchgate/webhook/server.py", False),
        ("torchgate/controller/admission/topology.py", False),
        ("torchgate/pytorchjob/py.typed", False),
        ("torchgate/certs/authority.py", False),
        # The dev tooling is a distribution of its own: never in the product image.
        ("dev/pyproject.toml", True),
        ("dev/torchgate_dev/node/productimage.py", True),
        ("dev/torchgate_dev/data/crds/torchgate.io_teamquotas.yaml", True),
        ("Dockerfile", True),
        (".dockerignore", True),
        ("tests/unit/test_rbac.py", True),
        (".venv/bin/python", True),
        (".git/HEAD", True),
        ("torchgate.egg-info/PKG-INFO", True),
        ("torchgate/webhook/__pycache__/server.cpython-311.pyc", True),
        ("torchgate/cli.pyc", True),
        ("torchgate/certs/ca.pem", True),
        ("torchgate/certs/tls/server.key", True),
        ("torchgate/certs/server.crt", True),
        ("torchgate/certs/request.csr", True),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_the_repository_context_is_the_allow_list(path: str, ignored: bool) -> None:
    assert buildcontext.is_ignored(path, REPO_RULES) is ignored


@pytest.mark.parametrize(
    ("lines", "path", "ignored"),
    [
        (["*.md"], "README.md", True),
        (["*.md"], "docs/guide.md", False),  # "*" stays within one component
        (["**/*.md"], "docs/deep/guide.md", True),
        (["**/*.md"], "README.md", True),  # "**/" may match no folder at all
        (["docs/**"], "docs/a/b", True),
        (["docs"], "docs/a/b.txt", True),  # a parent folder's match covers its contents
        (["/docs/"], "docs/a.txt", True),  # leading and trailing slashes are cleaned away
        (["doc?"], "docs", True),
        (["doc?"], "doc/x", False),
        (["*", "!keep"], "keep/x.py", False),
        (["*", "!keep", "keep/*.log"], "keep/x.log", True),  # the last match decides
        (["!keep", "*"], "keep/x.py", True),
        (["# comment", "", "  a.txt  "], "a.txt", True),
        (["a.txt"], "a-txt", False),  # "." is literal
        (["file[0-9]"], "file7", True),
    ],
)
def test_patterns_follow_docker(lines: list[str], path: str, ignored: bool) -> None:
    rules = buildcontext.parse_dockerignore("\n".join(lines))

    assert buildcontext.is_ignored(path, rules) is ignored


def _tree(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_context_lists_kept_files_with_mode_and_follows_exceptions_into_ignored_folders(
    tmp_path: Path,
) -> None:
    _tree(
        tmp_path,
        {
            "a.py": "a",
            "skip/x.py": "x",
            "skip/keep/y.py": "y",
            "other/z.py": "z",
            "tool.sh": "#!/bin/sh\n",
        },
    )
    (tmp_path / "tool.sh").chmod(0o755)
    (tmp_path / "a.py").chmod(0o644)
    os.symlink("a.py", tmp_path / "link.py")
    rules = buildcontext.parse_dockerignore("skip\nother\n!skip/keep\n")

    found = buildcontext.context_digests(tmp_path, rules)

    assert sorted(found) == ["a.py", "link.py", "skip/keep/y.py", "tool.sh"]
    assert found["tool.sh"].endswith(":755")
    assert found["a.py"].endswith(":644")
    assert found["link.py"] != found["a.py"]  # a link is digested by its target's name


def test_an_ignored_folder_without_exceptions_is_not_walked(tmp_path: Path) -> None:
    rules = buildcontext.parse_dockerignore("*\n!src\n")

    assert buildcontext.must_walk("src", rules)
    assert not buildcontext.must_walk(".venv", rules)
    assert buildcontext.must_walk("anything", buildcontext.parse_dockerignore("*\n!**/keep\n"))
