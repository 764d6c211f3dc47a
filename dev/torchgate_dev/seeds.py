"""The seeds' images for the real node: built in the background by ``up``, on demand by ``images``.

The build takes minutes the first time (then seconds: it is cached on its inputs), so ``up``
starts it as a detached ``torchgate dev images`` process and returns; ``images`` builds in the
foreground and waits for a build in progress (the image cache's lock).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace

from torchgate_dev.controlplane.cluster import ControlPlane
from torchgate_dev.launch import spawn
from torchgate_dev.paths import SEEDS_DIR, DevLayout
from torchgate_dev.state import DevError, DevState


def start_build(layout: DevLayout, state: DevState, report: Callable[[str], None]) -> DevState:
    """Start ``torchgate dev images`` in the background; the state records its process."""
    if not SEEDS_DIR.is_dir():
        report(f"no seed manifests in {SEEDS_DIR}: the seed images are not built")
        return state
    process = spawn(
        "images",
        [sys.executable, "-m", "torchgate", "dev", "images", "--dir", str(layout.root)],
        layout.images_log,
        cwd=layout.root,
    )
    report(
        "building the seed images (pytorch-demo, kubeflowkatib/pytorch-mnist, "
        "kubeflow/pytorch-dist-mnist) in the "
        f"background: first time several minutes, then seconds; progress in "
        f"{layout.images_log}; wait for them with: torchgate dev images"
    )
    state = replace(state, images=process)
    state.save(layout.state)
    return state


def build(
    plane: ControlPlane | None, layout: DevLayout, report: Callable[[str], None]
) -> dict[str, str]:
    """Build the seeds' images and push them to the real node's registry (cached).

    Raises:
        DevError: No dev cluster with a real node here, or the build failed.
    """
    if plane is None or plane.registry is None:
        raise DevError(f"no dev cluster with a real node in {layout.root} (torchgate dev up)")
    if not SEEDS_DIR.is_dir():
        raise DevError(f"no seed manifests in {SEEDS_DIR}")
    from torchgate_dev.node import images

    try:
        return images.ensure_images(
            images.seed_images(SEEDS_DIR),
            registry=plane.registry,
            cache=images.node_cache(),
            report=report,
        )
    except images.ImageBuildError as error:
        raise DevError(f"building the seed images: {error}") from None
