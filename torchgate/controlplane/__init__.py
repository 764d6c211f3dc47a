"""A real Kubernetes control plane on loopback, for e2e tests and ``torchgate dev``.

Why this exists: torchgate's behaviour depends on what the apiserver, the scheduler and the garbage
collector really do (admission order, schema pruning, owner references, per-node fit), and fakes
drift from that. The build machines have no Docker and no release downloads, so the binaries are
built from Go modules (``tools/controlplane/build.sh``) and run here as plain local processes, with
kwok standing in for kubelets on fake GPU nodes.

- :mod:`torchgate.controlplane.binaries` finds or builds the five binaries.
- :mod:`torchgate.controlplane.kwok` describes the fake nodes and the pod lifecycle kwok plays.
- :mod:`torchgate.controlplane.cluster` starts, wraps or stops a control plane
  (:class:`~torchgate.controlplane.cluster.ControlPlane`), from these parts:
  :mod:`~torchgate.controlplane.layout` (its files and ports),
  :mod:`~torchgate.controlplane.components` (command lines and configuration, pure),
  :mod:`~torchgate.controlplane.kubeconfig` (pure), :mod:`~torchgate.controlplane.pki`
  (certificates), :mod:`~torchgate.controlplane.state` (the state file and orphans),
  :mod:`~torchgate.controlplane.supervision` (stop order, signals, probes),
  :mod:`~torchgate.controlplane.kubectl` and :mod:`~torchgate.controlplane.realnode` (the real
  node's wiring).

Import from those modules; this package imports none of them, so each one can also run as
``python -m torchgate.controlplane.<module>``.
"""
