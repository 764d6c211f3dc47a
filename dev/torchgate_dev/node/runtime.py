"""Start and tear down the local real node: registry, containerd, CoreDNS and a kubelet.

Why these processes and not a node image: the build machines have no Docker engine, but Debian's
containerd 1.6 and runc run containers here as root, Debian's CNI plugins wire pods to a bridge,
and the kubelet and CoreDNS build from their Go modules like the control plane. The control plane
(``torchgate_dev.controlplane.cluster``) starts them as ordinary managed processes, so its state
file, process groups and orphan sweep cover them too.

What a real node adds over the control plane's processes is state *outside* the processes:
containers (shims and their children are re-parented away from containerd on purpose), pod
network namespaces bind-mounted in ``/var/run/netns``, overlay and volume mounts, the bridge, the
kubelet's cgroups. :func:`teardown` removes all of it and is idempotent, so it runs on a clean
stop, on a stop after a failed start, from another process reading the state file, and before a
start when an earlier owner died. Only one real node can run per machine (the kubelet's cgroups
and the bridge are machine-wide): :func:`claim` records which control plane owns it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from torchgate_dev.node import config
from torchgate_dev.node.config import NodeNetwork, NodePaths
from torchgate_dev.node.registry import registry_config

CLAIM_FILE: Final = "real-node.json"
NETNS_DIR: Final = Path("/var/run/netns")
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
POD_LOG_LINKS: Final = Path("/var/log/containers")
_DEBIAN_PACKAGES: Final = (
    "containerd runc containernetworking-plugins docker-registry iproute2 iptables"
)


class NodeUnavailable(Exception):
    """This machine cannot run the real node; the message says what is missing and how to fix it."""


@dataclass(frozen=True, slots=True)
class NodeBinaries:
    """The executables of the real node."""

    kubelet: Path
    kube_proxy: Path
    coredns: Path
    containerd: Path
    runc: Path
    ctr: Path
    registry: Path
    cni_bin_dir: Path


def find_binaries(kubelet: Path, kube_proxy: Path, coredns: Path) -> NodeBinaries:
    """The node's executables: the Go builds given, Debian's packages for the rest.

    Raises:
        NodeUnavailable: Not root, or a Debian package is missing (the message names them).
    """
    if os.geteuid() != 0:
        raise NodeUnavailable("the real node runs containers and needs root (run as root)")
    commands = ("containerd", "runc", "ctr", "docker-registry", "ip", "iptables-restore")
    found = {name: shutil.which(name) for name in commands}
    cni = Path("/usr/lib/cni")
    missing = [name for name, path in found.items() if path is None]
    if not (cni / "bridge").is_file() or not (cni / "host-local").is_file():
        missing.append("CNI plugins (bridge, host-local)")
    if missing:
        raise NodeUnavailable(
            f"the real node needs {', '.join(missing)}: "
            f"apt-get install -y --no-install-recommends {_DEBIAN_PACKAGES}"
        )
    return NodeBinaries(
        kubelet=kubelet,
        kube_proxy=kube_proxy,
        coredns=coredns,
        containerd=Path(str(found["containerd"])),
        runc=Path(str(found["runc"])),
        ctr=Path(str(found["ctr"])),
        registry=Path(str(found["docker-registry"])),
        cni_bin_dir=cni,
    )


# --------------------------------------------------------------------------- the machine claim


@dataclass(frozen=True, slots=True)
class Claim:
    """Which control plane owns this machine's real node, since when (epoch seconds)."""

    workdir: Path
    since: float


def claim(
    cache: Path, workdir: Path, since: float, is_running: Callable[[Path], bool]
) -> Claim | None:
    """Record that the control plane in ``workdir`` owns this machine's real node.

    Returns:
        An earlier owner's claim whose control plane is gone: its node's leftovers must be torn
        down before this one starts. None when there is none.

    Raises:
        NodeUnavailable: Another control plane's real node still runs.
    """
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / CLAIM_FILE
    previous: Claim | None = None
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        raw = json.loads(path.read_text(encoding="utf-8"))
        previous = Claim(Path(str(raw["workdir"])), float(raw["since"]))
    if previous is not None and previous.workdir != workdir and is_running(previous.workdir):
        raise NodeUnavailable(
            "a real node already runs on this machine, for the control plane in "
            f"{previous.workdir}; stop it first (torchgate dev down --dir "
            f"{shlex.quote(str(previous.workdir))}, or end the test run that started it), "
            "or start this one with --no-real-node"
        )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"workdir": str(workdir), "since": since}), encoding="utf-8")
    tmp.replace(path)
    return previous if previous is not None and previous.workdir != workdir else None


