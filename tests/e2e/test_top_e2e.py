"""``torchgate top`` in a real terminal: tmux, 100 columns, the screen captured and read.

The controller (with its pool service) and the webhook run as in ``test_forecast_e2e`` (its
``Stack``). The pool has a team at its quota with a job running and one waiting, a node tainted
``NoSchedule`` (as a quarantine is) and a node whose kubelet stopped reporting (Ready
``Unknown``: a kwok-less node whose status the test writes). ``kubectl torchgate top --watch``
runs inside a detached tmux session of 100 by 60 cells; the assertions read the screen tmux
shows, as a person would see it.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster
from tests.e2e.test_forecast_e2e import Stack, torchgate
from tests.e2e.test_forecast_e2e import stack as stack  # the module-scoped fixture, shared
from tests.e2e.test_pool_sharing import Pool, queued_reason, wait_running
from torchgate_dev.controlplane import kwok

pytestmark = pytest.mark.e2e
COLUMNS, ROWS = 100, 60
QUARANTINE = "torchgate.io/quarantine"


@pytest.fixture
def pool(cluster: Cluster, stack: Stack) -> Iterator[Pool]:
    made = Pool(cluster)
    yield made
    made.clean_up()


class Terminal:
    """A detached tmux session on a server of its own (its socket in a temporary directory)."""

    def __init__(self, workdir: Path) -> None:
        tmux = shutil.which("tmux")
        if tmux is None:
            pytest.fail("tmux is missing: dev/system-packages.sh installs it", pytrace=False)
        self.base = [tmux, "-S", str(workdir / "tmux.sock")]

    def start(self, script: Path) -> None:
        subprocess.run(
            [*self.base, "new-session", "-d", "-x", str(COLUMNS), "-y", str(ROWS), str(script)],
            check=True,
            timeout=10,
        )

    def screen(self) -> str:
        """What the pane shows, wrapped lines joined (so a line too long shows as one)."""
        return subprocess.run(
            [*self.base, "capture-pane", "-p", "-J"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], check=False, timeout=10, capture_output=True)


def lost_node(cluster: Cluster, name: str, label: str) -> None:
    """A node no kubelet (and no kwok) reports for: its Ready condition is Unknown."""
    node = kwok.gpu_node(name, labels={"pool": label})
    del node["metadata"]["annotations"][kwok.NODE_ANNOTATION]
    cluster.apply(node)
    cluster._test_nodes.append(name)
    status = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        }
    }
    cluster.kubectl(
        "patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )


def test_top_fits_a_100_column_terminal_with_teams_unusable_nodes_and_the_queue_head(
    cluster: Cluster, stack: Stack, pool: Pool, tmp_path: Path
) -> None:
    pool.nodes(2)
    (quarantined,) = cluster.add_gpu_nodes(
        1,
        f"{pool.label}-q",
        labels={"pool": pool.label},
        taints=[{"key": QUARANTINE, "value": "ecc", "effect": "NoSchedule"}],
    )
    lost = f"{pool.label}-lost"
    lost_node(cluster, lost, pool.label)
    namespace = cluster.new_namespace("top")
    team = pool.team("vision", [namespace], 8, borrowingLimitGPUs=0)
    pool.job(namespace, "first", pods=1, gpus=8)
    wait_running(cluster, namespace, "first", 1)
    pool.job(namespace, "second", pods=1, gpus=8)
    cluster.wait_for(
        lambda: queued_reason(cluster, namespace, "second") == "WaitingForQuota",
        what="second waiting for quota",
    )

    script = tmp_path / "top.sh"
    env = stack.env(cluster)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()
                      if k.isidentifier() and k not in {"COLUMNS", "LINES"})  # fmt: skip
    script.write_text(f"#!/bin/sh\n{exports}exec kubectl torchgate top --watch --interval 1\n")
    script.chmod(0o755)
    terminal = Terminal(tmp_path)
    terminal.start(script)
    try:
        screen = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = terminal.screen()
            if team in screen and lost in screen and "second" in screen:
                break
            time.sleep(0.5)
    finally:
        (tmp_path / "screen.txt").write_text(screen)
        terminal.kill()
    sys.stdout.write(f"\n--- torchgate top, tmux {COLUMNS}x{ROWS} ---\n{screen.rstrip()}\n")

    lines = screen.splitlines()
    assert lines, screen
    assert lines[0].startswith("torchgate top"), screen
    assert max(len(line) for line in lines) <= COLUMNS, screen
    rows = {line.split()[0]: line.split() for line in lines if line.split()}
    # The team: quota 8, 8 used, nothing borrowed or lent, 1 running, 1 waiting for 8 GPUs.
    assert rows[team][:9] == [team, pool.label, "8", "8", "0", "0", "1", "1", "8"], screen
    assert " ".join(rows[lost][1:]).endswith("lost (Ready is Unknown)"), screen
    assert rows[lost][1] == "00:00:00", screen  # since when
    assert rows[quarantined][-2:] == ["tainted", f"{QUARANTINE}:NoSchedule"], screen
    (queued,) = [i for i, line in enumerate(lines) if f"{namespace}/second" in line]
    assert lines[queued].split()[-1] == "WaitingForQuota", screen
    assert lines[queued + 1].startswith("   "), screen  # the controller's words, under it

    piped = torchgate(stack, cluster, "top")
    assert piped.returncode == 0, piped.stderr
    assert "\x1b" not in piped.stdout
    plain = piped.stdout.splitlines()
    (queued,) = [i for i, line in enumerate(plain) if f"{namespace}/second" in line]
    assert "8/8 GPUs" in plain[queued + 1], piped.stdout  # plain text is never cut


def test_top_shows_a_job_whose_victims_are_still_terminating_with_them(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("top-preempt")
    low = pool.priority_class("low", 1)
    high = pool.priority_class("high", 1000)
    pool.job(namespace, "low", pods=1, gpus=8, priority_class=low)
    (victim,) = wait_running(cluster, namespace, "low", 1)
    pod = victim["metadata"]["name"]
    # The victim's pod stays Terminating (as one saving a checkpoint in its grace period does).
    hold = {"metadata": {"finalizers": ["e2e.torchgate.io/hold"]}}
    cluster.kubectl("patch", "pod", pod, "-n", namespace, "--type", "merge", "-p", json.dumps(hold))
    try:
        pool.job(namespace, "urgent", pods=1, gpus=8, priority_class=high)

        def preempting() -> list[str] | None:
            piped = torchgate(stack, cluster, "top")
            assert piped.returncode == 0, piped.stderr
            rows = [line.split() for line in piped.stdout.splitlines()]
            return next((row for row in rows if row[:1] == [f"{namespace}/urgent"]), None)

        row = cluster.wait_for(preempting, what="top showing urgent preempting")
        assert row[1:] == ["8", f"{namespace}/low"], row
    finally:
        cluster.kubectl(
            "patch", "pod", pod, "-n", namespace, "--type", "json",
            "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False,
        )  # fmt: skip
    wait_running(cluster, namespace, "urgent", 1)
