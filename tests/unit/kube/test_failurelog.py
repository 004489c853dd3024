"""Failures are said once per kind; recovery is said once."""

from __future__ import annotations

import logging

import pytest

from agent.kube.client import FailureLog

LOGGER = "tests.failurelog"


def _levels(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


@pytest.mark.parametrize(
    ("kinds", "warnings"),
    [
        pytest.param(["HTTP 403"] * 5, 1, id="same-kind-repeated"),
        pytest.param(["HTTP 403", "connection", "HTTP 403", "connection"], 2, id="two-kinds"),
        pytest.param([], 0, id="none"),
    ],
)
def test_first_failure_of_each_kind_is_a_warning(
    caplog: pytest.LogCaptureFixture, kinds: list[str], warnings: int
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    log = FailureLog(logging.getLogger(LOGGER), "posting Events")
    for kind in kinds:
        log.failed(kind, f"{kind} refused", "dropped")
    levels = [level for level, _ in _levels(caplog)]
    assert levels.count(logging.WARNING) == warnings
    assert levels.count(logging.DEBUG) == len(kinds) - warnings


def test_success_after_failures_is_said_once_and_resets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    log = FailureLog(logging.getLogger(LOGGER), "listing pods on node n1")
    log.failed("connection", "cannot reach the API server", "trying again in 1.0s")
    log.failed("connection", "cannot reach the API server", "trying again in 2.0s")
    log.succeeded()
    log.succeeded()
    log.failed("connection", "cannot reach the API server")

    assert _levels(caplog) == [
        (logging.WARNING, "listing pods on node n1 failed: cannot reach the API server; trying again in 1.0s"),
        (logging.DEBUG, "listing pods on node n1 failed: cannot reach the API server; trying again in 2.0s"),
        (logging.INFO, "listing pods on node n1 works again after 2 failed attempts"),
        (logging.WARNING, "listing pods on node n1 failed: cannot reach the API server"),
    ]
