"""The webhook beside the load: a ``torchgate webhook`` process and paced validating reviews.

Rules:
- One ``torchgate webhook`` process (``TORCHGATE_SERVER_TIMING=1``) with a certificate from
  ``torchgate certs``, watching the benchmark's apiserver as it would in a cluster.
- The probe posts a validating review of a 2-pod GPU job CREATE every ``1 / rate`` seconds over
  one kept-alive TLS connection (never a burst after a stall) until stopped; it records the
  client-side latency and the server's own ``X-Torchgate-Server-Time``.
- Idle is measured before anything else loads the cluster; the same probe then runs through
  each loaded phase, so the figures differ only by what else the machine is doing.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from controllerbench.stats import percentile
from poolbench.manifests import pytorchjob
from webhookbench.workload import build_review

from torchgate_dev.controlplane.cluster import ControlPlane


def certificates(directory: Path) -> ssl.SSLContext:
    """A serving certificate for 127.0.0.1 in ``directory``; the client context trusting it."""
    subprocess.run(
        [sys.executable, "-m", "torchgate", "certs", "--out-dir", str(directory),
         "--ip", "127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return ssl.create_default_context(cafile=str(directory / "ca.crt"))


def start_webhook(plane: ControlPlane, tls: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """The real ``torchgate webhook`` on loopback, watching the benchmark's cluster."""
    env = {**os.environ, "TORCHGATE_SERVER_TIMING": "1"}
    env.pop("KUBECONFIG", None)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "torchgate", "webhook", "--bind", "127.0.0.1",
             "--port", str(port), "--tls-cert-file", str(tls / "tls.crt"),
             "--tls-private-key-file", str(tls / "tls.key"), "--kubeconfig", str(plane.kubeconfig)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip


async def wait_ready(url: str, context: ssl.SSLContext, seconds: float = 60) -> None:
    """Until ``url`` answers 200."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url, ssl=context) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} not ready after {seconds:.0f} s")
            await asyncio.sleep(0.2)


def review(index: int) -> bytes:
    """A validating review of a 2-pod, 16-GPU job CREATE, with its own uid."""
    job = pytorchjob(f"probe-{index}", "bench", 2, 60)
    job["metadata"] |= {"uid": f"job-{index}", "creationTimestamp": "2026-01-01T00:00:00Z"}
    return json.dumps(build_review(job, f"review-{index}")).encode()


class Probe:
    """Paced reviews to one webhook until :meth:`stop`; latencies in seconds."""

    def __init__(self, port: int, context: ssl.SSLContext, rate: float) -> None:
        self.url = f"https://127.0.0.1:{port}/validate"
        self.context = context
        self.interval = 1.0 / rate
        self.client: list[float] = []
        self.server: list[float] = []
        self.errors = 0
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """End the run after the request in flight."""
        self._stop.set()

    async def run(self) -> None:
        """Post reviews at the rate until stopped."""
        bodies = [review(i) for i in range(32)]
        connector = aiohttp.TCPConnector(ssl=self.context, limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            due = time.perf_counter()
            index = 0
            while not self._stop.is_set():
                now = time.perf_counter()
                if due > now:
                    await asyncio.sleep(due - now)
                    due += self.interval
                else:
                    due = now + self.interval
                started = time.perf_counter()
                try:
                    async with session.post(
                        self.url,
                        data=bodies[index % len(bodies)],
                        headers={"Content-Type": "application/json"},
                    ) as response:
                        answer = await response.json()
                        elapsed = time.perf_counter() - started
                        timing = response.headers.get("X-Torchgate-Server-Time", "nan").split()[0]
                except aiohttp.ClientError:
                    self.errors += 1
                    continue
                index += 1
                if response.status != 200 or not answer["response"]["allowed"]:
                    self.errors += 1
                    continue
                self.client.append(elapsed)
                self.server.append(float(timing))

    def figures(self) -> dict[str, Any]:
        """Reviews, errors and p50/p99 in milliseconds, client and server side."""

        def ms(values: list[float], q: float) -> float:
            return round(percentile(values, q) * 1000, 3)

        return {
            "reviews": len(self.client),
            "errors": self.errors,
            "client_p50_ms": ms(self.client, 0.5),
            "client_p99_ms": ms(self.client, 0.99),
            "server_p50_ms": ms(self.server, 0.5),
            "server_p99_ms": ms(self.server, 0.99),
        }


async def measure_idle(
    port: int, context: ssl.SSLContext, rate: float, seconds: float
) -> dict[str, Any]:
    """The probe for ``seconds`` on a cluster nothing else loads."""
    probe = Probe(port, context, rate)
    task = asyncio.create_task(probe.run())
    await asyncio.sleep(seconds)
    probe.stop()
    await task
    return probe.figures()
