"""setup_logging: one line per record, JSON objects for collectors."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from agent.output.logs import MAX_MESSAGE_CHARS, JsonFormatter, setup_logging


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """Restore the root logger's handlers and level after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield root
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_json_format_gives_one_object_per_line(root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("debug", "json")
    log = logging.getLogger("agent.test")
    log.info("slot %s programmed", "simcard0-slot0")
    log.warning('odd "quotes" and\nnewline in slot %s', "simcard1-slot1")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("programming slot %s failed", "simcard0-slot1")

    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    entries = [json.loads(line) for line in lines]
    assert [(e["level"], e["logger"], e["msg"]) for e in entries] == [
        ("info", "agent.test", "slot simcard0-slot0 programmed"),
        ("warning", "agent.test", 'odd "quotes" and\nnewline in slot simcard1-slot1'),
        ("error", "agent.test", "programming slot simcard0-slot1 failed"),
    ]
    assert all(e["time"].endswith("Z") and "T" in e["time"] for e in entries)
    assert "RuntimeError: boom" in entries[2]["exc"]
    assert "exc" not in entries[0]


def test_no_message_forges_a_line_or_grows_without_bound(
    root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("info", "text")
    log = logging.getLogger("agent.test")
    log.warning("rejected %s", "x\n2026-11-24 00:00:00,000 INFO    agent: forged line")
    log.warning("rejected %s", "y" * 100_000)
    first, second = capsys.readouterr().err.splitlines()
    assert first.endswith("rejected x\\n2026-11-24 00:00:00,000 INFO    agent: forged line")
    assert len(second) < MAX_MESSAGE_CHARS + 200
    assert second.endswith(f"... ({len('rejected ') + 100_000} characters)")


def test_text_format_is_one_readable_line(root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info", "text")
    logging.getLogger("agent.test").info("serving on %s", "/tmp/x.sock")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("INFO    agent.test: serving on /tmp/x.sock")


@pytest.mark.parametrize(
    ("level", "shown", "hidden"),
    [
        pytest.param("warning", "warning", "info", id="warning"),
        pytest.param("error", "error", "warning", id="error"),
        pytest.param("debug", "debug", None, id="debug"),
    ],
)
def test_level_filters(
    root_logger: logging.Logger,
    capsys: pytest.CaptureFixture[str],
    level: str,
    shown: str,
    hidden: str | None,
) -> None:
    setup_logging(level, "json")
    log = logging.getLogger("agent.test")
    log.log(logging.getLevelName(shown.upper()), "shown")
    if hidden is not None:
        log.log(logging.getLevelName(hidden.upper()), "hidden")
    entries = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [e["msg"] for e in entries] == ["shown"]


def test_setup_replaces_previous_handlers(root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info", "text")
    setup_logging("info", "json")
    assert len(root_logger.handlers) == 1
    logging.getLogger("agent.test").info("once")
    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line)["msg"] == "once"


def test_json_formatter_time_has_milliseconds() -> None:
    record = logging.LogRecord("agent.x", logging.INFO, __file__, 1, "m", None, None)
    record.created, record.msecs = 0.0, 7.9
    assert json.loads(JsonFormatter().format(record))["time"] == "1970-01-01T00:00:00.007Z"
