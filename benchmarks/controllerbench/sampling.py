"""What the rig does while a rate is taken: apiserver requests, the controller's creates, CPU.

Rules:
- Twice a second: the apiserver's request and watch-event counts (writes are the POST, PUT,
  PATCH and DELETE among them), the machine's busy CPU ticks (``/proc/stat``) and
  each process's CPU seconds (``/proc/PID/stat``; a process that has exited is skipped).
- With the controller's ``/metrics`` (loopback, no apiserver token) also its creates in flight at
  the apiserver and waiting for a slot (``torchgate_controller_api_writes``); a scrape that fails
  (not serving yet, or already stopped) is skipped.
- Every figure is taken between the nearest samples inside a window of monotonic times; fewer
  than two samples give NaN (or nothing).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from controllerbench.cluster import apiserver_requests, metrics_text
from controllerbench.stats import read_counts, write_counts, writes_since
from torchgate.kube.client import KubeClient
from torchgate.kube.errors import ApiError


def controller_creates(text: str) -> tuple[float, float]:
    """The controller's creates in flight at the apiserver and waiting for a slot, from metrics."""
    states = {"in_flight": 0.0, "waiting": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "torchgate_controller_api_writes":
            for sample in family.samples:
                if sample.labels.get("write") == "create":
                    states[sample.labels["state"]] = sample.value
    return states["in_flight"], states["waiting"]


class RigSampler:
    """Samples, twice a second, the apiserver's write count, busy CPU and each process's CPU.

    With ``controller_metrics`` (the controller's metrics server, e.g. ``http://127.0.0.1:PORT``)
    it also samples how many pod and Service creates the controller has in flight and waiting.
    """

    def __init__(
        self,
        api: KubeClient,
        pids: dict[str, int],
        controller_metrics: str | None = None,
        slots: int = 0,
    ) -> None:
        self.api = api
        self.slots = slots
        self.pids = pids
        self.controller_metrics = controller_metrics
        self.creates: list[tuple[float, float, float]] = []  # (time, in flight, waiting)
        # (time, requests and watch events so far by kind)
        self.requests: list[tuple[float, dict[str, float]]] = []
        self.cpu: list[tuple[float, float, float]] = []  # (time, busy ticks, all ticks)
        self.process_cpu: list[tuple[float, dict[str, float]]] = []  # (time, CPU s by process)

    async def run(self) -> None:
        """Sample until cancelled."""
        controller = (
            KubeClient.for_server(self.controller_metrics) if self.controller_metrics else None
        )
        try:
            while True:
                requests = await apiserver_requests(self.api)
                now = time.monotonic()
                self.requests.append((now, requests))
                self.cpu.append((now, *machine_cpu_ticks()))
                self.process_cpu.append((now, processes_cpu_seconds(self.pids)))
                if controller is not None:
                    try:
                        in_flight, waiting = controller_creates(await metrics_text(controller))
                    except (OSError, ApiError, aiohttp.ClientError):
                        pass  # not serving yet, or already stopped
                    else:
                        self.creates.append((time.monotonic(), in_flight, waiting))
                await asyncio.sleep(0.5)
        finally:
            if controller is not None:
                await controller.close()

    def creates_in_window(self, start: float, end: float) -> dict[str, float]:
        """Mean creates in flight and waiting between two monotonic times.

        ``all_slots_busy_share``: how often every write slot was taken (1.0: always).
        """
        inside = [(f, w) for t, f, w in self.creates if start <= t <= end]
        if not inside:
            nan = float("nan")
            return {
                "in_flight_mean": nan,
                "waiting_mean": nan,
                "all_slots_busy_share": nan,
                "slots": self.slots,
            }
        return {
            "in_flight_mean": round(statistics.fmean(f for f, _ in inside), 1),
            "waiting_mean": round(statistics.fmean(w for _, w in inside), 1),
            "all_slots_busy_share": round(sum(f >= self.slots for f, _ in inside) / len(inside), 2),
            "samples": len(inside),
            "slots": self.slots,
        }

    def per_second(self, start: float, end: float) -> float:
        """Writes per second between two monotonic times (nearest samples inside the window)."""
        inside = [(t, sum(write_counts(r).values())) for t, r in self.requests if start <= t <= end]
        if len(inside) < 2:
            return float("nan")
        (t0, n0), (t1, n1) = inside[0], inside[-1]
        return (n1 - n0) / (t1 - t0)

    def writes_by_kind(self, start: float, end: float, per: int) -> dict[str, float]:
        """Writes by verb and resource between two monotonic times, per job or per pod."""
        inside = [r for t, r in self.requests if start <= t <= end]
        if len(inside) < 2:
            return {}
        return writes_since(write_counts(inside[0]), write_counts(inside[-1]), per)

    def reads_by_kind(self, start: float, end: float, per: int) -> dict[str, float]:
        """Reads (GET, LIST, WATCH) and watch events sent, by kind, between two monotonic times.

        Per job or per pod, like :meth:`writes_by_kind`; ``watch events Pod`` counts each pod
        event once per watcher it was sent to, ``watch bytes Pod`` their encoded bytes.
        """
        inside = [r for t, r in self.requests if start <= t <= end]
        if len(inside) < 2:
            return {}
        return writes_since(read_counts(inside[0]), read_counts(inside[-1]), per)

    def cpu_busy(self, start: float, end: float) -> float:
        """Share of all cores busy between two monotonic times (1.0: every core saturated)."""
        inside = [(busy, total) for t, busy, total in self.cpu if start <= t <= end]
        if len(inside) < 2:
            return float("nan")
        return (inside[-1][0] - inside[0][0]) / max(inside[-1][1] - inside[0][1], 1)

    def process_cpu_share(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per second of each process between two monotonic times (1.0: a core)."""
        inside = [(t, c) for t, c in self.process_cpu if start <= t <= end]
        if len(inside) < 2:
            return {}
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return {name: round((c1[name] - c0[name]) / (t1 - t0), 2) for name in c1 if name in c0}


def processes_cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each process that is still there (one may exit mid-run)."""
    seconds = {}
    for name, pid in pids.items():
        try:
            seconds[name] = cpu_seconds(pid)
        except OSError:
            continue
    return seconds


def machine_cpu_ticks() -> tuple[float, float]:
    """(busy, total) CPU ticks of the whole machine so far, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return float(sum(fields) - idle), float(sum(fields))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
