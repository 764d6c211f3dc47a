"""The dashboard and the alert rules against a real Prometheus scraping torchgate while it works.

Debian's ``prometheus`` (installed by dev/system-packages.sh) runs on loopback with its data in a
temporary directory, scraping every second the controller's metrics port and the webhook's
``/metrics`` over TLS (the ``Stack`` of ``test_forecast_e2e``: both as processes against the
local apiserver), with the rule file loaded; it is killed at the end. The workload: a team at its
quota with a job running, one waiting for quota, one that ended (its worker released), one that
restarted after a failed container, and one the webhook refused. Then every dashboard query and
every alert expression must parse, and return series: the dashboard's as written (Grafana's
``$__rate_interval`` as 1m); an alert's (which returns series only when it fires) through each
selector it reads, and Prometheus must have evaluated every rule without error.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import monitoring as mon
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import get_job, is_true, job_path
from tests.e2e.test_forecast_e2e import Stack
from tests.e2e.test_forecast_e2e import stack as stack  # the module-scoped fixture, shared
from tests.e2e.test_pool_sharing import Pool, queued_reason, wait_running
from torchgate_dev.controlplane.processes import terminate
from torchgate_dev.paths import CA_CERT
from torchgate_dev.ports import free_port

pytestmark = pytest.mark.e2e
SCRAPE_SECONDS = 1


def executable(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: dev/system-packages.sh installs it", pytrace=False)
    return found


@dataclass
class Prometheus:
    """A Prometheus process on loopback, and its query API."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **query: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return json.loads(error.read() or b"{}")

    def query(self, expr: str) -> dict[str, Any]:
        return dict(self.api("query", query=expr))


@pytest.fixture(scope="module")
def prometheus(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    workdir = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE_SECONDS}s",
            "evaluation_interval": f"{SCRAPE_SECONDS}s",
        },
        "rule_files": [str(mon.RULES)],
        "scrape_configs": [
            {
                "job_name": "torchgate-controller",
                "static_configs": [{"targets": [f"127.0.0.1:{stack.controller.metrics_port}"]}],
            },
            {
                "job_name": "torchgate-webhook",
                "scheme": "https",
                "tls_config": {"ca_file": str(stack.webhook.tls / CA_CERT)},
                "static_configs": [{"targets": [f"127.0.0.1:{stack.webhook.port}"]}],
            },
        ],
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    checked = subprocess.run(
        [executable("promtool"), "check", "config", str(config_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                executable("prometheus"),
                f"--config.file={config_file}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    running = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"prometheus exited:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{running.url}/-/ready", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"prometheus not ready:\n{log.read_text()[-3000:]}")
                time.sleep(0.2)
        yield running
    finally:
        terminate(process, grace=10)


@dataclass(frozen=True)
class Workload:
    namespace: str
    team: str


@pytest.fixture(scope="module")
def workload(cluster: Cluster, stack: Stack, prometheus: Prometheus) -> Iterator[Workload]:
    pool = Pool(cluster)
    nodes = cluster.add_gpu_nodes(3, pool.label, gpus=8, labels={"pool": pool.label}, keep=True)
    namespace = cluster.new_namespace("watched", keep=True)
    try:
        team = pool.team("vision", [namespace], 8, borrowingLimitGPUs=0)
        pool.job(namespace, "done", pods=2, gpus=1)
        pool.job(namespace, "flaky", pods=2, gpus=1, backoff_limit=3)
        # steady holds 2 of the 8 GPUs throughout, so big (8) waits for quota however flaky's
        # restart and the admission cycles interleave (a restarting gang leaves the queue until
        # its old pods are gone, and big would fit the quota in that gap).
        pool.job(namespace, "steady", pods=2, gpus=1)
        wait_running(cluster, namespace, "done", 2)
        wait_running(cluster, namespace, "flaky", 2)
        wait_running(cluster, namespace, "steady", 2)
        pool.job(namespace, "big", pods=1, gpus=8)
        cluster.wait_for(
            lambda: queued_reason(cluster, namespace, "big") == "WaitingForQuota",
            what="big waiting for quota",
        )
        cluster.finish_pod(namespace, "done-master-0", 0)  # its worker is released
        cluster.wait_for(
            lambda: is_true(get_job(cluster, namespace, "done"), "Succeeded"), what="done"
        )
        cluster.finish_pod(namespace, "flaky-worker-0", 1)  # OnFailure: a gang restart
        cluster.wait_for(
            lambda: (
                (get_job(cluster, namespace, "flaky") or {})["metadata"]
                .get("annotations", {})
                .get("torchgate.io/restarts")
                == "1"
            ),
            what="flaky restarted",
        )
        status, _ = cluster.api_request(
            "POST",
            job_path(namespace),
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "refused", "namespace": namespace},
                "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 2, "template": {}}}},
            },
        )
        assert status in (400, 422), status
        yield Workload(namespace, team)
    finally:
        pool.clean_up()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "nodes", *nodes, "--wait=false", "--ignore-not-found")


