"""Arbitrary bodies over real HTTP: a 200 with a well-formed answer or a 400 with an Error, never a 500.

The server runs on its own loop in a thread so that hypothesis can drive it with a
plain blocking HTTP client (one kept-alive connection, as kube-scheduler keeps).
"""

from __future__ import annotations

import copy
import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.extender.table import StateTable
from tests.integration.extender.conftest import Cluster, extender_in_thread, pod, sample
from tests.unit.extender.factories import slot

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=25,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document, as a path of keys and indexes."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    result = copy.deepcopy(document)
    target = result
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return result


def _valid_request() -> dict[str, Any]:
    args: dict[str, Any] = sample("extender-prioritize-request.json")
    args["Pod"] = pod("aes", 2, **{"example.com/fpga-bitstream.main": "sha"})
    args["NodeNames"] = ["n1", "n2", "unknown"]
    return args


VALID = _valid_request()
PATHS = list(_paths(VALID))


@st.composite
def mutated_requests(draw: st.DrawFn) -> bytes:
    """The valid request with one place (anywhere, the whole body included) replaced by any JSON."""
    path = draw(st.sampled_from(PATHS))
    return json.dumps(_replace(VALID, path, draw(json_values))).encode()


bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated_requests(),
)


class Client:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)

    def post(self, path: str, body: bytes) -> tuple[int, Any]:
        self.connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = self.connection.getresponse()
        data = response.read()
        assert response.getheader("Content-Type", "").startswith("application/json")
        return response.status, json.loads(data)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    cache = StateTable()
    cluster = Cluster()
    cluster.add("n1", [slot("s0", bitstream="aes"), slot("s1")])
    cluster.add("n2", [slot("s0", bitstream="sha", free=False)])
    cluster.add("unknown", None)  # a node that publishes nothing: neutral
    cache.replace_watched(cluster.watched())
    with extender_in_thread(cache) as url:
        client = Client(url)
        try:
            yield client
        finally:
            client.connection.close()


def test_the_valid_request_is_served(client: Client) -> None:
    status, answer = client.post("/prioritize", json.dumps(VALID).encode())
    assert status == 200
    assert [entry["Host"] for entry in answer] == ["n1", "unknown"]  # n2 (full) is the floor: 0, left out


@pytest.mark.parametrize("path", ["/filter", "/prioritize"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_any_body_gets_an_answer_or_a_400_with_error(client: Client, path: str, body: bytes) -> None:
    status, answer = client.post(path, body)
    assert status in (200, 400), answer
    if status == 400:
        assert isinstance(answer["Error"], str)
        assert answer["Error"]
        assert "Traceback" not in answer["Error"]
    elif path == "/filter":
        assert answer["Error"] == ""
        assert set(answer) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    else:
        assert isinstance(answer, list)
        assert all(set(entry) == {"Host", "Score"} and 0 <= entry["Score"] <= 10 for entry in answer)
