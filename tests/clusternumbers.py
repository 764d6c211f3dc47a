"""Numbers written in a manifest, and what the cluster made of them (recorded by an e2e test).

Each case is seed 003 (``shared/seeds/manifests/003-torchrun-cpu.yaml``) with one number written
at one field, as a user writes it in YAML. ``tests/e2e/test_check_numbers_e2e.py`` sends each to
the real apiserver (with the webhook registered) as ``kubectl apply`` does and holds the cluster
to the verdict recorded here: admitted, with the value the apiserver stored at the field, or
refused with these ``(reason, field)`` causes. ``tests/unit/webhook/test_check_numbers.py`` holds
``torchgate check`` to the same table offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

SEED_003: Final = (
    Path(__file__).resolve().parents[1].parent / "shared" / "seeds" / "manifests"
) / "003-torchrun-cpu.yaml"

_MASTER_POD_SPEC: Final = "    Master:\n      replicas: 1\n      restartPolicy: OnFailure\n"
_WORKER_REPLICAS: Final = "    Worker:\n      replicas: 1\n"
_TOLERATION: Final = (
    "          tolerations:\n"
    "            - {key: example.com/drain, operator: Exists, effect: NoExecute, "
    "tolerationSeconds: %s}\n"
)
_POD_SPEC_START: Final = "        spec:\n"

TOLERATION_SECONDS: Final = (
    "spec",
    "pytorchReplicaSpecs",
    "Master",
    "template",
    "spec",
    "tolerations",
    0,
    "tolerationSeconds",
)
WORKER_REPLICAS: Final = ("spec", "pytorchReplicaSpecs", "Worker", "replicas")

_TYPE_INVALID: Final = "FieldValueTypeInvalid"
_TOLERATION_FIELD: Final = (
    "spec.pytorchReplicaSpecs.Master.template.spec.tolerations[0].tolerationSeconds"
)
_REPLICAS_FIELD: Final = "spec.pytorchReplicaSpecs.Worker.replicas"
_WEBHOOK_TOLERATION: Final = frozenset(
    {("FieldValueInvalid", _TOLERATION_FIELD.replace(".Master.", "[Master]."))}
)
_SCALE_REPLICAS: Final = ("FieldValueInvalid", "." + _REPLICAS_FIELD)
"""The scale subresource's check of its replicas path (``ValidateScaleSpec``)."""
_OUT_OF_INT32_REPLICAS: Final = frozenset({("FieldValueInvalid", "<nil>"), _SCALE_REPLICAS})
"""kube-openapi's range check (``IsValueValidAgainstRange``, an error without a path) and the
scale subresource's."""
_NEGATIVE_REPLICAS: Final = frozenset({_SCALE_REPLICAS})
_NOT_AN_INT32_REPLICAS: Final = _OUT_OF_INT32_REPLICAS | {(_TYPE_INVALID, _REPLICAS_FIELD)}
"""The type check, the range check, and the scale subresource's (a float64 is no int64)."""


@dataclass(frozen=True)
class NumberCase:
    """A number written at a field, and the cluster's verdict on the job.

    ``stored``: the value the apiserver stored at the field when it admitted the job (``None``
    when it refused it); ``causes``: the ``(reason, field)`` of its refusal.
    """

    name: str
    field: tuple[str | int, ...]
    written: str
    stored: Any = None
    causes: frozenset[tuple[str, str]] = frozenset()

    @property
    def admitted(self) -> bool:
        """Whether the cluster admitted the job."""
        return not self.causes

    def manifest(self) -> str:
        """Seed 003 with ``written`` at the field, as the user's YAML text."""
        text = SEED_003.read_text(encoding="utf-8")
        if self.field == TOLERATION_SECONDS:
            start = text.index(_MASTER_POD_SPEC)
            at = text.index(_POD_SPEC_START, start) + len(_POD_SPEC_START)
            return text[:at] + _TOLERATION % self.written + text[at:]
        assert self.field == WORKER_REPLICAS
        assert _WORKER_REPLICAS in text
        return text.replace(_WORKER_REPLICAS, f"    Worker:\n      replicas: {self.written}\n", 1)


def value_at(obj: Any, field: tuple[str | int, ...]) -> Any:
    """The value at ``field`` of a job (``KeyError``/``IndexError`` when there is none)."""
    for segment in field:
        obj = obj[segment]
    return obj


NUMBER_CASES: Final = (
    NumberCase("tolerationSeconds-1.0", TOLERATION_SECONDS, "1.0", stored=1),
    NumberCase("tolerationSeconds-1e3", TOLERATION_SECONDS, "1e3", stored=1000),
    NumberCase("tolerationSeconds-1.0e+16", TOLERATION_SECONDS, "1.0e+16", stored=10**16),
    NumberCase("tolerationSeconds-0o17", TOLERATION_SECONDS, "0o17", stored=15),
    NumberCase("tolerationSeconds-1_000", TOLERATION_SECONDS, "1_000", stored=1000),
    # The template is not typed by the CRD: what the webhook was sent, it refused.
    NumberCase("tolerationSeconds-1.5", TOLERATION_SECONDS, "1.5", causes=_WEBHOOK_TOLERATION),
    NumberCase("tolerationSeconds-1:30", TOLERATION_SECONDS, "1:30", causes=_WEBHOOK_TOLERATION),
    NumberCase("tolerationSeconds-1e21", TOLERATION_SECONDS, "1e21", causes=_WEBHOOK_TOLERATION),
    NumberCase(
        "tolerationSeconds-20-digits",
        TOLERATION_SECONDS,
        "100000000000000000000",
        causes=_WEBHOOK_TOLERATION,
    ),
    NumberCase("replicas-2.0", WORKER_REPLICAS, "2.0", stored=2),
    NumberCase("replicas-1e1", WORKER_REPLICAS, "1e1", stored=10),
    # The CRD types replicas (integer, int32) and names it the scale subresource's replicas.
    NumberCase("replicas-1.5", WORKER_REPLICAS, "1.5", causes=_NOT_AN_INT32_REPLICAS),
    NumberCase("replicas-1e21", WORKER_REPLICAS, "1e21", causes=_NOT_AN_INT32_REPLICAS),
    NumberCase(
        "replicas-20-digits",
        WORKER_REPLICAS,
        "100000000000000000000",
        causes=_NOT_AN_INT32_REPLICAS,
    ),
    NumberCase("replicas-3e9", WORKER_REPLICAS, "3e9", causes=_OUT_OF_INT32_REPLICAS),
    NumberCase("replicas--1.0", WORKER_REPLICAS, "-1.0", causes=_NEGATIVE_REPLICAS),
)
"""The cases, with the verdicts the e2e test recorded."""
