"""Benchmark ``torchgate webhook`` against a bare aiohttp TLS endpoint and a naive webhook.

Why this shape: the apiserver calls an admission webhook on the request path of every PyTorchJob
create, over TLS on keep-alive connections, and gives up after ``timeoutSeconds``. What matters
is therefore the latency of one review at the rates a busy cluster produces, and how much of a core
a review costs. Three servers are measured in the same run, each its own process pinned to the same
core, with the same certificate and the same aiohttp setup:

* ``bare``: an aiohttp TLS endpoint that reads the body and returns a fixed, pre-serialised
  AdmissionReview: the floor (TLS + HTTP + aiohttp).
* ``naive``: the textbook handler: ``await request.json()``, ``default_job`` on a deep copy,
  ``jsonpatch.make_patch`` of input and copy, ``web.json_response``; torchgate's validation.
* ``torchgate``: the real ``torchgate webhook`` command, started with
  ``TORCHGATE_SERVER_TIMING=1`` so each review response carries ``X-Torchgate-Server-Time``.

Every server adds ``X-Torchgate-Server-Time: <seconds> cpu=<seconds>`` (wall and CPU time from the
handler's start to the serialised answer), which gives exact server-side percentiles; the
Prometheus histogram's buckets are too coarse for a p99 in microseconds.

The load generator runs in this process on the other core. It is not aiohttp: it drives
non-blocking ``ssl`` sockets from an ``epoll`` loop with pre-serialised requests, which costs
about as much CPU per request as ``wrk`` (the loopback TCP stack dominates both), so one core can
offer more load than one server core can answer. Each phase reports the generator's CPU use;
a phase where it is near 100 % is flagged ``generator_bound``. ``--wrk`` repeats the
max-throughput phase with ``wrk`` (when it is on ``PATH``) as a cross-check.

Phases, per route (``/mutate``, ``/validate``):

1. Open loop at fixed rates (arrivals on a fixed schedule, never waiting for answers; a request that
   finds every connection busy waits in the generator and its latency counts from when it was
   due). A server "sustains" a rate when it answers every request correctly, achieves at least 95 %
   of the offered rate, and keeps client-side p99 under ``--slo-ms``. A failed rate is run once
   more (``--retries``); the sweep stops at the first rate it fails twice.
2. Closed loop (every connection sends its next request as soon as the answer arrives) for the
   maximum throughput, in ``--repeat`` rounds of every server in turn. Ratios to bare are medians
   over rounds of the ratio to bare's run of the same round. Servers are also compared by CPU time
   per review (from ``/proc/PID/task/*/schedstat``): on a shared machine the wall-clock
   throughput drops when another process takes the server's core, the CPU cost per review does
   not. ``server_wait_percent`` (schedstat run-queue wait) says how much that happened.

Run ``python benchmarks/webhook_bench.py --help``; see ``benchmarks/README.md``. The code lives in
the ``webhookbench`` package beside this file, one concern per module.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The package beside this file: its folder is sys.path[0] when this runs as a script, not when
# it is loaded some other way.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from webhookbench.cli import main

if __name__ == "__main__":
    sys.exit(main())
