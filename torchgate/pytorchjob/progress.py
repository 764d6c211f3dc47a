"""Hang detection: the progress deadline, the progress file and the probe that checks it.

Why a liveness probe on a file: a hang is a Master that makes no progress, and the cheapest
witness of progress is a file the training loop touches (``os.utime`` once per step or so). An
exec liveness probe the controller adds to the Master's ``pytorch`` container checks the file's
age on the node, run by the kubelet: no apiserver request at all, however many jobs run. Reading
logs (``pods/log`` through the apiserver for every running Master, every few seconds) or a
heartbeat annotation (a pod PATCH per heartbeat, per job) both cost the apiserver in proportion
to the pool. When the file is older than the deadline, the probe writes ``HANG_MESSAGE`` to
the container's termination log (``/dev/termination-log``) and fails; the kubelet kills the
container, and the controller tells the hang from a crash by the termination message.

Contract (declared once here; the webhook validates, the controller applies, tests agree):

1. ``ANNOTATION_PROGRESS_DEADLINE`` on a PyTorchJob, or ``spec.progressDeadlineSeconds`` of its
   PlacementPolicy when the job has none, is the deadline: a positive whole number of seconds
   (``progress_deadline``; the webhook refuses anything else, the controller treats a malformed
   value as none). No deadline: no probe, no hang detection.
2. The Master's ``pytorch`` container gets ``PROGRESS_FILE_ENV`` (the path, ``PROGRESS_FILE``)
   and the probe (``liveness_probe``), unless it has a liveness probe of its own (kept as is:
   then torchgate detects no hang for it). The clock starts when the probe first runs and finds
   no file (it creates it): the training loop has the deadline to touch it for the first time.
3. A container whose termination message starts with ``HANG_MESSAGE`` ended by the probe
   (``is_hang``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from torchgate.pytorchjob.digits import parse_integer

ANNOTATION_PROGRESS_DEADLINE: Final = "torchgate.io/progress-deadline-seconds"
PROGRESS_FILE_ENV: Final = "TORCHGATE_PROGRESS_FILE"
PROGRESS_FILE: Final = "/tmp/torchgate-progress"
HANG_MESSAGE: Final = "torchgate: no progress"
TERMINATION_LOG: Final = "/dev/termination-log"
MAX_PERIOD_SECONDS: Final = 10


def parse_deadline(value: object) -> int | None:
    """A deadline's value as seconds, or ``None`` when it is not a positive whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str):
        number = parse_integer(value)
        return number if number is not None and number > 0 else None
    return None


def progress_deadline(annotations: Mapping[str, Any], policy_default: int | None) -> int | None:
    """Rule 1: the job's deadline (its annotation, else the policy's), ``None`` for none."""
    if ANNOTATION_PROGRESS_DEADLINE in annotations:
        return parse_deadline(annotations[ANNOTATION_PROGRESS_DEADLINE])
    return policy_default


def period_seconds(deadline: int) -> int:
    """How often the probe looks: a third of the deadline, at least 1 s and at most 10 s."""
    return max(1, min(MAX_PERIOD_SECONDS, deadline // 3))


def probe_script(deadline: int) -> str:
    """The POSIX shell the probe runs (``date``, ``stat`` and ``touch`` from the image)."""
    return (
        f'f="${{{PROGRESS_FILE_ENV}:-{PROGRESS_FILE}}}"; '
        '[ -e "$f" ] || touch "$f" || exit 0; '
        'age=$(( $(date +%s) - $(stat -c %Y "$f") )); '
        f'[ "$age" -le {deadline} ] && exit 0; '
        f'echo "{HANG_MESSAGE} for ${{age}}s (progress deadline {deadline}s): $f" '
        f"> {TERMINATION_LOG}; exit 1"
    )


def liveness_probe(deadline: int) -> dict[str, Any]:
    """Rule 2: the exec probe that fails, writing ``HANG_MESSAGE``, once the file is too old."""
    period = period_seconds(deadline)
    return {
        "exec": {"command": ["sh", "-c", probe_script(deadline)]},
        "periodSeconds": period,
        "timeoutSeconds": max(1, min(5, period)),
        "failureThreshold": 1,
    }


def is_hang(termination_message: object) -> bool:
    """Rule 3: the container was ended by the progress probe."""
    return isinstance(termination_message, str) and termination_message.startswith(HANG_MESSAGE)
