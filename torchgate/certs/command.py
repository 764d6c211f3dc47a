"""``torchgate certs``: keep the webhook's serving certificate valid and trusted by the apiserver.

The same code runs once (at install time, or locally for a test control plane) and continuously
beside the webhook in its pod (``--watch``), so there is a single implementation of "one sync":

1. read what is stored: the Secret if ``--secret`` is given (it is the shared source of truth,
   holding ``ca.key``), else the files in ``--out-dir``;
2. plan with :func:`certs.authority.plan_rotation` (pure; decides renewals and CA rollover);
3. publish ``ca.crt`` (the signing CA plus older CAs still trusted) as ``caBundle`` of every
   webhook in the named configurations, *before* anything else changes, so the apiserver already
   trusts a new CA when a server starts presenting a certificate signed by it;
4. store the material: the Secret (conditional on the ``resourceVersion`` read in step 1), then
   the files in ``--out-dir`` (a mirror when both are given).

A 409 Conflict anywhere restarts the sync from step 1, so concurrent runs (two webhook replicas
with ``--watch``) converge on whichever write won. Re-running with valid material writes nothing.
``--watch`` repeats the sync every ``--interval`` seconds (sooner when a renewal falls due), which
also restores a ``caBundle`` that someone reset, and stops cleanly on SIGTERM or SIGINT, from the
process's first moment (:mod:`torchgate.stopsignals`, caught by the CLI before it imports this
module): one that comes while the modules load or a sync runs (its kubeconfig's exec credential
plugin, an apiserver slow to answer) ends it at once with exit code 0. A sync cut short that way
is one a crash could cut short too: the caBundle is published before the material changes, and
the next sync starts from what is stored. Without ``--watch`` the command is one-shot and the
signals end it as they would any command.

Exit codes: 0 success (or a clean stop), 1 failure (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import ipaddress
import math
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeVar

from torchgate import stopsignals
from torchgate.certs.authority import (
    DEFAULT_CA_RENEW_BEFORE,
    DEFAULT_SERVING_RENEW_BEFORE,
    DEFAULT_SERVING_VALID_FOR,
    CertificateError,
    IPAddress,
    Material,
    RotationPolicy,
    parse_ip,
    plan_rotation,
    service_dns_names,
    validate_dns_name,
)
from torchgate.certs.store import (
    CertsError,
    Conflict,
    MissingWebhookConfiguration,
    SecretRef,
    StoredSecret,
    WebhookConfiguration,
    kubernetes_client,
    patch_ca_bundle,
    read_directory,
    read_secret,
    read_webhook_configurations,
    write_directory,
    write_secret,
)
from torchgate.kube.client import KubeApi
from torchgate.pytorchjob.names import dns1035_errors, is_dns1123_label, is_dns1123_subdomain
from torchgate.stopsignals import Stopped, unless_stopped

T = TypeVar("T")

CONFLICT_ATTEMPTS: Final = 5
DEFAULT_INTERVAL_SECONDS: Final = 300.0
FIRST_RETRY_SECONDS: Final = 5.0
MINIMUM_CHECK_SECONDS: Final = 1.0
_PREFIX: Final = "torchgate certs: "


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class SyncOptions:
    """What one sync does; the programmatic form of the command-line flags.

    Attributes:
        dns_names: DNS subjectAltNames (see :func:`certs.authority.service_dns_names`).
        ips: IP subjectAltNames.
        out_dir: directory for ``tls.crt``, ``tls.key``, ``ca.crt``, ``ca.key``.
        secret: Secret that holds the material (source of truth when given).
        kubeconfig: kubeconfig path; None means in-cluster config, then ``$KUBECONFIG``.
        webhook_configurations: names whose mutating and/or validating configuration gets the
            CA bundle.
        allow_missing_webhooks: a name with neither configuration is not an error.
        policy: lifetimes and renewal windows.
        force: issue a new serving certificate even if the current one is fine.
        clock: the current time (timezone-aware); tests pass a fixed one.

    Raises:
        ValueError: when no name or no destination is given.
    """

    dns_names: tuple[str, ...] = ()
    ips: tuple[IPAddress, ...] = ()
    out_dir: Path | None = None
    secret: SecretRef | None = None
    kubeconfig: str | None = None
    webhook_configurations: tuple[str, ...] = ()
    allow_missing_webhooks: bool = False
    policy: RotationPolicy = field(default_factory=RotationPolicy)
    force: bool = False
    clock: Callable[[], datetime] = _utc_now

    def __post_init__(self) -> None:
        if not self.dns_names and not self.ips:
            raise ValueError("the serving certificate needs at least one DNS name or IP address")
        if self.out_dir is None and self.secret is None:
            raise ValueError("nowhere to keep the material: give an output directory or a Secret")

    @property
    def needs_cluster(self) -> bool:
        """Whether a sync talks to the apiserver."""
        return self.secret is not None or bool(self.webhook_configurations)


@dataclass(frozen=True)
class SyncResult:
    """What one sync found and did. Holds no private key.

    After conflicts, it describes the attempt that succeeded (earlier attempts may have patched
    caBundle already; the successful one then found it current).

    Attributes:
        changes: why new material was made, one phrase each (empty when none was).
        ca_rotated: a new signing CA was made.
        serving_issued: a new serving certificate was issued.
        secret_written: the Secret was created or updated.
        files_written: names of the files written in ``out_dir``.
        patched_webhook_configurations: ``"<Kind> <name>"`` of each configuration patched.
        missing_webhook_configurations: names found neither as mutating nor as validating.
        ca_bundle: the PEM bundle that is (now) the caBundle.
        serving_not_after: expiry of the stored serving certificate.
        renew_at: when the clock alone will make the next sync renew something.
    """

    changes: tuple[str, ...]
    ca_rotated: bool
    serving_issued: bool
    secret_written: bool
    files_written: tuple[str, ...]
    patched_webhook_configurations: tuple[str, ...]
    missing_webhook_configurations: tuple[str, ...]
    ca_bundle: bytes
    serving_not_after: datetime
    renew_at: datetime

    @property
    def changed(self) -> bool:
        """Whether anything was written anywhere."""
        return bool(
            self.secret_written or self.files_written or self.patched_webhook_configurations
        )

    def summary(self) -> str:
        """One line for a human: what changed, or that nothing did."""
        validity = (
            f"serving certificate valid until {_timestamp(self.serving_not_after)}, "
            f"next renewal {_timestamp(self.renew_at)}"
        )
        missing = (
            f"; not installed (skipped): {', '.join(self.missing_webhook_configurations)}"
            if self.missing_webhook_configurations
            else ""
        )
        if not self.changed:
            return f"nothing to do: {validity}{missing}"
        done = list(self.changes)
        if self.patched_webhook_configurations:
            done.append(f"patched caBundle of {', '.join(self.patched_webhook_configurations)}")
        if self.secret_written:
            done.append("wrote the Secret")
        if self.files_written:
            done.append(f"wrote {', '.join(self.files_written)}")
        return f"{'; '.join(done)}; {validity}{missing}"


async def sync(options: SyncOptions) -> SyncResult:
    """Make the stored material valid and the webhook configurations trust it; see module doc.

    Safe to call repeatedly and concurrently (from other processes too): with valid material it
    writes nothing.

    Raises:
        MissingWebhookConfiguration: a named configuration does not exist and
            ``allow_missing_webhooks`` is false (checked before anything is written).
        Forbidden: an RBAC permission is missing (the message names it).
        CertsError: any other failure, including conflicts that persisted after retries.
    """
    async with contextlib.AsyncExitStack() as stack:
        api = None
        if options.needs_cluster:
            api = await stack.enter_async_context(kubernetes_client(options.kubeconfig))
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                return await _sync_once(options, api)
            except Conflict as conflict:
                if attempt == CONFLICT_ATTEMPTS:
                    raise Conflict(
                        f"gave up after {CONFLICT_ATTEMPTS} conflicting writes: {conflict}"
                    ) from None
                await asyncio.sleep(0.1 * attempt)
            except CertificateError as error:
                raise CertsError(str(error)) from None
    raise AssertionError("unreachable: the loop returns or raises")


async def _sync_once(options: SyncOptions, api: KubeApi | None) -> SyncResult:
    """One sync: steps 1 to 4 of the module docstring, one function each."""
    stored_secret, stored = await _read_stored(options, api)
    plan = plan_rotation(
        stored,
        dns_names=options.dns_names,
        ips=options.ips,
        now=options.clock(),
        policy=options.policy,
        force=options.force,
    )
    bundle = plan.material.ca_cert
    patched, missing = await _publish_ca_bundle(options, api, bundle)
    secret_written, files_written = await _store(options, api, stored_secret, stored, plan.material)
    return SyncResult(
        changes=plan.changes,
        ca_rotated=plan.ca_rotated,
        serving_issued=plan.serving_issued,
        secret_written=secret_written,
        files_written=files_written,
        patched_webhook_configurations=patched,
        missing_webhook_configurations=missing,
        ca_bundle=bundle,
        serving_not_after=plan.serving_not_after,
        renew_at=plan.renew_at,
    )


async def _read_stored(
    options: SyncOptions, api: KubeApi | None
) -> tuple[StoredSecret | None, Material]:
    """Step 1: the Secret when one is named, else the files in ``--out-dir``, else nothing."""
    if options.secret is not None and api is not None:
        stored_secret = await read_secret(api, options.secret)
        return stored_secret, stored_secret.material
    if options.out_dir is not None:
        return None, read_directory(options.out_dir)
    return None, Material()


async def _publish_ca_bundle(
    options: SyncOptions, api: KubeApi | None, bundle: bytes
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Step 3: ``bundle`` as the caBundle of every named webhook; (patched, missing) names.

    A named configuration that is not installed fails the sync before anything is patched, unless
    ``allow_missing_webhooks``.
    """
    if api is None:
        return (), ()
    configurations: list[WebhookConfiguration] = []
    missing: list[str] = []
    for name in options.webhook_configurations:
        found = await read_webhook_configurations(api, name)
        configurations.extend(found)
        if not found:
            missing.append(name)
    if missing and not options.allow_missing_webhooks:
        raise MissingWebhookConfiguration(
            f"no MutatingWebhookConfiguration or ValidatingWebhookConfiguration named "
            f"{', '.join(missing)}; install the webhook manifests first, or pass "
            "--allow-missing-webhooks"
        )
    patched = [
        str(configuration)
        for configuration in configurations
        if await patch_ca_bundle(api, configuration, bundle)
    ]
    return tuple(patched), tuple(missing)


