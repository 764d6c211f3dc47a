"""The images the seeds use or describe: names, layers shared, scripts beside their data."""

from __future__ import annotations

import posixpath

from torchgate_dev.node import oci
from torchgate_dev.node.imagespecs import (
    BASE_LAYER,
    DIST_MNIST_SCRIPT,
    MNIST_REFERENCE,
    TORCH_LAYER,
    VISION_LAYER,
    Files,
    ImageSpec,
    seed_images,
)


def files_of(image: ImageSpec) -> dict[str, bytes]:
    return {
        path: content
        for layer in image.layers
        if isinstance(layer.source, Files)
        for path, content, _ in layer.source.files
    }


def test_the_upstream_examples_image_runs_our_mnist_script_beside_mnist_data() -> None:
    images = {oci.parse_reference(image.reference): image for image in seed_images()}
    upstream = oci.parse_reference("kubeflow/pytorch-dist-mnist:latest")

    image = images[upstream]

    files = files_of(image)
    interpreter, script = image.run.entrypoint
    assert interpreter == "python3"
    assert files[script.lstrip("/")] == DIST_MNIST_SCRIPT.read_bytes()
    data = posixpath.normpath(posixpath.join(image.run.working_dir, "../data/MNIST/raw"))
    assert {f"{data.lstrip('/')}/{name}" for name in oci.MNIST_FILES} <= set(files)
    assert image.run.cmd == (), "the job's args (--backend ..., --epochs ...) are the arguments"


def test_both_mnist_images_share_every_layer_but_their_own_files() -> None:
    images = {oci.parse_reference(image.reference): image for image in seed_images()}
    katib = images[oci.parse_reference(MNIST_REFERENCE)]
    upstream = images[oci.parse_reference("kubeflow/pytorch-dist-mnist:latest")]

    assert katib.layers[:3] == upstream.layers[:3] == (BASE_LAYER, TORCH_LAYER, VISION_LAYER)
    katib_data = {p: c for p, c in files_of(katib).items() if "/raw/" in p}
    upstream_data = {p: c for p, c in files_of(upstream).items() if "/raw/" in p}
    assert sorted(katib_data.values()) == sorted(upstream_data.values())
