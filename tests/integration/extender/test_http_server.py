"""The extender's HTTP server at the byte level, over real TCP: what the Go client and a hostile one send."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator

import pytest

import agent.extender.http
from tests.integration.extender.conftest import ExtenderUnderTest, pod

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")
TIMEOUT_S = 5.0


def request(path: str, body: bytes, *extra: str, method: str = "POST", version: str = "1.1") -> bytes:
    head = [f"{method} {path} HTTP/{version}", "Host: extender", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    async with asyncio.timeout(TIMEOUT_S):
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")[:-2]
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split()[1]), headers, body


@pytest.fixture
async def served(extender: ExtenderUnderTest) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    port = int(extender.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        await writer.wait_closed()


BODY = json.dumps({"Pod": pod("aes"), "NodeNames": ["a", "b"]}).encode()


async def test_pipelined_requests_are_answered_in_order_on_one_connection(
    served: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    reader, writer = served
    writer.write(request("/prioritize", BODY) + request("/healthz", b"", method="GET") + request("/filter", BODY))
    answers = [await read_answer(reader) for _ in range(3)]
    assert [status for status, _, _ in answers] == [200, 503, 200]  # the cache was never synced
    assert json.loads(answers[0][2]) == []
    assert json.loads(answers[2][2])["NodeNames"] == ["a", "b"]
    assert all("connection" not in headers for _, headers, _ in answers)  # kept alive


@pytest.mark.parametrize(
    ("extra", "version"),
    [pytest.param(("Connection: close",), "1.1", id="connection-close"), pytest.param((), "1.0", id="http-1.0")],
)
async def test_the_connection_closes_after_the_answer_when_asked(
    served: tuple[asyncio.StreamReader, asyncio.StreamWriter], extra: tuple[str, ...], version: str
) -> None:
    reader, writer = served
    writer.write(request("/prioritize", BODY, *extra, version=version))
    status, headers, _ = await read_answer(reader)
    assert (status, headers["connection"]) == (200, "close")
    async with asyncio.timeout(TIMEOUT_S):
        assert await reader.read() == b""


async def test_expect_100_continue_gets_its_interim_answer(
    served: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    reader, writer = served
    head = request("/prioritize", BODY, "Expect: 100-continue")
    writer.write(head[: -len(BODY)])
    async with asyncio.timeout(TIMEOUT_S):
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(BODY)
    assert (await read_answer(reader))[0] == 200


async def test_a_malformed_request_gets_400_and_the_connection_closes(
    served: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    reader, writer = served
    writer.write(b"POST /prioritize HTTP/1.1\r\nContent-Length: banana\r\n\r\n")
    status, headers, body = await read_answer(reader)
    assert status == 400
    assert json.loads(body)["Error"].startswith("malformed HTTP request")
    assert headers["connection"] == "close"


async def test_a_declared_body_over_the_limit_is_refused_before_it_is_read() -> None:
    async with ExtenderUnderTest(max_body_bytes=1000) as extender:
        port = int(extender.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"POST /filter HTTP/1.1\r\nContent-Length: 5000000\r\n\r\n")  # no body sent at all
            status, _, body = await read_answer(reader)
        finally:
            writer.close()
            await writer.wait_closed()
    assert (status, json.loads(body)) == (413, {"Error": "the body is larger than 1000 bytes"})


async def test_a_body_that_never_arrives_gets_408_within_the_request_timeout(
    extender: ExtenderUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent.extender.http, "REQUEST_TIMEOUT_S", 0.3)  # before the connection, as a constant is
    reader, writer = await asyncio.open_connection("127.0.0.1", int(extender.url.rsplit(":", 1)[1]))
    try:
        await _request_then_idle(reader, writer)  # the timeout holds for a later request on a kept connection too
        writer.write(request("/prioritize", BODY)[:-10])  # Content-Length promises 10 bytes more than come
        status, headers, body = await read_answer(reader)
    finally:
        writer.close()
    assert status == 408
    assert "did not arrive" in json.loads(body)["Error"]
    assert headers["connection"] == "close"


async def _request_then_idle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One whole request answered, then a pause: the next request starts while the connection's timer waits."""
    writer.write(request("/prioritize", BODY))
    status, _, _ = await read_answer(reader)
    assert status == 200
    await asyncio.sleep(0.2)


async def test_a_client_that_leaves_mid_request_is_no_error(
    extender: ExtenderUnderTest, caplog: pytest.LogCaptureFixture
) -> None:
    port = int(extender.url.rsplit(":", 1)[1])
    for _ in range(5):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request("/prioritize", BODY)[:40])
        await writer.drain()
        writer.transport.abort()
    status, _ = await extender.post("/prioritize", {"Pod": pod("aes"), "NodeNames": ["a"]})
    assert status == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        pytest.param("application/json", 200, id="json"),
        pytest.param("application/json; charset=utf-8", 200, id="json-with-charset"),
        pytest.param("text/plain", 415, id="text"),
        pytest.param("application/x-www-form-urlencoded", 415, id="form-as-curl-sends"),
    ],
)
async def test_a_body_that_is_not_json_gets_415(
    served: tuple[asyncio.StreamReader, asyncio.StreamWriter], content_type: str, status: int
) -> None:
    reader, writer = served
    writer.write(request("/prioritize", BODY, f"Content-Type: {content_type}"))
    got, _, body = await read_answer(reader)
    assert got == status
    if status == 415:
        assert json.loads(body)["Error"] == (
            f"415 Unsupported Media Type: the body must be application/json, got {content_type!r}"
        )


async def test_the_work_after_an_answer_runs_once_it_is_on_the_wire_and_its_failure_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = socket.socket()
    received: list[bytes] = []
    ran = asyncio.Event()

    def after() -> None:  # the client's socket already holds the whole answer when this runs
        ran.set()
        client.settimeout(TIMEOUT_S)
        received.append(client.recv(65536))
        if len(received) == 2:
            raise RuntimeError("bookkeeping failed")

    def handle(method: str, path: str, content_type: str, body: bytes) -> agent.extender.http.Reply:
        return agent.extender.http.Reply(200, "application/json", b'{"n":%d}' % (len(received) + 1), after=after)

    server = await agent.extender.http.start_server(handle, "127.0.0.1", 0, max_body_bytes=1000)
    try:
        client.setblocking(False)
        await asyncio.get_running_loop().sock_connect(client, server.addresses[0])
        for _ in range(3):
            ran.clear()
            client.sendall(request("/x", b"{}"))
            async with asyncio.timeout(TIMEOUT_S):
                await ran.wait()
            client.setblocking(False)
    finally:
        client.close()
        await server.cleanup()
    assert [answer.rsplit(b"\r\n\r\n", 1)[1] for answer in received] == [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    failures = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert [record.getMessage() for record in failures] == ["extender: the work after answering POST /x failed"]