def release_claim(cache: Path, workdir: Path) -> None:
    """Forget the claim if it is ``workdir``'s."""
    path = cache / CLAIM_FILE
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        if Path(str(json.loads(path.read_text(encoding="utf-8"))["workdir"])) == workdir:
            path.unlink()


# --------------------------------------------------------------------------- network


def ensure_bridge(network: NodeNetwork) -> None:
    """Create the pod bridge with the node address before anything binds to that address.

    CoreDNS and the kubelet listen on the gateway address, which exists only once the bridge
    does; the CNI bridge plugin adopts an existing bridge and its address.
    """
    if not Path(f"/sys/class/net/{network.bridge}").exists():
        _run(["ip", "link", "add", network.bridge, "type", "bridge"])
    addresses = _run(["ip", "-o", "-4", "addr", "show", "dev", network.bridge])
    if network.gateway_cidr not in addresses:
        _run(["ip", "addr", "add", network.gateway_cidr, "dev", network.bridge])
    _run(["ip", "link", "set", network.bridge, "up"])


# --------------------------------------------------------------------------- teardown


def teardown(
    paths: NodePaths,
    network: NodeNetwork,
    *,
    since: float,
    ctr: Path | None = None,
    kube_proxy: Path | None = None,
) -> None:
    """Remove every container, mount, network namespace, cgroup and rule the node left.

    Safe to call at any point of a start or stop and more than once. ``since`` (epoch seconds)
    is when the node started: pod network namespaces created since then are the node's.
    ``kube_proxy --cleanup`` removes kube-proxy's iptables chains.
    """
    socket = paths.containerd_socket
    if ctr is not None and socket.exists():
        _kill_tasks(ctr, socket)
    _kill_shims(socket)
    for target in _mounts_under((paths.work, paths.containerd_root, paths.run, NETNS_DIR)):
        if target.parent == NETNS_DIR and not _created_since(target, since):
            continue
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
    for namespace in NETNS_DIR.glob("cni-*") if NETNS_DIR.is_dir() else ():
        if _created_since(namespace, since):
            namespace.unlink(missing_ok=True)
    if Path(f"/sys/class/net/{network.bridge}").exists():
        subprocess.run(["ip", "link", "del", network.bridge], capture_output=True, check=False)
    _remove_cgroups("kubepods")
    if kube_proxy is not None and kube_proxy.exists():
        subprocess.run(
            [str(kube_proxy), "--cleanup", "--v=0"], capture_output=True, check=False, timeout=60
        )
    _remove_kubelet_chains()
    if paths.run.is_dir() and not _mounts_under((paths.run,)):
        shutil.rmtree(paths.run, ignore_errors=True)
    if POD_LOG_LINKS.is_dir():
        for link in POD_LOG_LINKS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and str(os.readlink(link)).startswith(str(paths.work)):
                    link.unlink()


KUBELET_CHAINS: Final = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")
"""iptables chains the kubelet makes and never removes: a canary, a mode hint, and a rule that
drops connections to 127.0.0.0/8 from other addresses."""


def _remove_kubelet_chains() -> None:
    """Delete the kubelet's iptables chains, and the rules that jump to them, in every table."""
    for save, command in (("iptables-save", "iptables"), ("ip6tables-save", "ip6tables")):
        if shutil.which(save) is None:
            continue
        for table in ("filter", "nat", "mangle"):
            dump = subprocess.run(
                [save, "-t", table], capture_output=True, text=True, check=False
            ).stdout
            for rule in dump.splitlines():
                words = rule.split()
                if (
                    words[:1] == ["-A"]
                    and words[1] not in KUBELET_CHAINS
                    and any(f"-j {chain}" in rule for chain in KUBELET_CHAINS)
                ):
                    subprocess.run(
                        [command, "-t", table, "-D", *words[1:]], capture_output=True, check=False
                    )
            for chain in KUBELET_CHAINS:
                if f":{chain} " in dump:
                    for action in ("-F", "-X"):
                        subprocess.run(
                            [command, "-t", table, action, chain], capture_output=True, check=False
                        )


def _kill_tasks(ctr: Path, socket: Path) -> None:
    base = [str(ctr), "--address", str(socket), "--namespace", "k8s.io", "--timeout", "5s"]
    listed = subprocess.run(
        [*base, "tasks", "ls", "-q"], capture_output=True, text=True, check=False
    )
    for task in listed.stdout.split():
        subprocess.run(
            [*base, "tasks", "kill", "--all", "--signal", "SIGKILL", task],
            capture_output=True,
            check=False,
        )


