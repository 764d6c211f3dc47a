"""Shared pure model of Kubeflow PyTorchJobs and torchgate PlacementPolicies.

Imported by both ``webhook`` and ``controller`` (which never import each other). Nothing here does
I/O: no network, no files, no clock, no asyncio.
"""
