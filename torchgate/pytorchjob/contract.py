"""The env contract: what the controller injects, declared once for the webhook and controller.

Why one declaration: the controller injects these variables into the ``pytorch`` container, and
the webhook refuses a job that sets them itself (or passes a command-line flag that would
override them), quoting where the value comes from instead; both read this one list, so the
webhook knows every variable the controller injects. Here each variable says where its value
comes from, which flag spellings would override it, and whether it is *reserved* (the webhook
refuses a user's entry, the controller's value always wins) or a *default* (a user's own entry is
kept). ``tests/unit/pytorchjob/test_contract.py`` checks that the controller emits exactly these
names, that the webhook refuses exactly the reserved ones, and that README's table lists them.
"""

from __future__ import annotations

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


_PORT_SOURCE: Final = f"from the {names.PORT_NAME} container port (default {names.DEFAULT_PORT})"

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
        "from the replica counts (elastic: spec.elasticPolicy minReplicas:maxReplicas)",
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
    Variable(PET_RDZV_ID, "from spec.elasticPolicy.rdzvId; set that instead", elastic=True),
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