def series(prometheus: Prometheus, expr: str, timeout: float = 30) -> dict[str, Any]:
    """The query's answer once it has a result (or the last answer after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = prometheus.query(expr)
        if answer.get("status") != "success" or answer["data"]["result"]:
            return answer
        if time.monotonic() > deadline:
            return answer
        time.sleep(SCRAPE_SECONDS)


def test_promtool_accepts_the_rule_file() -> None:
    checked = subprocess.run(
        [executable("promtool"), "check", "rules", str(mon.RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(mon.alert_queries())} rules found" in checked.stdout


@pytest.mark.parametrize("query", mon.dashboard_queries(), ids=lambda q: q.source)
def test_every_dashboard_query_returns_series_while_a_workload_runs(
    prometheus: Prometheus, workload: Workload, query: mon.Query
) -> None:
    answer = series(prometheus, query.expr)

    assert answer["status"] == "success", answer
    assert answer["data"]["result"], f"no series for {query.expr}"


def test_the_pool_panels_show_the_workloads_team_and_its_wait(
    prometheus: Prometheus, workload: Workload
) -> None:
    team = f'team="{workload.team}"'
    queries = {
        f"torchgate_controller_team_used_gpus{{{team}}}": [4.0],  # flaky's and steady's pods
        f"torchgate_controller_team_quota_gpus{{{team}}}": [8.0],
        f'torchgate_controller_waiting_gpus{{{team},reason="WaitingForQuota"}}': [8.0],  # big
        f'torchgate_controller_waiting_jobs{{{team},reason="WaitingForQuota"}}': [1.0],
    }

    def values() -> dict[str, list[float]]:
        return {
            expr: [float(r["value"][1]) for r in prometheus.query(expr)["data"]["result"]]
            for expr in queries
        }

    deadline = time.monotonic() + 30
    while (seen := values()) != queries and time.monotonic() < deadline:
        time.sleep(SCRAPE_SECONDS)
    assert seen == queries


@pytest.mark.parametrize("query", mon.alert_queries(), ids=lambda q: q.source)
def test_every_alert_expression_parses_and_reads_series_that_exist(
    prometheus: Prometheus, workload: Workload, query: mon.Query
) -> None:
    answer = prometheus.query(query.expr)
    assert answer["status"] == "success", answer  # it parses and evaluates

    for selector in query.selectors():
        found = series(prometheus, selector)
        assert found["status"] == "success", found
        assert found["data"]["result"], f"{query.source}: no series for {selector}"


def test_prometheus_evaluates_every_rule_without_error(
    prometheus: Prometheus, workload: Workload
) -> None:
    def rules() -> list[dict[str, Any]]:
        groups = prometheus.api("rules")["data"]["groups"]
        return [rule for group in groups for rule in group["rules"]]

    deadline = time.monotonic() + 30
    while not all(r.get("lastEvaluation", "").startswith("20") for r in rules()):
        assert time.monotonic() < deadline, rules()
        time.sleep(SCRAPE_SECONDS)
    loaded = rules()

    assert sorted(r["name"] for r in loaded) == sorted(q.source for q in mon.alert_queries())
    assert [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"] == []
