"""What the local node's images are made of: pinned wheels, layers and image specs (pure).

The seed PyTorchJobs name ``pytorch-demo`` and ``docker.io/kubeflowkatib/pytorch-mnist`` (and
describe the upstream examples' ``kubeflow/pytorch-dist-mnist``), and the kubelet needs a sandbox
(``pause``) image; :mod:`torchgate_dev.node.images` builds these specs into layers and pushes
them. A spec says only what goes in (a Debian root file system, pinned wheels, files, a Go
program) and how the process runs; every layer is cached on exactly these inputs, so changing a
pin or a file here rebuilds that layer and those above it.

The torch layer holds the smallest set of wheels that imports torch 2.15.0 (a CUDA build: its
libraries' DT_NEEDED entries name CUDA libraries, so the dynamic linker needs them even on a CPU
node) and trains with CPU ``torch.distributed`` (gloo, DDP); ``TORCH_WHEELS`` says why each is
there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from torchgate_dev import packagedata
from torchgate_dev.node import oci

PAUSE_REFERENCE: Final = "registry.torchgate.local/pause:3.10"
DEMO_REFERENCE: Final = "docker.io/library/pytorch-demo:latest"
MNIST_REFERENCE: Final = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
# The upstream examples' image (training-operator examples/pytorch/mnist, pytorch-operator's
# examples/mnist that seeds 000 and 001 follow): `kubeflow/pytorch-dist-mnist:latest`.
DIST_MNIST_REFERENCE: Final = "docker.io/kubeflow/pytorch-dist-mnist:latest"
PAUSE_SOURCE: Final = packagedata.PAUSE_SOURCE
DIST_MNIST_SCRIPT: Final = packagedata.DIST_MNIST_SCRIPT
# Beside the checkout (dev/torchgate_dev/node/ is three folders below its top).
SEEDS_DIR: Final = Path(__file__).resolve().parents[4] / "shared" / "seeds" / "manifests"

TORCH_WHEELS: Final = (
    "torch==2.15.0",
    # torch/__init__.py imports it first: the only pure-Python dependency of `import torch`.
    "typing-extensions==4.16.0",
    # DistributedDataParallel.__init__ reads torch._dynamo, whose import needs sympy (which
    # needs mpmath); all_reduce alone works without them, DDP training does not.
    "sympy==1.14.0",
    "mpmath==1.3.0",
    # The dynamic linker loads each of these when `import torch` loads torch/_C (tried one by
    # one: without any of them the import fails with "<soname>: cannot open shared object file").
    "nvidia-cuda-runtime==13.2.86",  # libcudart.so.13: libtorch_global_deps, libtorch_cpu, ...
    "nvidia-cuda-cupti==13.2.86",  # libcupti.so.13: NEEDED by libtorch_cpu (the profiler)
    "nvidia-cublas==13.4.1.3",  # libcublas.so.13, libcublasLt.so.13: libtorch_cuda
    "nvidia-cudnn-cu13==9.26.0.51",  # libcudnn.so.9: libtorch_cuda, libtorch_python
    "nvidia-cufft==12.2.0.57",  # libcufft.so.12: libtorch_cuda
    "nvidia-cufile==1.17.1.22",  # libcufile.so.0: libtorch_cuda, libtorch_python
    "nvidia-cusparse==12.7.10.12",  # libcusparse.so.12: libtorch_cuda
    "nvidia-cusparselt-cu13==0.8.1",  # libcusparseLt.so.0: libtorch_cuda
    "nvidia-nccl-cu13==2.30.7",  # libnccl.so.2: libtorch_cuda
    "nvidia-cuda-nvrtc==13.2.86",  # libnvrtc.so.13: libtorch_cuda
    "nvidia-nvshmem-cu13==3.7.2",  # libnvshmem_host.so.3: libtorch_nvshmem (NEEDED by _cuda)
    # Not needed to import or run gloo, but every PyTorch install has it: without it each
    # `import torch` warns "Failed to initialize NumPy" into the job's log.
    "numpy==2.4.6",
    # Left out, import, gloo and DDP work without them: triton, cuda-bindings, cuda-pathfinder,
    # cuda-toolkit (a meta package), nvidia-nvjitlink (only dlopen'ed by cusparse on a GPU),
    # nvidia-cusolver (libtorch_cuda_linalg, loaded lazily), nvidia-nvtx, nvidia-cuda-cccl,
    # and networkx, jinja2, filelock, fsspec, setuptools (torch.compile, which would also need
    # a C compiler in the image, and cpp extensions).
)
VISION_WHEELS: Final = (
    # The release made with torch 2.15.0; 0.29.x builds on torch's stable ABI and requires
    # torch>=2.14.0 (no torchvision pins torch==2.15.0).
    "torchvision==0.29.2",
    "tensorboardx==2.6.5",
    "pillow==13.0.0",  # torchvision (transforms, datasets)
    "protobuf==7.36.2",  # tensorboardX
    "packaging==26.4",  # tensorboardX
)
PIP_PLATFORMS: Final = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)),  # bookworm has glibc 2.36
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
PYTHON_VERSION: Final = "3.11"  # bookworm's python3
SITE_PACKAGES: Final = f"usr/local/lib/python{PYTHON_VERSION}/dist-packages"
FIXED_EPOCH: Final = 1704067200  # 2024-01-01T00:00:00Z: mtime of every file in non-base layers
_IMAGE_ENV: Final = (oci.DEFAULT_PATH, "LANG=C.UTF-8", "PYTHONUNBUFFERED=1")


@dataclass(frozen=True, slots=True)
class Debootstrap:
    """A Debian root file system: ``debootstrap --variant=<variant> --include=<...>``."""

    suite: str = "bookworm"
    variant: str = "minbase"
    include: tuple[str, ...] = ("python3",)
    mirror: str = "http://deb.debian.org/debian"


@dataclass(frozen=True, slots=True)
class Wheels:
    """Pinned wheels (``name==version``) installed without dependencies into dist-packages."""

    requirements: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Files:
    """Files from memory: image path (relative to ``/``) -> (contents, mode)."""

    files: tuple[tuple[str, bytes, int], ...]


@dataclass(frozen=True, slots=True)
class GoProgram:
    """A static Go binary built from a module folder, put at ``path`` in the image."""

    source: Path
    path: str


LayerSource = Debootstrap | Wheels | Files | GoProgram


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One layer: a name for reports and file names, and what it is made from."""

    name: str
    source: LayerSource


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """An image: its reference (normalised when pushed), layers bottom-up, process config."""

    reference: str
    layers: tuple[LayerSpec, ...]
    run: oci.RunConfig