def _kill_shims(socket: Path) -> None:
    """SIGKILL the runc shims serving ``socket`` and everything below them (the containers)."""
    marker = str(socket).encode()
    shims = [pid for pid, argv in _processes() if b"containerd-shim" in argv and marker in argv]
    doomed = set(shims)
    children = _children()
    queue = list(shims)
    while queue:
        for child in children.get(queue.pop(), ()):
            if child not in doomed:
                doomed.add(child)
                queue.append(child)
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in doomed):
        time.sleep(0.05)


def _processes() -> Iterator[tuple[int, bytes]]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                yield int(entry.name), (entry / "cmdline").read_bytes()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = (entry / "stat").read_text(encoding="ascii", errors="replace")
            parent = int(text[text.rindex(")") + 2 :].split()[1])
            tree.setdefault(parent, []).append(int(entry.name))
    return tree


def _mounts_under(roots: Sequence[Path]) -> list[Path]:
    """Mount points below any of ``roots``, deepest first (the order to unmount them in)."""
    prefixes = [str(root.resolve()) + "/" for root in roots if root.exists()]
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines():
            target = line.split()[4].replace("\\040", " ")
            if any(target.startswith(prefix) for prefix in prefixes):
                found.append(Path(target))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def _created_since(path: Path, since: float) -> bool:
    try:
        return path.lstat().st_mtime >= since - 1
    except OSError:
        return False


def _remove_cgroups(name: str) -> None:
    """Remove ``name`` (and what is below it) from every cgroup v1 hierarchy, leaves first."""
    if not CGROUP_ROOT.is_dir():
        return
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / name
        if not top.is_dir():
            continue
        for directory in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NodeUnavailable(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


# --------------------------------------------------------------------------- start


@dataclass(frozen=True, slots=True)
class NodeEndpoints:
    """What the control plane tells the node: the API server, its CA and the identities."""

    server: str
    ca_file: Path
    node_token: str
    dns_token: str
    proxy_token: str


@dataclass(frozen=True, slots=True)
class NodePorts:
    """The node's loopback or node-address ports."""

    registry: int
    kubelet: int
    kube_proxy_healthz: int
    kube_proxy_metrics: int
    kubelet_healthz: int
    dns_health: int
    dns_ready: int


def prepare(
    paths: NodePaths,
    network: NodeNetwork,
    binaries: NodeBinaries,
    endpoints: NodeEndpoints,
    ports: NodePorts,
    *,
    node_name: str,
    registry_storage: Path,
) -> None:
    """Write every configuration file and create the bridge; nothing is started yet."""
    for folder in (paths.work, paths.logs, paths.cni_config, paths.kubelet_root, paths.cni_ipam):
        folder.mkdir(parents=True, exist_ok=True)
    paths.containerd_root.mkdir(parents=True, exist_ok=True)
    registry_storage.mkdir(parents=True, exist_ok=True)
    ensure_bridge(network)
    mirror = f"127.0.0.1:{ports.registry}"
    for registry in config.MIRRORED_REGISTRIES:
        hosts = paths.registry_hosts / registry / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(config.registry_hosts_toml(registry, mirror), encoding="utf-8")
    paths.containerd_config.write_text(
        config.containerd_config(paths, cni_bin_dir=binaries.cni_bin_dir, runc=binaries.runc),
        encoding="utf-8",
    )
    (paths.cni_config / "10-torchgate.conflist").write_text(
        json.dumps(config.cni_conflist(network, paths), indent=2), encoding="utf-8"
    )
    paths.resolv_conf.write_text("", encoding="utf-8")
    kubelet = config.kubelet_configuration(
        network,
        paths,
        client_ca=endpoints.ca_file,
        port=ports.kubelet,
        healthz_port=ports.kubelet_healthz,
    )
    _write_yaml(paths.kubelet_config, kubelet)
    _write_yaml(
        paths.kubelet_kubeconfig,
        config.token_kubeconfig(
            endpoints.server, endpoints.ca_file, "kubelet", endpoints.node_token
        ),
    )
    _write_yaml(
        paths.dns_kubeconfig,
        config.token_kubeconfig(
            endpoints.server, endpoints.ca_file, config.DNS_USER, endpoints.dns_token
        ),
    )
    _write_yaml(
        paths.kube_proxy_kubeconfig,
        config.token_kubeconfig(
            endpoints.server, endpoints.ca_file, config.KUBE_PROXY_USER, endpoints.proxy_token
        ),
    )
    _write_yaml(
        paths.kube_proxy_config,
        config.kube_proxy_configuration(
            network,
            paths.kube_proxy_kubeconfig,
            node_name,
            healthz_port=ports.kube_proxy_healthz,
            metrics_port=ports.kube_proxy_metrics,
        ),
    )
    paths.corefile.write_text(
        config.corefile(network, paths, health_port=ports.dns_health, ready_port=ports.dns_ready),
        encoding="utf-8",
    )
    _write_yaml(paths.registry_config, registry_config(registry_storage, ports.registry))


def collect_registry_garbage(binaries: NodeBinaries, paths: NodePaths) -> None:
    """Delete the blobs of manifests no tag points at any more, before the registry starts.

    Every image rebuild moves a tag (the torch images are 4 GB each), so without this the
    registry's storage only grows. Only while no registry serves the storage: the claim on the
    machine's real node guarantees that for the node's own registry.
    """
    subprocess.run(
        [
            str(binaries.registry),
            "garbage-collect",
            "--delete-untagged",
            str(paths.registry_config),
        ],
        capture_output=True,
        check=False,
        timeout=600,
    )


def prune_images(binaries: NodeBinaries, paths: NodePaths, current: set[str]) -> list[str]:
    """Remove from containerd the images whose manifest no registry tag points at any more.

    Everything the node runs comes from its registry, so an image record (by tag or by digest)
    whose target is not in ``current`` is an older build: removing the record lets containerd's
    garbage collector free its content and unpacked snapshots (GBs for a torch image). Images a
    container still uses are kept by containerd's own references.

    Returns:
        The image names removed.
    """
    base = [str(binaries.ctr), "--address", str(paths.containerd_socket), "-n", "k8s.io"]
    listed = subprocess.run(
        [*base, "images", "ls"], capture_output=True, text=True, check=False, timeout=60
    )
    stale = []
    for line in listed.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2].startswith("sha256:") and fields[2] not in current:
            stale.append(fields[0])
    if stale:
        subprocess.run(
            [*base, "images", "rm", *stale], capture_output=True, check=False, timeout=300
        )
    return stale


