"""Distributed MNIST training with the command line of pytorch-operator's mnist example.

Why this script: the upstream PyTorchJob examples (pytorch-operator's ``examples/mnist``, the
training-operator's ``examples/pytorch/mnist``; seeds 000 and 001 walk through them) run the image
``kubeflow/pytorch-dist-mnist`` with ``--backend gloo`` or ``--backend nccl``. The local cluster
has no network, so its rebuild of that image (``torchgate_dev.node.imagespecs``) carries this
script, written for torchgate from the example's documented behaviour, and a data set made at
build time in MNIST's file format under ``../data``, where the example keeps it.

What it does, as the example: one process per pod; distributed when the controller's
``WORLD_SIZE`` is above 1 (``init_process_group`` from the env contract: ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``); each rank trains on its shard of the training set
(``DistributedSampler``) and DDP averages the gradients; after every epoch each rank evaluates
the whole test set. It prints ``Train Epoch: <n> [<seen>/<total> (<pct>%)]``, a tab and
``loss=<x>`` every ``--log-interval`` batches, and ``accuracy=<x>`` per epoch (the format
Katib's metrics collector reads), and writes both to TensorBoard logs in ``--dir``.

Options (the example's): ``--backend {gloo,nccl,mpi}``, ``--epochs``, ``--batch-size``,
``--test-batch-size``, ``--lr``, ``--momentum``, ``--seed``, ``--log-interval``, ``--no-cuda``,
``--save-model``, ``--dir``. ``nccl`` needs a GPU: without one the script says so and exits 1
instead of failing inside the first collective.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tensorboardX import SummaryWriter
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms

DATA_ROOT = "../data"  # as the example's: beside the folder the image starts in
BACKENDS = ("gloo", "nccl", "mpi")


class SmallConvNet(nn.Module):
    """Two convolutions, two dense layers: enough for 28x28 grey digits."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10)
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the ten classes."""
        return F.log_softmax(self.classifier(self.features(images)), dim=1)


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's command line."""
    parser = argparse.ArgumentParser(description="Distributed MNIST (PyTorchJob example)")
    parser.add_argument("--backend", choices=BACKENDS, default="gloo", help="default: gloo")
    parser.add_argument("--epochs", type=int, default=1, help="default: 1")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank; default: 64")
    parser.add_argument("--test-batch-size", type=int, default=1000, help="default: 1000")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate; default: 0.01")
    parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum; default: 0.5")
    parser.add_argument("--seed", type=int, default=1, help="random seed; default: 1")
    parser.add_argument("--log-interval", type=int, default=10, help="batches between logs")
    parser.add_argument("--no-cuda", action="store_true", help="train on the CPU")
    parser.add_argument("--save-model", action="store_true", help="rank 0 saves mnist_cnn.pt")
    parser.add_argument("--dir", default="logs", help="TensorBoard log folder; default: logs")
    return parser.parse_args(argv)


def train_epoch(
    model: nn.Module,
    loader: DataLoader[tuple[torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    *,
    epoch: int,
    device: torch.device,
    log_interval: int,
    writer: SummaryWriter,
) -> None:
    """One pass over this rank's shard, printing the loss every ``log_interval`` batches."""
    model.train()
    shard = len(loader.sampler)
    for batch, (images, labels) in enumerate(loader):
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        optimizer.step()
        if batch % log_interval == 0:
            seen = batch * loader.batch_size
            print(
                f"Train Epoch: {epoch} [{seen}/{shard} ({100.0 * batch / len(loader):.0f}%)]"
                f"\tloss={loss.item():.4f}",
                flush=True,
            )
            writer.add_scalar("loss", loss.item(), (epoch - 1) * len(loader) + batch)


def evaluate(
    model: nn.Module,
    loader: DataLoader[tuple[torch.Tensor, torch.Tensor]],
    *,
    epoch: int,
    device: torch.device,
    writer: SummaryWriter,
) -> float:
    """Accuracy on the whole test set (every rank evaluates all of it)."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for images, labels in loader:
            predicted = model(images.to(device)).argmax(dim=1)
            correct += int((predicted == labels.to(device)).sum().item())
    accuracy = correct / len(loader.dataset)
    print(f"\naccuracy={accuracy:.4f}\n", flush=True)
    writer.add_scalar("accuracy", accuracy, epoch)
    return accuracy


def main(argv: list[str] | None = None) -> int:
    """Train and evaluate; 0 on success, 1 when the backend cannot run here."""
    args = parse_arguments(argv)
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    if args.backend == "nccl" and not use_cuda:
        print("error: --backend nccl needs a GPU and none is usable; use gloo", file=sys.stderr)
        return 1
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if use_cuda else "cpu")
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        print(f"Using distributed PyTorch with {args.backend} backend", flush=True)
        dist.init_process_group(backend=args.backend)
    normalise = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
    )
    train_set = datasets.MNIST(DATA_ROOT, train=True, download=False, transform=normalise)
    test_set = datasets.MNIST(DATA_ROOT, train=False, download=False, transform=normalise)
    sampler = DistributedSampler(train_set) if distributed else None
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, sampler=sampler, shuffle=sampler is None
    )
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)
    model: nn.Module = SmallConvNet().to(device)
    if distributed:
        model = DistributedDataParallel(model, device_ids=[0] if use_cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    writer = SummaryWriter(args.dir)
    for epoch in range(1, args.epochs + 1):
        if sampler is not None:
            sampler.set_epoch(epoch)
        train_epoch(
            model,
            train_loader,
            optimizer,
            epoch=epoch,
            device=device,
            log_interval=args.log_interval,
            writer=writer,
        )
        evaluate(model, test_loader, epoch=epoch, device=device, writer=writer)
    writer.close()
    if args.save_model and (not distributed or dist.get_rank() == 0):
        torch.save(model.state_dict(), "mnist_cnn.pt")
    if distributed:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
