"""A client that pipelines requests and never reads the answers cannot make the extender hold more than a few MiB.

The defect: the hand-written server read on and queued every answer (one client sending 40 MiB of ``GET /x``
took the extender from 32 to 448 MiB). Now the server stops reading a connection whose answers are not read.
"""

from __future__ import annotations

import asyncio
import socket
import tracemalloc

import pytest

from agent.extender.server import bound_port
from tests.integration.extender.conftest import ExtenderUnderTest

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

#: What the client tries to send: 40 MiB of pipelined requests, as in the report.
ATTEMPT_BYTES = 40 * 1024 * 1024
#: The client gives up once the server has taken nothing for this long (its receive window is full).
STALL_S = 2.0
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: extender\r\n\r\n"


def pipeline_without_reading(port: int) -> int:
    """Send pipelined requests and read nothing; the bytes the server took before it stopped taking them."""
    chunk = REQUEST * (65536 // len(REQUEST))
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.settimeout(STALL_S)
        while sent < ATTEMPT_BYTES:
            try:
                sent += client.send(chunk)
            except TimeoutError:
                break
    return sent


async def test_a_client_that_never_reads_cannot_grow_the_extender() -> None:
    async with ExtenderUnderTest() as extender:
        assert extender.runner is not None
        port = bound_port(extender.runner)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            sent = await asyncio.to_thread(pipeline_without_reading, port)
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert sent < ATTEMPT_BYTES // 4, sent  # the server stopped reading: the kernel's buffers filled up
    assert grown < 4 * 1024 * 1024, grown  # a few MiB at most: the requests it took and their unread answers