async def _store(
    options: SyncOptions,
    api: KubeApi | None,
    stored_secret: StoredSecret | None,
    stored: Material,
    material: Material,
) -> tuple[bool, tuple[str, ...]]:
    """Step 4: the Secret when it changed (conditional on the resourceVersion read), then the files.

    Returns whether the Secret was written, and the files written.
    """
    secret_written = False
    if (
        options.secret is not None
        and api is not None
        and stored_secret is not None
        and material != stored
    ):
        await write_secret(
            api, options.secret, material, resource_version=stored_secret.resource_version
        )
        secret_written = True
    files_written = (
        write_directory(options.out_dir, material) if options.out_dir is not None else ()
    )
    return secret_written, files_written


async def watch(
    options: SyncOptions,
    *,
    interval: float,
    stop: asyncio.Event,
    report: Callable[[str], None],
) -> None:
    """Sync every ``interval`` seconds (sooner when a renewal falls due) until ``stop`` is set.

    A sync in progress when ``stop`` is set is cancelled (module docstring). Failures are reported
    and retried with backoff (5 s doubling up to ``interval``) instead of ending the loop: the
    apiserver being away for a while must not stop renewals. ``force`` applies to the first
    successful sync only. ``report`` gets the first result, every change and
    every failure, one line each.
    """
    failures = 0
    reported = False
    while not stop.is_set():
        try:
            result = await unless_stopped(sync(options), stop)
        except Stopped:
            return
        except CertsError as error:
            failures += 1
            delay = min(interval, FIRST_RETRY_SECONDS * 2 ** min(failures - 1, 16))
            report(f"{error} (retrying in {delay:g}s)")
        else:
            failures = 0
            if result.changed or not reported:
                report(result.summary())
                reported = True
            delay = seconds_until_next_sync(result.renew_at, now=options.clock(), interval=interval)
            options = replace(options, force=False)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await stop.wait()


