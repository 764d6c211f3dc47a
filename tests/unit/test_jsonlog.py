"""JSON log lines carry the structured fields callers pass (the controller's job key)."""

from __future__ import annotations

import json
import logging

from torchgate.jsonlog import formatter


def test_json_lines_carry_extra_fields_and_exceptions() -> None:
    record = logging.LogRecord(
        "torchgate.controller", logging.WARNING, "f", 1, "%s: failed", ("a/b",), None
    )
    record.job = "a/b"
    line = json.loads(formatter("json").format(record))
    assert line["msg"] == "a/b: failed"
    assert line["job"] == "a/b"
    assert line["level"] == "WARNING"
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(formatter("json").format(record))["exception"]


def test_text_format_is_the_default_human_one() -> None:
    record = logging.LogRecord("x", logging.INFO, "f", 1, "hello", (), None)
    assert formatter("text").format(record).endswith("INFO x: hello")
