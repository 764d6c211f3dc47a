"""The env contract: what the controller injects, declared once for the webhook and controller.

Why one declaration: the controller injects these variables into the ``pytorch`` container, and
the webhook refuses a job that sets them itself (or passes a command-line flag that would
override them), quoting where the value comes from instead; both read this one list, so the
webhook knows every variable the controller injects. Here each variable says where its value
comes from, which flag spellings would override it, and whether it is *reserved* (the webhook
refuses a user's entry, the controller's value always wins) or a *default* (a user's own entry is
kept). ``tests/unit/pytorchjob/test_contract.py`` checks that the controller emits exactly these
names, that the webhook refuses exactly the reserved ones, and that README's table lists them.

One reading of the node count: ``PET_NNODES`` counts torchrun nodes, and every pod is one, the
Master too (it runs torchrun like the Workers and joins their rendezvous). An elastic job's
``minReplicas``/``maxReplicas`` count Workers, as its ``scale`` subresource, an HPA, the defaults
(the Worker count) and the default gang size (Master + ``minReplicas`` Workers) read them, so an
elastic job with a Master gets ``PET_NNODES=1+minReplicas:1+maxReplicas``. The training-operator
passes the bare bounds there, one node short of its pods: torchrun's c10d rendezvous then
completes without one of them and leaves it out (``pytorchjob.gang`` says how, and declares the
arithmetic, ``gang.nnodes``, that the controller's env and the webhook's checks both use).

The contract also fences gang attempts. A gang is restarted whole on new pods of the same names
(``<job>-master-0`` stays ``MASTER_ADDR``), and a rank of the old attempt may still run on a
node torchgate gave up on (a lost node whose pods were force-deleted). It must never join the new
attempt's rendezvous, so each attempt's rendezvous differs in what the old rank holds in its env:

- the port: attempt *k* listens on ``rendezvous_port(declared, k)``, the declared
  ``pytorchjob-port`` for the first attempt and the next of ``RENDEZVOUS_PORTS`` ports for each
  later one, so an old rank dials a port nothing listens on in the new master (connection
  refused); this fences ``init_process_group("env://")``, torchrun's static rendezvous and
  torchrun's c10d rendezvous on one of the job's own pods alike;
- the run id of an elastic rendezvous: ``rendezvous_id(id, k)``, so an old torchrun agent that
  re-joins an external rendezvous (``rdzvHost``: etcd, a c10d store elsewhere), where the port
  cannot change, joins a round of its own.

Attempt *k*'s port is reused by attempt *k* + ``RENDEZVOUS_PORTS``: a stale rank would have to
outlive that many later attempts of its job. The flags that would pin these values
(``--master-port``, ``--rdzv-endpoint``, ``--rdzv-id``) are refused like the variables.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from torchgate.pytorchjob import names


@dataclass(frozen=True, slots=True)
class Variable:
    """One injected environment variable.

    Attributes:
        name: The variable.
        source: Where its value comes from, as the webhook's refusal says it ("... is injected
            by the torchgate controller <source>").
        flags: Command-line spellings that would override it (refused wherever they appear).
        reserved: True: the webhook refuses a user's entry of this name; False: a default the
            controller sets only when the user's container does not.
        elastic: None: every job; True: elastic jobs only.
    """

    name: str
    source: str
    flags: tuple[str, ...] = ()
    reserved: bool = True
    elastic: bool | None = None


_PORT_SOURCE: Final = (
    f"from the {names.PORT_NAME} container port (default {names.DEFAULT_PORT}), a new one for "
    "each gang attempt"
)

PYTHONUNBUFFERED: Final = "PYTHONUNBUFFERED"
MASTER_ADDR: Final = "MASTER_ADDR"
PET_MASTER_ADDR: Final = "PET_MASTER_ADDR"
MASTER_PORT: Final = "MASTER_PORT"
PET_MASTER_PORT: Final = "PET_MASTER_PORT"
WORLD_SIZE: Final = "WORLD_SIZE"
RANK: Final = "RANK"
PET_NODE_RANK: Final = "PET_NODE_RANK"
PET_NNODES: Final = "PET_NNODES"
PET_NPROC_PER_NODE: Final = "PET_NPROC_PER_NODE"
PET_RDZV_BACKEND: Final = "PET_RDZV_BACKEND"
PET_RDZV_ENDPOINT: Final = "PET_RDZV_ENDPOINT"
PET_RDZV_ID: Final = "PET_RDZV_ID"
PET_RDZV_CONF: Final = "PET_RDZV_CONF"
PET_MAX_RESTARTS: Final = "PET_MAX_RESTARTS"
PET_STANDALONE: Final = "PET_STANDALONE"

VARIABLES: Final = (
    Variable(
        PYTHONUNBUFFERED,
        "as 1, so a job's output reaches its log as it is printed",
        reserved=False,
    ),
    Variable(MASTER_ADDR, "as the master pod's name", flags=("--master-addr", "--master_addr")),
    Variable(PET_MASTER_ADDR, "as the master pod's name"),
    Variable(MASTER_PORT, _PORT_SOURCE, flags=("--master-port", "--master_port")),
    Variable(PET_MASTER_PORT, _PORT_SOURCE),
    Variable(WORLD_SIZE, "from the replica counts", flags=("--world-size", "--world_size")),
    Variable(RANK, "from each pod's replica index", flags=("--rank",)),
    Variable(
        PET_NODE_RANK,
        "from each pod's replica index",
        flags=("--node-rank", "--node_rank"),
        elastic=False,
    ),
    Variable(
        PET_NNODES,
        "from the replica counts (elastic: spec.elasticPolicy minReplicas:maxReplicas, plus "
        "the Master when there is one)",
    ),
    Variable(PET_NPROC_PER_NODE, "from spec.nprocPerNode; set that instead"),
    Variable(
        PET_RDZV_BACKEND, "from spec.elasticPolicy.rdzvBackend; set that instead", elastic=True
    ),
    Variable(
        PET_RDZV_ENDPOINT,
        "from spec.elasticPolicy rdzvHost and rdzvPort; set those instead",
        flags=("--rdzv-endpoint", "--rdzv_endpoint"),
        elastic=True,
    ),
    Variable(
        PET_RDZV_ID,
        "from spec.elasticPolicy.rdzvId and the gang attempt; set rdzvId instead",
        flags=("--rdzv-id", "--rdzv_id"),
        elastic=True,
    ),
    Variable(PET_RDZV_CONF, "from spec.elasticPolicy.rdzvConf; set that instead", elastic=True),
    Variable(
        PET_MAX_RESTARTS, "from spec.elasticPolicy.maxRestarts; set that instead", elastic=True
    ),
    Variable(PET_STANDALONE, "from spec.elasticPolicy.standalone; set that instead", elastic=True),
)
"""Every variable the controller may inject, in the order it injects them."""

NAMES: Final = frozenset(variable.name for variable in VARIABLES)
RESERVED: Final = frozenset(variable.name for variable in VARIABLES if variable.reserved)
"""Names the webhook refuses in the ``pytorch`` container's env."""
DEFAULTS: Final = NAMES - RESERVED
"""Names the controller sets only when the user's container does not."""
SOURCES: Final = {variable.name: variable.source for variable in VARIABLES}
STRAY_FLAGS: Final = {flag: variable.name for variable in VARIABLES for flag in variable.flags}
"""Command-line flag spelling -> the variable the controller injects instead."""