def seconds_until_next_sync(renew_at: datetime, *, now: datetime, interval: float) -> float:
    """``interval``, or less when a renewal falls due sooner (never under one second)."""
    until_renewal = (renew_at - now).total_seconds()
    return max(MINIMUM_CHECK_SECONDS, min(interval, until_renewal))


# ------------------------------------------------------------------------------ command line


class UsageError(Exception):
    """Flags that do not make sense together (exit code 2)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``torchgate certs``."""
    names = parser.add_argument_group("names in the serving certificate")
    names.add_argument(
        "--service",
        metavar="NAME",
        type=_service_name,
        help="Service of the webhook: adds NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local",
    )
    names.add_argument(
        "--namespace", metavar="NS", type=_namespace_name, help="namespace of --service"
    )
    names.add_argument(
        "--dns", metavar="NAME", action="append", type=_dns_name, default=[], help="(repeatable)"
    )
    names.add_argument(
        "--ip", metavar="ADDR", action="append", type=_ip_address, default=[], help="(repeatable)"
    )

    storage = parser.add_argument_group("where the material is kept (one or both)")
    storage.add_argument(
        "--out-dir", metavar="DIR", type=Path, help="write tls.crt, tls.key, ca.crt, ca.key here"
    )
    storage.add_argument(
        "--secret",
        metavar="NS/NAME",
        type=_secret_ref,
        help="keep them in this kubernetes.io/tls Secret (the source of truth when given)",
    )

    cluster = parser.add_argument_group("cluster")
    cluster.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="default: in-cluster config, then $KUBECONFIG, then ~/.kube/config",
    )
    cluster.add_argument(
        "--webhook-config",
        metavar="NAME",
        action="append",
        type=_object_name,
        default=[],
        help="patch caBundle of the mutating and/or validating configuration NAME (repeatable)",
    )
    cluster.add_argument(
        "--allow-missing-webhooks",
        action="store_true",
        help="do not fail when a --webhook-config is not installed yet",
    )

    rotation = parser.add_argument_group("rotation")
    rotation.add_argument(
        "--valid-days",
        metavar="DAYS",
        type=_positive_days,
        default=DEFAULT_SERVING_VALID_FOR.days,
        help="lifetime of the serving certificate (default: %(default)s)",
    )
    rotation.add_argument(
        "--renew-before-days",
        metavar="DAYS",
        type=_positive_days,
        default=DEFAULT_SERVING_RENEW_BEFORE.days,
        help="renew the serving certificate this long before it expires (default: %(default)s)",
    )
    rotation.add_argument(
        "--force", action="store_true", help="issue a new serving certificate now (keeps the CA)"
    )
    rotation.add_argument(
        "--watch", action="store_true", help="keep running, renew in time; stop on SIGTERM"
    )
    rotation.add_argument(
        "--interval",
        metavar="SECONDS",
        type=_positive_seconds,
        help=f"with --watch: how often to check (default: {DEFAULT_INTERVAL_SECONDS:g})",
    )


