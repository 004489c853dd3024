"""EventRecorder over real HTTP: the Events the API server requires, and failures that never reach the caller."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.kube.client import build_api_client
from agent.kube.events import EventRecorder, PodEvent
from tests.fakeapi import FakeKubeApiServer, running_apiserver
from tests.integration.kube.conftest import TIMEOUT_S

EVENTS = "/api/v1/namespaces/default/events"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@contextlib.asynccontextmanager
async def sending(recorder: EventRecorder) -> AsyncIterator[EventRecorder]:
    task = asyncio.create_task(recorder.run(), name="event-sender-under-test")
    try:
        yield recorder
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def recorder(api_client: client.ApiClient) -> EventRecorder:
    return EventRecorder(api_client, "node-a", retry_delays_s=(0.0, 0.0))


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Our warnings (urllib3 logs its own retries)."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("agent.")]


def _given_up(caplog: pytest.LogCaptureFixture) -> int:
    """How many Events the recorder gave up on: its log says so once for each (at DEBUG after the first)."""
    return sum(r.getMessage().endswith("; dropped") for r in caplog.records if r.name == "agent.kube.events")


def _rfc3339(value: str) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(value)
    assert moment.tzinfo is not None, f"{value} has no zone"
    return moment


@pytest.mark.parametrize("event_type", [pytest.param("Normal", id="normal"), pytest.param("Warning", id="warning")])
async def test_posted_event_has_what_the_api_server_requires(
    apiserver: FakeKubeApiServer, recorder: EventRecorder, caplog: pytest.LogCaptureFixture, event_type: str
) -> None:
    pod = apiserver.add_pod("fpga-job-0", namespace="ml")
    uid = pod["metadata"]["uid"]

    async with sending(recorder):
        await recorder.post(
            "ml", "fpga-job-0", uid, "Programmed", "Programmed slot card0-slot1 with aes in 812 ms", event_type
        )
        assert await recorder.flush(TIMEOUT_S)

    assert _warnings(caplog) == []
    [event] = apiserver.events("ml")
    assert event["metadata"]["namespace"] == "ml"
    assert DNS_SUBDOMAIN.match(event["metadata"]["name"])
    assert event["metadata"]["name"].startswith("fpga-job-0.")
    assert event["involvedObject"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": "ml",
        "name": "fpga-job-0",
        "uid": uid,
    }
    assert event["reason"] == "Programmed"
    assert event["message"] == "Programmed slot card0-slot1 with aes in 812 ms"
    assert event["type"] == event_type
    assert event["source"] == {"component": "fpga-slot", "host": "node-a"}
    assert event["reportingComponent"] == "fpga-slot"
    assert event["reportingInstance"] == "node-a"
    assert event["count"] == 1
    assert _rfc3339(event["firstTimestamp"]) == _rfc3339(event["lastTimestamp"])
    assert "eventTime" not in event  # a core/v1 Event, validated as the kubelet's are
    [post] = apiserver.requests("POST", "/api/v1/namespaces/ml/events")
    # The client may leave Content-Type out on a create; the API server then reads JSON, its first media type.
    assert post.headers.get("content-type", "application/json").startswith("application/json")


async def test_events_are_posted_in_order_with_distinct_names(
    apiserver: FakeKubeApiServer, recorder: EventRecorder
) -> None:
    async with sending(recorder):
        for n in range(5):
            await recorder.post("default", "p", "uid-1", "Programmed", f"event {n}")
        assert await recorder.flush(TIMEOUT_S)
    events = apiserver.events("default")
    assert [e["message"] for e in events] == [f"event {n}" for n in range(5)]
    assert len({e["metadata"]["name"] for e in events}) == 5


async def test_event_without_uid_and_long_fields_is_still_valid(
    apiserver: FakeKubeApiServer, recorder: EventRecorder
) -> None:
    long_name = "p" * 253
    async with sending(recorder):
        await recorder.post("default", long_name, "", "R" * 300, "m" * 5000, "Warning")
        assert await recorder.flush(TIMEOUT_S)
    [event] = apiserver.events()
    assert "uid" not in event["involvedObject"]
    assert len(event["metadata"]["name"]) <= 253
    assert len(event["reason"]) == 128
    assert len(event["message"]) == 1024


async def test_unknown_event_type_is_posted_as_warning(
    apiserver: FakeKubeApiServer, recorder: EventRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    async with sending(recorder):
        await recorder.post("default", "p", "u", "Odd", "odd type", "Error")
        assert await recorder.flush(TIMEOUT_S)
    assert apiserver.events()[0]["type"] == "Warning"
    assert any("unknown type 'Error'" in r.getMessage() for r in caplog.records)


def _forbidden(api: FakeKubeApiServer) -> None:
    api.fail_next("POST", EVENTS, 403, times=100, message='events is forbidden: User "system:serviceaccount:x"')


def _server_error(api: FakeKubeApiServer) -> None:
    api.fail_next("POST", EVENTS, 500, times=100)


def _throttled(api: FakeKubeApiServer) -> None:
    api.fail_next("POST", EVENTS, 429, times=100)


def _no_namespace(api: FakeKubeApiServer) -> None:
    api.namespaces.discard("default")


def _no_credentials(api: FakeKubeApiServer) -> None:
    api.token = "rotated"


@pytest.mark.parametrize(
    ("breakage", "kind", "attempts_per_event"),
    [
        pytest.param(_forbidden, "HTTP 403", 1, id="forbidden-not-retried"),
        pytest.param(_no_namespace, "HTTP 404", 1, id="namespace-gone-not-retried"),
        pytest.param(_no_credentials, "HTTP 401", 1, id="unauthorized-not-retried"),
        pytest.param(_server_error, "HTTP 500", 3, id="server-error-retried"),
        pytest.param(_throttled, "HTTP 429", 3, id="throttled-retried"),
    ],
)
async def test_refused_posts_are_logged_once_and_never_raised(
    apiserver: FakeKubeApiServer,
    recorder: EventRecorder,
    caplog: pytest.LogCaptureFixture,
    breakage: Callable[[FakeKubeApiServer], None],
    kind: str,
    attempts_per_event: int,
) -> None:
    caplog.set_level(logging.DEBUG, "agent.kube")
    breakage(apiserver)
    async with sending(recorder):
        for n in range(3):
            await recorder.post("default", "p", "u", "Programmed", f"event {n}")
        assert await recorder.flush(TIMEOUT_S)

    assert _given_up(caplog) == 3
    assert apiserver.events() == []
    assert len(apiserver.requests("POST", EVENTS)) == 3 * attempts_per_event
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert kind in warnings[0]
    assert "Programmed on pod default/p" in warnings[0]


async def test_an_invalid_event_is_a_422_logged_not_raised(
    apiserver: FakeKubeApiServer, recorder: EventRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    async with sending(recorder):
        await recorder.post("default", "Not_A_Pod_Name", "u", "Programmed", "bad object name")
        assert await recorder.flush(TIMEOUT_S)
    [warning] = _warnings(caplog)
    assert warning.endswith("; dropped")
    assert "HTTP 422" in warning
    assert "metadata.name" in warning


async def test_a_transient_failure_is_retried_and_recovery_is_said(
    apiserver: FakeKubeApiServer, recorder: EventRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "agent.kube")
    apiserver.fail_next("POST", EVENTS, 503, times=1)
    async with sending(recorder):
        await recorder.post("default", "p", "u", "Programmed", "after one 503")
        assert await recorder.flush(TIMEOUT_S)
    assert _given_up(caplog) == 0
    assert [e["message"] for e in apiserver.events()] == ["after one 503"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("HTTP 503" in m for m in messages)
    assert any("posting Events works again" in m for m in messages)


async def test_an_unreachable_api_server_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "agent.kube")
    with running_apiserver() as gone:
        kubeconfig = gone.write_kubeconfig(tmp_path / "kubeconfig")
    api_client = build_api_client(kubeconfig)  # the server has stopped: its port refuses connections
    try:
        recorder = EventRecorder(api_client, "node-a", retry_delays_s=(0.0,))
        async with sending(recorder):
            await recorder.post("default", "p", "u", "Programmed", "one")
            await recorder.post("default", "p", "u", "Programmed", "two")
            assert await recorder.flush(TIMEOUT_S)
        assert _given_up(caplog) == 2
        warnings = _warnings(caplog)
        assert len(warnings) == 1, warnings
        assert "cannot reach the API server" in warnings[0]
    finally:
        api_client.close()


async def test_a_full_queue_drops_the_oldest(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = EventRecorder(api_client, "node-a", queue_size=2)
    for n in range(4):  # the sender is not running yet: nothing leaves the queue
        await recorder.post("default", "p", "u", "Programmed", f"event {n}")
    assert sum("Event queue full" in r.getMessage() for r in caplog.records) == 2

    async with sending(recorder):
        assert await recorder.flush(TIMEOUT_S)
    assert [e["message"] for e in apiserver.events()] == ["event 2", "event 3"]


async def test_post_returns_before_the_event_is_sent(apiserver: FakeKubeApiServer, recorder: EventRecorder) -> None:
    await recorder.post("default", "p", "u", "Programmed", "queued")
    assert apiserver.requests("POST") == []
    assert await recorder.flush(0.01) is False
    async with sending(recorder):
        assert await recorder.flush(TIMEOUT_S)
    assert len(apiserver.events()) == 1


async def test_stopping_with_queued_events_says_how_many(
    api_client: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "agent.kube")
    recorder = EventRecorder(api_client, "node-a")
    await recorder.post("default", "p", "u", "Programmed", "in flight")
    await recorder.post("default", "p", "u", "Programmed", "still queued")
    task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0)  # one loop turn: the sender takes the first event and awaits its post
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert any("stopping with 1 Events not posted" in r.getMessage() for r in caplog.records)


def test_event_body_is_json_the_client_accepts(api_client: client.ApiClient) -> None:
    """The body round-trips through the client's own model without losing a field."""
    recorder = EventRecorder(api_client, "node-a", component="example.com/fpga-slot")
    body = recorder.event_body(PodEvent("default", "p", "u", "Programmed", "m", "Normal", 0.0))
    model = client.CoreV1Event.from_dict(body)
    assert model is not None
    sent: dict[str, Any] = api_client.sanitize_for_serialization(model)
    assert set(sent) == set(body)
    assert sent["firstTimestamp"].startswith("1970-01-01T00:00:00")
    assert sent["source"] == {"component": "example.com/fpga-slot", "host": "node-a"}