def registry_command(binaries: NodeBinaries, paths: NodePaths) -> list[str]:
    """The registry process."""
    return [str(binaries.registry), "serve", str(paths.registry_config)]


def containerd_command(binaries: NodeBinaries, paths: NodePaths) -> list[str]:
    """Containerd with the node's own configuration, root and state."""
    return [str(binaries.containerd), "--config", str(paths.containerd_config)]


def kube_proxy_command(binaries: NodeBinaries, paths: NodePaths) -> list[str]:
    """kube-proxy with the node's configuration."""
    return [str(binaries.kube_proxy), f"--config={paths.kube_proxy_config}", "--v=1"]


def coredns_command(binaries: NodeBinaries, paths: NodePaths) -> list[str]:
    """CoreDNS with the node's Corefile."""
    return [str(binaries.coredns), "-conf", str(paths.corefile)]


def kubelet_command(
    binaries: NodeBinaries,
    paths: NodePaths,
    network: NodeNetwork,
    node_name: str,
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """The kubelet, registering ``node_name`` with the node address and the real-node label."""
    all_labels = {config.REAL_NODE_LABEL: "true", **(labels or {})}
    return [
        str(binaries.kubelet),
        f"--config={paths.kubelet_config}",
        f"--kubeconfig={paths.kubelet_kubeconfig}",
        f"--root-dir={paths.kubelet_root}",
        f"--cert-dir={paths.kubelet_root / 'pki'}",
        f"--hostname-override={node_name}",
        f"--node-ip={network.gateway}",
        "--node-labels=" + ",".join(f"{key}={value}" for key, value in all_labels.items()),
        "--v=1",
    ]


def _write_yaml(path: Path, document: object) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        yaml.safe_dump(document, out, sort_keys=False)


def containerd_ready(binaries: NodeBinaries, paths: NodePaths) -> bool:
    """Whether containerd answers on its socket."""
    if not paths.containerd_socket.exists():
        return False
    done = subprocess.run(
        [str(binaries.ctr), "--address", str(paths.containerd_socket), "version"],
        capture_output=True,
        check=False,
        timeout=10,
    )
    return done.returncode == 0


def ensure_sandbox_image(binaries: NodeBinaries, paths: NodePaths, registry: str) -> None:
    """Push the pod sandbox (``pause``) image to the loopback registry unless it is there."""
    del binaries
    from torchgate_dev.node import images

    images.ensure_images(
        [images.pause_image()], registry=registry, cache=paths.cache, report=lambda _: None
    )
