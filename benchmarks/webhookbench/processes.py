"""The server processes: certificates, cores, niceness, start and stop, and CPU accounting.

Every server is its own process pinned to the server core (the generator runs on the other one),
with the certificate ``torchgate certs`` makes. CPU time and run-queue wait come from
``/proc/PID/task/*/schedstat`` (ns resolution, summed over threads): on a shared machine the
wall-clock throughput drops when another process takes the server's core, the CPU cost per
review does not, and the wait says how much that happened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from torchgate_dev.ports import free_port
from webhookbench import ENTRY, REPO


@dataclasses.dataclass
class Server:
    """One server process under test."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path


def schedstat(pid: int | str) -> tuple[float, float]:
    """Seconds on a CPU and seconds runnable but waiting for one, summed over the threads."""
    run = wait = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            fields = (task / "schedstat").read_text().split()
            run += int(fields[0])
            wait += int(fields[1])
    return run / 1e9, wait / 1e9


def make_certs(directory: Path) -> None:
    command = [sys.executable, "-m", "torchgate", "certs", "--out-dir", str(directory)]
    command += ["--ip", "127.0.0.1", "--dns", "localhost"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)


def choose_cores(server_core: int | None, client_core: int | None) -> tuple[int | None, int | None]:
    """Server and generator cores, or (None, None) when fewer than two cores are available."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        return None, None
    server = available[0] if server_core is None else server_core
    client = next(c for c in available if c != server) if client_core is None else client_core
    return server, client


def start_server(
    name: str,
    *,
    certs: Path,
    core: int | None,
    workdir: Path,
    policy_file: Path,
    niceness: int | None = None,
) -> Server:
    port = free_port()
    tls = ["--tls-cert-file", str(certs / "tls.crt")]
    tls += ["--tls-private-key-file", str(certs / "tls.key")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if name == "torchgate":
        env["TORCHGATE_SERVER_TIMING"] = "1"
        argv = [sys.executable, "-m", "torchgate", "webhook", "--bind", "127.0.0.1"]
        argv += ["--port", str(port), *tls, "--policy", str(policy_file), "--log-level", "WARNING"]
    else:
        argv = [sys.executable, str(ENTRY), "_serve", name, "--port", str(port)]
        argv += [*tls, "--policy", str(policy_file)]
    log = workdir / f"{name}.log"

    def pin() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})
        if niceness is not None:
            os.setsid()  # an autogroup of its own, whose weight the niceness then sets
            set_niceness(niceness)

    with open(log, "wb") as out:
        process = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=pin
        )
    return Server(name, port, process, log)


def set_niceness(niceness: int) -> int | None:
    """Give this process (and its autogroup) ``niceness``; return the autogroup's previous one.

    With ``sched_autogroup_enabled`` (the default on desktop-style kernels) CFS first shares a
    core between sessions' autogroups and only then between the processes of one; a process
    niceness alone does not win the core from another session's busy process.
    """
    os.setpriority(os.PRIO_PROCESS, 0, niceness)
    try:
        previous = int(Path("/proc/self/autogroup").read_text().split()[-1])
        Path("/proc/self/autogroup").write_text(str(niceness))
    except (OSError, ValueError, IndexError):
        return None
    return previous


def wait_ready(server: Server, context: ssl.SSLContext, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with {server.process.returncode}:\n"
                + server.log.read_text(errors="replace")[-2000:]
            )
        try:
            with (
                socket.create_connection(("127.0.0.1", server.port), timeout=2) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if tls.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{server.name} did not become ready in {timeout:.0f}s")


def stop_server(server: Server) -> None:
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


class Meters:
    """CPU counters read around a phase (``/proc/PID/task/*/schedstat`` and rusage)."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def _read(self) -> tuple[float, float, float, float, float, float]:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (
            time.perf_counter(),
            *schedstat(self.server.process.pid),
            *schedstat("self"),
            children.ru_utime + children.ru_stime,  # wrk, when it is the generator
        )

    def __enter__(self) -> Meters:
        self.before = self._read()
        return self

    def __exit__(self, *_: object) -> None:
        after = self._read()
        (
            self.wall,
            self.server_cpu,
            self.server_wait,
            self.client_cpu,
            self.client_wait,
            self.children_cpu,
        ) = (b - a for a, b in zip(self.before, after, strict=True))

    def report(self, completed: int, *, generator_cpu: float | None = None) -> dict[str, Any]:
        """CPU figures for a phase that completed ``completed`` reviews."""
        wall = max(self.wall, 1e-9)
        client = self.client_cpu if generator_cpu is None else generator_cpu
        return {
            "server_cpu_percent": round(100 * self.server_cpu / wall, 1),
            "server_cpu_us_per_review": (
                round(1e6 * self.server_cpu / completed, 1) if completed else None
            ),
            # Runnable but waiting while another process had the core: other work on the
            # machine took this share of the phase from the server (or the generator).
            "server_wait_percent": round(100 * self.server_wait / wall, 1),
            "generator_cpu_percent": round(100 * client / wall, 1),
            "generator_wait_percent": round(100 * self.client_wait / wall, 1),
            "generator_bound": client / wall > 0.9,
        }