# ------------------------------------------------------------------ fencing gang attempts

RENDEZVOUS_PORTS: Final = 16
"""How many ports a job's gang attempts take turns on for their rendezvous."""
MAX_PORT: Final = 65535


def rendezvous_port(declared: int, attempt: int, *, taken: Collection[int] = ()) -> int:
    """The port gang attempt ``attempt`` (1, 2, ...) listens on for its rendezvous.

    The candidates are ``RENDEZVOUS_PORTS`` ports: ``declared`` first, then upwards (downwards
    from ``declared`` once the port range ends), skipping the ports the pod declares for
    something else (``taken``: its containers share one network namespace). Attempt 1 gets
    ``declared``, so a job that never restarts sees exactly the port it declared.
    """
    candidates = [declared]
    for step in (1, -1):
        port = declared + step
        while len(candidates) < RENDEZVOUS_PORTS and 0 < port <= MAX_PORT:
            if port not in taken:
                candidates.append(port)
            port += step
    return candidates[(max(attempt, 1) - 1) % len(candidates)]


def rendezvous_id(base: str, attempt: int) -> str:
    """``PET_RDZV_ID`` of gang attempt ``attempt``: ``base``, then ``<base>-<attempt>``."""
    return base if attempt <= 1 else f"{base}-{attempt}"
