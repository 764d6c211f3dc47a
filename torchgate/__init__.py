"""torchgate: the admission webhook, the gang controller, their certificates and the command line.

This package is the product, and all the product's wheel and image hold. Its ``cli`` is the
composition root: it may import ``webhook``, ``controller``, ``certs`` and ``ask`` (the commands
that ask the controller: ``explain``, ``simulate``); none of them imports it.
The local development cluster (``torchgate dev``) is another distribution, torchgate-dev, which
imports this package; nothing here imports it (``lint-imports`` forbids it).
"""
