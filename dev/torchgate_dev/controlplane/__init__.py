"""A real Kubernetes control plane on loopback, for e2e tests and ``torchgate dev``.

Why this exists: torchgate's behaviour depends on what the apiserver, the scheduler and the garbage
collector really do (admission order, schema pruning, owner references, per-node fit), and fakes
drift from that. The build machines have no Docker and no release downloads, so the binaries are
built from Go modules (``torchgate_dev/data/controlplane/build.sh``) and run here as plain local
processes, with kwok standing in for kubelets on fake GPU nodes.

- :mod:`torchgate_dev.controlplane.binaries` finds or builds the five binaries.
- :mod:`torchgate_dev.controlplane.kwok` describes the fake nodes and the pod lifecycle kwok plays.
- :mod:`torchgate_dev.controlplane.cluster` starts, wraps or stops a control plane
  (:class:`~torchgate_dev.controlplane.cluster.ControlPlane`), from these parts:
  :mod:`~torchgate_dev.controlplane.layout` (its files and ports),
  :mod:`~torchgate_dev.controlplane.components` (command lines and configuration, pure),
  :mod:`~torchgate_dev.controlplane.kubeconfig` (pure), :mod:`~torchgate_dev.controlplane.pki`
  (certificates), :mod:`~torchgate_dev.controlplane.state` (the state file and orphans),
  :mod:`~torchgate_dev.controlplane.supervision` (stop order, signals, probes),
  :mod:`~torchgate_dev.controlplane.kubectl` and :mod:`~torchgate_dev.controlplane.realnode` (the
  real node's wiring).

Import from those modules; this package imports none of them, so each one can also run as
``python -m torchgate_dev.controlplane.<module>``.
"""
