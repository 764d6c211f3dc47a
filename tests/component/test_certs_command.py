"""``torchgate certs`` end to end on files, and the material proven over a real TLS handshake."""

from __future__ import annotations

import asyncio
import base64
import copy
import os
import signal
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography import x509

from torchgate.certs.authority import Material, RotationPolicy, plan_rotation, service_dns_names
from torchgate.certs.command import SyncOptions, sync
from torchgate.certs.store import (
    CertsError,
    Forbidden,
    MissingWebhookConfiguration,
    SecretRef,
    material_entries,
)
from torchgate.cli import main

REPOSITORY = Path(__file__).resolve().parents[2]
FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")
BASE_ARGUMENTS = ("certs", "--ip", "127.0.0.1", "--service", "s", "--namespace", "n")


def run_certs(out_dir: Path, *extra: str) -> int:
    return main([*BASE_ARGUMENTS, "--out-dir", str(out_dir), *extra])


def exit_code(argv: list[str]) -> int:
    """The exit code, whether argparse exits or ``run`` returns."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else -1


def snapshot(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    """Content, inode and modification time of each file: any rewrite changes one of them."""
    result = {}
    for name in FILES:
        info = (directory / name).stat()
        result[name] = ((directory / name).read_bytes(), info.st_ino, info.st_mtime_ns)
    return result


def assert_one_line_without_traceback(text: str) -> None:
    assert len(text.strip().splitlines()) == 1, text
    assert "Traceback" not in text


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    return tmp_path / "certs"


@pytest.fixture(scope="module")
def issued(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory the command has filled once."""
    directory = tmp_path_factory.mktemp("issued")
    assert run_certs(directory) == 0
    return directory


@pytest.fixture(scope="module")
def issued_elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another run, so another CA."""
    directory = tmp_path_factory.mktemp("elsewhere")
    assert run_certs(directory) == 0
    return directory


class TestFiles:
    def test_writes_the_four_files_with_keys_readable_by_the_owner_only(
        self, out_dir: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert run_certs(out_dir) == 0
        for name in FILES:
            assert (out_dir / name).stat().st_size > 0
        for key in ("ca.key", "tls.key"):
            assert stat.S_IMODE((out_dir / key).stat().st_mode) == 0o600
        output = capsys.readouterr()
        assert_one_line_without_traceback(output.err)
        for key in ("ca.key", "tls.key"):
            key_body = (out_dir / key).read_text().splitlines()[1]
            assert key_body not in output.out + output.err
        assert "PRIVATE KEY" not in output.out + output.err

    def test_leaves_no_temporary_files_behind(self, out_dir: Path) -> None:
        assert run_certs(out_dir) == 0
        assert sorted(p.name for p in out_dir.iterdir()) == sorted(FILES)

    def test_rerun_with_valid_material_changes_nothing(
        self, out_dir: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert run_certs(out_dir) == 0
        before = snapshot(out_dir)
        capsys.readouterr()
        assert run_certs(out_dir) == 0
        assert snapshot(out_dir) == before
        assert_one_line_without_traceback(capsys.readouterr().err)

    def test_force_renews_the_serving_certificate_and_keeps_the_ca(self, out_dir: Path) -> None:
        assert run_certs(out_dir) == 0
        before = snapshot(out_dir)
        assert run_certs(out_dir, "--force") == 0
        after = snapshot(out_dir)
        assert after["tls.crt"][0] != before["tls.crt"][0]
        assert after["tls.key"][0] != before["tls.key"][0]
        assert after["ca.crt"] == before["ca.crt"]
        assert after["ca.key"] == before["ca.key"]

    def test_a_loose_key_file_mode_is_tightened(self, out_dir: Path) -> None:
        assert run_certs(out_dir) == 0
        (out_dir / "tls.key").chmod(0o644)
        assert run_certs(out_dir) == 0
        assert stat.S_IMODE((out_dir / "tls.key").stat().st_mode) == 0o600

    def test_changed_names_reissue_the_certificate(self, out_dir: Path) -> None:
        assert run_certs(out_dir) == 0
        assert run_certs(out_dir, "--dns", "extra.example") == 0
        leaf = x509.load_pem_x509_certificate((out_dir / "tls.crt").read_bytes())
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "extra.example" in names.get_values_for_type(x509.DNSName)

    def test_custom_validity(self, out_dir: Path) -> None:
        assert run_certs(out_dir, "--valid-days", "10", "--renew-before-days", "2") == 0
        leaf = x509.load_pem_x509_certificate((out_dir / "tls.crt").read_bytes())
        lifetime = leaf.not_valid_after_utc - datetime.now(UTC)
        assert timedelta(days=9) < lifetime <= timedelta(days=10)


async def test_the_command_also_runs_when_called_inside_an_event_loop(out_dir: Path) -> None:
    assert run_certs(out_dir) == 0
    assert await asyncio.to_thread((out_dir / "tls.crt").exists)


class TestTls:
    @pytest.mark.parametrize("hostname", ["127.0.0.1", "s.n.svc", "s.n.svc.cluster.local"])
    async def test_a_client_trusting_only_ca_crt_accepts_the_server(
        self, issued: Path, hostname: str
    ) -> None:
        client = ssl.create_default_context(cafile=str(issued / "ca.crt"))
        assert await exchange(issued, client, hostname) == b"hello\n"

    async def test_a_name_not_in_the_certificate_is_rejected(self, issued: Path) -> None:
        client = ssl.create_default_context(cafile=str(issued / "ca.crt"))
        with pytest.raises(ssl.SSLCertVerificationError):
            await exchange(issued, client, "other.n.svc")

    async def test_a_client_trusting_another_ca_rejects_the_server(
        self, issued: Path, issued_elsewhere: Path
    ) -> None:
        client = ssl.create_default_context(cafile=str(issued_elsewhere / "ca.crt"))
        with pytest.raises(ssl.SSLCertVerificationError):
            await exchange(issued, client, "s.n.svc")


async def exchange(certs: Path, client: ssl.SSLContext, hostname: str) -> bytes:
    """Serve TLS with ``certs`` on 127.0.0.1 and read one line as a client of ``hostname``."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(certs / "tls.crt", certs / "tls.key")

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname=hostname), 10
        )
        try:
            return await asyncio.wait_for(reader.readline(), 10)
        finally:
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), 10)
    finally:
        server.close()
        await server.wait_closed()


