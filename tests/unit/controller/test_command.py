"""``torchgate controller`` refuses nonsensical concurrency flags before it touches the cluster."""

from __future__ import annotations

import pytest

from torchgate.cli import main


@pytest.mark.parametrize("flag", ["--workers", "--write-concurrency"])
def test_a_concurrency_below_one_is_refused_naming_the_flag(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["controller", "--kubeconfig", "/nonexistent", flag, "0"]) == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err
