"""Log lines as JSON objects, so cluster log pipelines can filter by job without parsing prose.

``--log-format json`` on ``torchgate webhook`` and ``torchgate controller`` installs
``JsonFormatter``: one object per line with ``time``, ``level``, ``logger``, ``msg`` and any
structured fields a call passes through ``extra`` (the controller passes ``job``: the job key
``namespace/name``; the webhook passes ``uid``: the AdmissionReview uid).
"""

from __future__ import annotations

import argparse
import json
import logging
from datetime import UTC, datetime
from typing import Final

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD: Final = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON, with its ``extra`` fields."""
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def formatter(fmt: str) -> logging.Formatter:
    """The formatter for ``--log-format``: ``json`` or ``text``."""
    if fmt == "json":
        return JsonFormatter()
    return logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format``, the same on every long-running command."""
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"], help="(default INFO)"
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one object per line (default text)",
    )


def configure(args: argparse.Namespace) -> None:
    """Send the root logger to stderr at ``--log-level`` in ``--log-format``."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(args.log_format))
    logging.basicConfig(level=args.log_level, handlers=[handler], force=True)