class TestUsage:
    @pytest.mark.parametrize(
        "argv",
        [
            ["certs", "--ip", "not-an-ip", "--out-dir", "x"],
            ["certs", "--dns", "bad_name", "--out-dir", "x"],
            ["certs", "--ip", "127.0.0.1", "--secret", "no-slash"],
            ["certs", "--ip", "127.0.0.1", "--secret", "Bad/name"],
            ["certs", "--ip", "127.0.0.1", "--out-dir", "x", "--valid-days", "0"],
            ["certs", "--ip", "127.0.0.1", "--out-dir", "x", "--interval", "-1", "--watch"],
            ["certs", "--ip", "127.0.0.1", "--out-dir", "x", "--no-such-flag"],
            ["certs", "--service", "s", "--out-dir", "x"],
            ["certs", "--namespace", "n", "--out-dir", "x"],
            ["certs", "--out-dir", "x"],
            ["certs", "--ip", "127.0.0.1"],
            ["certs", "--ip", "127.0.0.1", "--out-dir", "x", "--valid-days", "30"],
            ["certs", "--ip", "127.0.0.1", "--out-dir", "x", "--renew-before-days", "400"],
            ["certs", "--ip", "127.0.0.1", "--out-dir", "x", "--interval", "5"],
        ],
        ids=[
            "bad-ip",
            "bad-dns",
            "secret-without-namespace",
            "secret-bad-namespace",
            "zero-days",
            "negative-interval",
            "unknown-flag",
            "service-without-namespace",
            "namespace-without-service",
            "no-names",
            "nowhere-to-store",
            "renew-window-not-inside-validity",
            "renew-window-not-inside-ca-window",
            "interval-without-watch",
        ],
    )
    def test_bad_flags_exit_2_and_write_nothing(
        self, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        assert exit_code(argv) == 2
        assert not (tmp_path / "x").exists()


class TestFailures:
    def test_an_unwritable_out_dir_exits_1_with_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory")
        assert run_certs(blocker / "certs") == 1
        output = capsys.readouterr()
        assert_one_line_without_traceback(output.err)
        assert str(blocker) in output.err

    def test_an_unreadable_file_exits_1_with_one_line(
        self, out_dir: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        (out_dir / "tls.key").mkdir(parents=True)
        assert run_certs(out_dir) == 1
        assert_one_line_without_traceback(capsys.readouterr().err)

    def test_a_missing_kubeconfig_exits_1_with_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        argv = [*BASE_ARGUMENTS, "--secret", "n/webhook-tls", "--kubeconfig", str(tmp_path / "no")]
        assert main(argv) == 1
        assert_one_line_without_traceback(capsys.readouterr().err)

    def test_an_unreachable_apiserver_exits_1_with_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9', "
            "insecure-skip-tls-verify: true}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        )
        argv = [*BASE_ARGUMENTS, "--webhook-config", "torchgate", "--kubeconfig", str(kubeconfig)]
        assert main([*argv, "--out-dir", str(tmp_path / "out")]) == 1
        assert_one_line_without_traceback(capsys.readouterr().err)
        assert not (tmp_path / "out").exists()


class TestSync:
    """``sync`` with a fixed clock: years of rotation in a directory."""

    @staticmethod
    def options(out_dir: Path, clock: Callable[[], datetime]) -> SyncOptions:
        return SyncOptions(dns_names=service_dns_names("s", "n"), out_dir=out_dir, clock=clock)

    async def test_ca_rollover_keeps_the_old_ca_trusted_until_it_expires(
        self, out_dir: Path
    ) -> None:
        start = datetime(2026, 1, 1, tzinfo=UTC)
        first = await sync(self.options(out_dir, lambda: start))
        assert first.ca_rotated
        old_leaf = x509.load_pem_x509_certificate((out_dir / "tls.crt").read_bytes())

        rollover = start + timedelta(days=365 * 9 + 1)
        second = await sync(self.options(out_dir, lambda: rollover))
        assert second.ca_rotated
        assert second.files_written
        new_ca, old_ca = x509.load_pem_x509_certificates((out_dir / "ca.crt").read_bytes())
        x509.load_pem_x509_certificate(
            (out_dir / "tls.crt").read_bytes()
        ).verify_directly_issued_by(new_ca)
        old_leaf.verify_directly_issued_by(old_ca)
        assert second.ca_bundle == (out_dir / "ca.crt").read_bytes()

        after_expiry = start + timedelta(days=365 * 10 + 1)
        third = await sync(self.options(out_dir, lambda: after_expiry))
        assert not third.ca_rotated
        assert x509.load_pem_x509_certificates((out_dir / "ca.crt").read_bytes()) == [new_ca]

    async def test_an_unchanged_sync_reports_no_change(self, out_dir: Path) -> None:
        now = datetime(2026, 1, 1, tzinfo=UTC)
        await sync(self.options(out_dir, lambda: now))
        again = await sync(self.options(out_dir, lambda: now + timedelta(days=1)))
        assert not again.changed
        assert again.renew_at == now + timedelta(days=365 - 30)

    async def test_a_renewal_honours_the_policy(self, out_dir: Path) -> None:
        now = datetime(2026, 1, 1, tzinfo=UTC)
        policy = RotationPolicy(
            serving_valid_for=timedelta(days=10), serving_renew_before=timedelta(days=3)
        )
        options = SyncOptions(ips=(), dns_names=("a.example",), out_dir=out_dir, policy=policy)
        await sync(SyncOptions(**{**options.__dict__, "clock": lambda: now}))
        renewed = await sync(
            SyncOptions(**{**options.__dict__, "clock": lambda: now + timedelta(days=7)})
        )
        assert renewed.serving_issued
        assert not renewed.ca_rotated

    def test_options_need_a_name_and_a_destination(self, out_dir: Path) -> None:
        with pytest.raises(ValueError, match="DNS name or IP"):
            SyncOptions(out_dir=out_dir)
        with pytest.raises(ValueError, match="nowhere"):
            SyncOptions(dns_names=("a",))

    def test_a_failing_cluster_step_writes_nothing(self, out_dir: Path, tmp_path: Path) -> None:
        options = SyncOptions(
            dns_names=("a",),
            out_dir=out_dir,
            webhook_configurations=("torchgate",),
            kubeconfig=str(tmp_path / "missing"),
        )
        with pytest.raises(CertsError):
            asyncio.run(sync(options))
        assert not out_dir.exists()


class FakeApiserver:
    """Just enough of the apiserver for Secrets and webhook configurations; kept deliberately tiny.

    Patches must be strategic merge patches (what the real apiserver merges by webhook name);
    a ``metadata.resourceVersion`` in a patch is a precondition, as on the real apiserver.
    """

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.forbidden: set[str] = set()
        self.racing_writer: Callable[[], dict[str, Any]] | None = None
        self.version = 0
        self.app = web.Application()
        self.app.router.add_route("*", "/api/v1/namespaces/{namespace}/secrets", self.secrets)
        self.app.router.add_route("*", "/api/v1/namespaces/{namespace}/secrets/{name}", self.one)
        self.app.router.add_route(
            "*", "/apis/admissionregistration.k8s.io/v1/{plural}/{name}", self.one
        )

    def store(self, path: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.objects[path] = obj

    def webhook_configuration(self, plural: str, name: str, webhooks: list[str]) -> None:
        hooks = [
            {
                "name": webhook,
                "clientConfig": {"url": "https://127.0.0.1:9443/x"},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
            }
            for webhook in webhooks
        ]
        self.store(
            f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}",
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "metadata": {"name": name},
                "webhooks": hooks,
            },
        )

    def ca_bundles(self, plural: str, name: str) -> list[bytes]:
        obj = self.objects[f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}"]
        return [base64.b64decode(w["clientConfig"].get("caBundle", "")) for w in obj["webhooks"]]

    def secret_entries(self, namespace: str, name: str) -> dict[str, bytes]:
        data = self.objects[f"/api/v1/namespaces/{namespace}/secrets/{name}"]["data"]
        return {key: base64.b64decode(value) for key, value in data.items()}

    @staticmethod
    def status(code: int, reason: str) -> web.Response:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": reason,
            "reason": reason,
            "code": code,
        }
        return web.json_response(body, status=code)

    async def secrets(self, request: web.Request) -> web.Response:
        if "secrets" in self.forbidden:
            return self.status(403, "Forbidden")
        body = await request.json()
        path = f"{request.path}/{body['metadata']['name']}"
        if self.racing_writer is not None:
            self.store(path, self.racing_writer())
            self.racing_writer = None
        if path in self.objects:
            return self.status(409, "AlreadyExists")
        self.store(path, body)
        return web.json_response(self.objects[path], status=201)

    async def one(self, request: web.Request) -> web.Response:
        resource = request.match_info.get("plural", "secrets")
        if resource in self.forbidden:
            return self.status(403, "Forbidden")
        current = self.objects.get(request.path)
        if current is None:
            return self.status(404, "NotFound")
        if request.method == "GET":
            return web.json_response(current)
        if request.content_type != "application/strategic-merge-patch+json":
            return self.status(415, "UnsupportedMediaType")
        patch = await request.json()
        expected = patch.get("metadata", {}).get("resourceVersion")
        if expected is not None and expected != current["metadata"]["resourceVersion"]:
            return self.status(409, "Conflict")
        updated = copy.deepcopy(current)
        updated.setdefault("data", {}).update(patch.get("data", {}))
        for hook in patch.get("webhooks", []):
            target = next(w for w in updated["webhooks"] if w["name"] == hook["name"])
            target["clientConfig"].update(hook["clientConfig"])
        self.store(request.path, updated)
        return web.json_response(updated)


