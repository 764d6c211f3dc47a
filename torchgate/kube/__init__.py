"""torchgate's one access layer to the Kubernetes API (async, with a thin blocking wrapper).

Layers: the pure core (``torchgate.pytorchjob``, the pure webhook and controller modules) imports
nothing from here; this package is the only one that speaks HTTP to an apiserver; the shells (the
controller, the webhook's policy source, ``torchgate certs``, the dev tooling) use it.

- :mod:`torchgate.kube.errors`: the typed API errors (pure).
- :mod:`torchgate.kube.resources`: where each kind lives in the REST API (pure).
- :mod:`torchgate.kube.client`: :class:`~torchgate.kube.client.KubeClient`, raw JSON over one
  aiohttp session; ``kubernetes_asyncio`` only loads the configuration and refreshes tokens.
- :mod:`torchgate.kube.informer`: the one list-and-watch loop (resourceVersion, bookmarks, re-list
  on 410 Gone).
- :mod:`torchgate.kube.blocking`: synchronous calls for the dev tooling (``asyncio.run`` around
  the same client).
"""
