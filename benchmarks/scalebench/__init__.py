"""The parts of ``benchmarks/scale_bench.py``, one concern per module.

* ``workload``: the steady arrival stream of mixed gangs (pure, seeded).
* ``webhookprobe``: the ``torchgate webhook`` process and its paced validating reviews.
* ``phases``: one pool size: nodes, the plain script, the controller's burst, the steady stream.
* ``plots``: the PNGs, from the JSON of every size run so far (matplotlib).
* ``cli``: flags and ``main``.

It reuses ``controllerbench`` (the client, the pod watch, the plain script, the samplers): the
scale benchmark is the controller benchmark's rig grown to fleet size, with a steady stream.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
for _path in (REPO, REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