@pytest.fixture
async def apiserver(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]], tmp_path: Path
) -> tuple[FakeApiserver, str]:
    """The fake and a kubeconfig pointing at it."""
    fake = FakeApiserver()
    server = await aiohttp_server(fake.app)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{server.port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return fake, str(kubeconfig)


class TestCluster:
    """The Secret and caBundle paths of ``sync`` against a fake apiserver (e2e uses a real one)."""

    @staticmethod
    def options(kubeconfig: str, **overrides: Any) -> SyncOptions:
        settings: dict[str, Any] = {
            "dns_names": service_dns_names("s", "n"),
            "secret": SecretRef("n", "webhook-tls"),
            "kubeconfig": kubeconfig,
            "webhook_configurations": ("torchgate",),
        }
        return SyncOptions(**{**settings, **overrides})

    async def test_first_sync_stores_a_tls_secret_and_patches_every_webhook(
        self, apiserver: tuple[FakeApiserver, str]
    ) -> None:
        fake, kubeconfig = apiserver
        fake.webhook_configuration("mutatingwebhookconfigurations", "torchgate", ["a", "b"])
        fake.webhook_configuration("validatingwebhookconfigurations", "torchgate", ["v"])
        result = await sync(self.options(kubeconfig))
        entries = fake.secret_entries("n", "webhook-tls")
        assert sorted(entries) == sorted(FILES)
        assert fake.objects["/api/v1/namespaces/n/secrets/webhook-tls"]["type"] == (
            "kubernetes.io/tls"
        )
        assert result.ca_bundle == entries["ca.crt"]
        assert (
            fake.ca_bundles("mutatingwebhookconfigurations", "torchgate") == [entries["ca.crt"]] * 2
        )
        assert fake.ca_bundles("validatingwebhookconfigurations", "torchgate") == [
            entries["ca.crt"]
        ]

    async def test_second_sync_writes_nothing(self, apiserver: tuple[FakeApiserver, str]) -> None:
        fake, kubeconfig = apiserver
        fake.webhook_configuration("mutatingwebhookconfigurations", "torchgate", ["a"])
        await sync(self.options(kubeconfig))
        before = copy.deepcopy(fake.objects)
        again = await sync(self.options(kubeconfig))
        assert not again.changed
        assert fake.objects == before

    async def test_a_reset_ca_bundle_is_restored(
        self, apiserver: tuple[FakeApiserver, str]
    ) -> None:
        fake, kubeconfig = apiserver
        fake.webhook_configuration("validatingwebhookconfigurations", "torchgate", ["v"])
        await sync(self.options(kubeconfig))
        fake.webhook_configuration("validatingwebhookconfigurations", "torchgate", ["v"])
        await sync(self.options(kubeconfig))
        assert fake.ca_bundles("validatingwebhookconfigurations", "torchgate") == [
            fake.secret_entries("n", "webhook-tls")["ca.crt"]
        ]

    async def test_a_missing_configuration_fails_before_anything_is_written(
        self, apiserver: tuple[FakeApiserver, str], out_dir: Path
    ) -> None:
        fake, kubeconfig = apiserver
        with pytest.raises(MissingWebhookConfiguration):
            await sync(self.options(kubeconfig, out_dir=out_dir))
        assert fake.objects == {}
        assert not await asyncio.to_thread(out_dir.exists)

    async def test_a_missing_configuration_can_be_allowed(
        self, apiserver: tuple[FakeApiserver, str]
    ) -> None:
        fake, kubeconfig = apiserver
        result = await sync(self.options(kubeconfig, allow_missing_webhooks=True))
        assert result.missing_webhook_configurations == ("torchgate",)
        assert fake.secret_entries("n", "webhook-tls")["ca.crt"] == result.ca_bundle

    @pytest.mark.parametrize("resource", ["secrets", "mutatingwebhookconfigurations"])
    async def test_a_missing_permission_is_reported_as_forbidden(
        self, apiserver: tuple[FakeApiserver, str], resource: str
    ) -> None:
        fake, kubeconfig = apiserver
        fake.webhook_configuration("mutatingwebhookconfigurations", "torchgate", ["a"])
        fake.forbidden.add(resource)
        with pytest.raises(Forbidden):
            await sync(self.options(kubeconfig))

    async def test_a_concurrent_writer_wins_and_both_converge_on_its_material(
        self, apiserver: tuple[FakeApiserver, str]
    ) -> None:
        fake, kubeconfig = apiserver
        fake.webhook_configuration("mutatingwebhookconfigurations", "torchgate", ["a"])
        winner = plan_rotation(
            Material(), dns_names=service_dns_names("s", "n"), ips=[], now=datetime.now(UTC)
        ).material
        fake.racing_writer = lambda: {
            "metadata": {"name": "webhook-tls", "namespace": "n"},
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in material_entries(winner).items()},
        }
        result = await sync(self.options(kubeconfig))
        assert fake.secret_entries("n", "webhook-tls") == material_entries(winner)
        assert result.ca_bundle == winner.ca_cert
        assert fake.ca_bundles("mutatingwebhookconfigurations", "torchgate") == [winner.ca_cert]


def test_watch_renews_what_disappears_and_stops_on_sigterm(out_dir: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "torchgate",
        *BASE_ARGUMENTS,
        "--out-dir",
        str(out_dir),
        "--watch",
        "--interval",
        "0.2",
    ]
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    with subprocess.Popen(
        command, cwd=REPOSITORY, env=environment, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            wait_for(lambda: all((out_dir / name).exists() for name in FILES))
            first_ca = (out_dir / "ca.crt").read_bytes()
            (out_dir / "tls.crt").unlink()
            wait_for(lambda: (out_dir / "tls.crt").exists())
            assert (out_dir / "ca.crt").read_bytes() == first_ca
            process.send_signal(signal.SIGTERM)
            _, errors = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, errors
    assert "Traceback" not in errors
    leaf = x509.load_pem_x509_certificate((out_dir / "tls.crt").read_bytes())
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(first_ca))


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
