"""The baseline servers, run as ``webhook_bench.py _serve {bare|naive} ...``.

* ``bare`` reads the body and returns a fixed, pre-serialised AdmissionReview: the floor
  (TLS + HTTP + aiohttp).
* ``naive`` is the textbook handler: ``await request.json()``, ``default_job`` on a deep copy,
  ``jsonpatch.make_patch`` of input and copy, ``web.json_response``; torchgate's validation.

Both are served exactly as ``torchgate webhook`` serves its own app (``ReloadingTLS``,
``AppRunner(access_log=None)``, ``TCPSite(ssl_context=...)``) and add the header torchgate adds
with ``TORCHGATE_SERVER_TIMING=1``, so every server reports its handler time the same way.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from webhookbench import POLICY_FILE, SERVER_TIME_HEADER

BARE_RESPONSE = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "00000000-0000-0000-0000-000000000001", "allowed": True},
    },
    separators=(",", ":"),
).encode()


def _baseline_app(kind: str, policy_file: Path) -> Any:
    from aiohttp import web

    from torchgate.webhook.policysource import FilePolicies, PolicyCache

    headers_of = _timing_headers

    async def bare(request: web.Request) -> web.Response:
        started = time.perf_counter(), time.thread_time()
        await request.read()
        return web.Response(
            body=BARE_RESPONSE, content_type="application/json", headers=headers_of(started)
        )

    cache = PolicyCache()
    FilePolicies(cache, [policy_file]).load()

    async def naive_mutate(request: web.Request) -> web.Response:
        import jsonpatch

        from torchgate.pytorchjob.fieldpath import render_warnings
        from torchgate.webhook.defaulting import default_job
        from torchgate.webhook.review import respond

        started = time.perf_counter(), time.thread_time()
        review = await request.json()
        job = review["request"]["object"]
        policy = cache.policy_for(review["request"]["namespace"])
        defaulted = default_job(copy.deepcopy(job), policy)
        ops = jsonpatch.make_patch(job, defaulted.object).patch
        answer = respond(
            review,
            allowed=True,
            patch=ops,
            warnings=render_warnings(defaulted.warnings),
            errors=defaulted.errors,
            job=job,
        )
        return web.json_response(answer, headers=headers_of(started))

    async def naive_validate(request: web.Request) -> web.Response:
        from torchgate.webhook.review import validate

        started = time.perf_counter(), time.thread_time()
        review = await request.json()
        answer = validate(review, cache.policy_for)
        return web.json_response(answer, headers=headers_of(started))

    app = web.Application(client_max_size=7 * 1024 * 1024 + 1)
    if kind == "bare":
        app.router.add_post("/mutate", bare)
        app.router.add_post("/validate", bare)
    else:
        app.router.add_post("/mutate", naive_mutate)
        app.router.add_post("/validate", naive_validate)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app.router.add_get("/healthz", healthz)
    return app


def _timing_headers(started: tuple[float, float]) -> dict[str, str]:
    """The header torchgate adds with ``TORCHGATE_SERVER_TIMING=1``: wall and CPU seconds."""
    wall = time.perf_counter() - started[0]
    cpu = time.thread_time() - started[1]
    return {SERVER_TIME_HEADER: f"{wall:.7f} cpu={cpu:.7f}"}


def serve_baseline(argv: Sequence[str]) -> int:
    """Serve the ``bare`` or ``naive`` app exactly as ``torchgate webhook`` serves its own."""
    import asyncio
    import signal

    from aiohttp import web

    from torchgate.serving import ReloadingTLS

    parser = argparse.ArgumentParser(prog="webhook_bench.py _serve")
    parser.add_argument("kind", choices=["bare", "naive"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert-file", type=Path, required=True)
    parser.add_argument("--tls-private-key-file", type=Path, required=True)
    parser.add_argument("--policy", type=Path, default=POLICY_FILE)
    args = parser.parse_args(argv)
    tls = ReloadingTLS(args.tls_cert_file, args.tls_private_key_file)

    async def serve() -> None:
        runner = web.AppRunner(
            _baseline_app(args.kind, args.policy), handle_signals=False, access_log=None
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, ssl_context=tls.context)
        await site.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await runner.cleanup()

    asyncio.run(serve())
    return 0
