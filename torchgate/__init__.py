"""The ``torchgate`` command line and the local development cluster.

This package is the composition root: it may import ``webhook``, ``controller`` and ``certs``;
none of them imports it.
"""
