"""Certificates for the torchgate admission webhook: a private CA, a serving pair, and caBundle.

The apiserver calls admission webhooks over TLS only and trusts exactly the PEM CAs in each
webhook's ``clientConfig.caBundle``. With ``failurePolicy: Fail``, an expired or untrusted serving
certificate blocks every PyTorchJob create, so renewal must happen early and without a window in
which the apiserver and the webhook disagree. The package is split so that the decisions can be
tested with a fixed clock:

- ``certs.issuing``: pure. Makes CAs, serving and client certificates (the local control plane's
  PKI uses it too).
- ``certs.authority``: pure. Decides what needs renewing (and re-exports ``certs.issuing``).
- ``certs.store``: the I/O. PEM files, a ``kubernetes.io/tls`` Secret, webhook ``caBundle`` fields.
- ``certs.command``: ``torchgate certs``: one sync (read, plan, patch caBundle, write) or a watch
  loop beside the webhook.
"""