def options_from_arguments(args: argparse.Namespace) -> SyncOptions:
    """Turn parsed flags into :class:`SyncOptions`.

    Raises:
        UsageError: when flags contradict each other or are incomplete.
    """
    if (args.service is None) != (args.namespace is None):
        raise UsageError("--service and --namespace go together")
    dns_names: tuple[str, ...] = ()
    if args.service is not None:
        dns_names = service_dns_names(args.service, args.namespace)
    dns_names = tuple(dict.fromkeys((*dns_names, *args.dns)))
    ips = tuple(dict.fromkeys(args.ip))
    if not dns_names and not ips:
        raise UsageError("name the certificate: --service with --namespace, --dns or --ip")
    if args.out_dir is None and args.secret is None:
        raise UsageError("say where to keep the material: --out-dir and/or --secret")
    if args.interval is not None and not args.watch:
        raise UsageError("--interval only applies with --watch")
    if args.renew_before_days >= args.valid_days:
        raise UsageError("--renew-before-days must be less than --valid-days")
    if timedelta(days=args.renew_before_days) >= DEFAULT_CA_RENEW_BEFORE:
        raise UsageError(
            f"--renew-before-days must be less than {DEFAULT_CA_RENEW_BEFORE.days} "
            "(how long before its expiry the CA is replaced)"
        )
    try:
        policy = RotationPolicy(
            serving_valid_for=timedelta(days=args.valid_days),
            serving_renew_before=timedelta(days=args.renew_before_days),
        )
        return SyncOptions(
            dns_names=dns_names,
            ips=ips,
            out_dir=args.out_dir,
            secret=args.secret,
            kubeconfig=args.kubeconfig,
            webhook_configurations=tuple(dict.fromkeys(args.webhook_config)),
            allow_missing_webhooks=args.allow_missing_webhooks,
            policy=policy,
            force=args.force,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None


def run(args: argparse.Namespace) -> int:
    """Run ``torchgate certs``; returns 0 on success, 1 on failure, 2 on a usage error."""
    if not args.watch:
        stopsignals.PROCESS.release()  # a one-shot command: the signals end it as they would
    try:
        options = options_from_arguments(args)
    except UsageError as error:
        _report(f"error: {error} (see torchgate certs --help)")
        return 2
    try:
        if args.watch:
            interval = DEFAULT_INTERVAL_SECONDS if args.interval is None else args.interval
            if _event_loop_is_running():
                raise CertsError("--watch needs its own event loop and the main thread")
            stopsignals.PROCESS.run(
                lambda stop: watch(options, interval=interval, stop=stop, report=_report)
            )
            _report("stopped")
            return 0
        result = _run_to_completion(lambda: sync(options))
    except CertsError as error:
        _report(str(error))
        return 1
    except KeyboardInterrupt:
        _report("interrupted")
        return 130
    except Exception as error:  # the command-line boundary: one line, never a traceback
        _report(f"unexpected {type(error).__name__}: {' '.join(str(error).split())}")
        return 1
    _report(result.summary())
    return 0


def _event_loop_is_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _run_to_completion(make_coroutine: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run``, also when the caller (an async test, say) already runs an event loop."""
    if not _event_loop_is_running():
        return asyncio.run(make_coroutine())
    # asyncio.run refuses to nest; a worker thread gets a loop of its own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(lambda: asyncio.run(make_coroutine())).result()


def _report(message: str) -> None:
    print(f"{_PREFIX}{message}", file=sys.stderr, flush=True)


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


# Argument types: argparse turns ArgumentTypeError into a usage error (exit code 2).


def _dns_name(value: str) -> str:
    try:
        return validate_dns_name(value)
    except CertificateError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _ip_address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return parse_ip(value)
    except CertificateError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _service_name(value: str) -> str:
    if dns1035_errors(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid Service name")
    return value


def _namespace_name(value: str) -> str:
    if not is_dns1123_label(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid namespace name")
    return value


def _object_name(value: str) -> str:
    if not is_dns1123_subdomain(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid object name")
    return value


def _secret_ref(value: str) -> SecretRef:
    namespace, slash, name = value.partition("/")
    if not slash:
        raise argparse.ArgumentTypeError(f"{value!r} is not NAMESPACE/NAME")
    return SecretRef(namespace=_namespace_name(namespace), name=_object_name(name))


def _positive_days(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of days") from None
    if not 1 <= days <= 36500:
        raise argparse.ArgumentTypeError(f"{value!r} is not between 1 and 36500 days")
    return days


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of seconds")
    return seconds