BASE_LAYER: Final = LayerSpec("debian-bookworm", Debootstrap())
TORCH_LAYER: Final = LayerSpec("torch", Wheels(TORCH_WHEELS))
VISION_LAYER: Final = LayerSpec("torchvision", Wheels(VISION_WHEELS))


def seed_images(seeds_dir: Path = SEEDS_DIR) -> tuple[ImageSpec, ...]:
    """The images the seed manifests use or describe, with their scripts read from ``seeds_dir``.

    Seeds 003 and 004 name theirs; seeds 000 and 001 leave the image to the reader and point at
    the upstream example whose image is ``kubeflow/pytorch-dist-mnist`` (our script, from
    ``packagedata``). Both MNIST images carry the same synthetic data set (``oci.synthetic_mnist``)
    where their scripts' ``../data`` points, so they train without downloading anything.
    """
    demo = (seeds_dir / "003-demo.py").read_bytes()
    mnist = (seeds_dir / "004-mnist.py").read_bytes()
    data = oci.synthetic_mnist()
    mnist_files = (
        ("opt/pytorch-mnist/mnist.py", mnist, 0o644),
        *((f"opt/data/FashionMNIST/raw/{name}", data[name], 0o644) for name in data),
    )
    dist_mnist_files = (
        ("opt/mnist/src/mnist.py", DIST_MNIST_SCRIPT.read_bytes(), 0o644),
        *((f"opt/mnist/data/MNIST/raw/{name}", data[name], 0o644) for name in data),
    )
    return (
        ImageSpec(
            DEMO_REFERENCE,
            (
                BASE_LAYER,
                TORCH_LAYER,
                LayerSpec("demo", Files((("workspace/demo.py", demo, 0o644),))),
            ),
            oci.RunConfig(env=_IMAGE_ENV, cmd=("python3", "demo.py"), working_dir="/workspace"),
        ),
        ImageSpec(
            MNIST_REFERENCE,
            (BASE_LAYER, TORCH_LAYER, VISION_LAYER, LayerSpec("pytorch-mnist", Files(mnist_files))),
            oci.RunConfig(
                env=_IMAGE_ENV,
                entrypoint=("python3", "/opt/pytorch-mnist/mnist.py"),
                working_dir="/opt/pytorch-mnist",  # mnist.py reads "../data"
            ),
        ),
        ImageSpec(
            DIST_MNIST_REFERENCE,
            (
                BASE_LAYER,
                TORCH_LAYER,
                VISION_LAYER,
                LayerSpec("pytorch-dist-mnist", Files(dist_mnist_files)),
            ),
            oci.RunConfig(
                env=_IMAGE_ENV,
                # The upstream image's layout: the script in /opt/mnist/src, run from there, so
                # its "../data" is /opt/mnist/data; the job's args (--backend ...) follow.
                entrypoint=("python3", "/opt/mnist/src/mnist.py"),
                working_dir="/opt/mnist/src",
            ),
        ),
    )


def pause_image() -> ImageSpec:
    """The pod sandbox image: our static ``pause`` binary alone, as ``/pause``."""
    return ImageSpec(
        PAUSE_REFERENCE,
        (LayerSpec("pause", GoProgram(PAUSE_SOURCE, "pause")),),
        oci.RunConfig(env=(oci.DEFAULT_PATH,), entrypoint=("/pause",)),
    )
