"""The fast route over real TCP: for any bytes a client sends, in any chunks, the same bytes back as from the same
extender without it, and the common call answered by it.

Two servers over one node cache, one with the compiled fast path and one without, get the
same cases in the same order: kube-scheduler's prioritize requests as Go writes them, and
the same with a header or a byte changed, dropped or added, pipelined, cut into chunks, or
cut short. Each case is sent on a connection of its own, half-closed after the last
chunk, and everything either server writes until it closes is compared.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator, Callable

import pytest

from agent.extender import NodeCache, ScoreWeights, sample
from agent.extender.http import HttpServer
from agent.extender.server import Extender, ExtenderApp, bound_port, build_app, start
from tests.unit.extender.factories import CATALOG, random_node
from tests.unit.extender.test_answer_from_bytes import request
from tests.unit.extender.test_fastpath import http

pytestmark = [
    pytest.mark.usefixtures("no_leaked_tasks"),
    pytest.mark.skipif(not sample.COMPILED, reason="the fast path is compiled code"),
]

NOW = 1_800_000_000.0
CASES = 1500
TIMEOUT_S = 5.0

HEADERS = [
    "Host: 127.0.0.1:8888\r\n",
    "User-Agent: Go-http-client/1.1\r\n",
    "Content-Type: application/json\r\n",
    "Content-Type: Application/JSON \r\n",
    "Content-Type: application/json; charset=utf-8\r\n",
    "Content-Type: text/plain\r\n",
    "Accept-Encoding: gzip\r\n",
    "Connection: close\r\n",
    "Connection: keep-alive\r\n",
    "Transfer-Encoding: chunked\r\n",
    "Expect: 100-continue\r\n",
    "X-Empty:\r\n",
    "X-Tab:\tvalue\t\r\n",
    " folded\r\n",
    "Bad Name: x\r\n",
    "NoColon\r\n",
]


def mutated(rng: random.Random, data: bytes) -> bytes:
    """``data`` with a few bytes changed, dropped or added, mostly in the head, where the framing is."""
    out = bytearray(data)
    head = data.find(b"\r\n\r\n") + 4 or len(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(head if rng.random() < 0.8 else len(out)) if out else 0
        kind = rng.random()
        if kind < 0.4 and at < len(out):
            out[at] = rng.choice(b'\r\n :\t\x00\x7f\xe9aZ0-+/;,{}"[]')
        elif kind < 0.7 and at < len(out):
            del out[at]
        else:
            out.insert(at, rng.choice(b"\r\n :\t0aZ"))
    return bytes(out)


def case(rng: random.Random, names: list[str], index: int) -> list[bytes]:
    """One case: the bytes a client sends, as the chunks it writes them in."""
    requests = []
    for part in range(rng.choice([1, 1, 1, 2, 3])):
        body = request(f"fuzz/p{index}-{part}", rng.choice(["aes", "aes", "sha"]), "1", rng.sample(names, 12))
        kind = rng.random()
        if kind < 0.35:
            data = http(body)
        elif kind < 0.6:
            lines = [f"Content-Length: {len(body)}\r\n", *rng.sample(HEADERS, rng.randint(0, 4))]
            rng.shuffle(lines)
            data = http(body, headers="".join(lines))
        else:
            data = mutated(rng, http(body))
        requests.append(data)
    data = b"".join(requests)
    if rng.random() < 0.1:
        data = data[: rng.randrange(len(data))]  # cut short
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.choice([0, 0, 1, 2, 5]))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


async def exchange(port: int, chunks: list[bytes]) -> bytes:
    """Send the chunks on a new connection, half-close it, and read what the server writes until it closes (a
    plain socket: what the server wrote before a reset is still read, where a stream reader would drop it)."""
    loop = asyncio.get_running_loop()
    received = bytearray()
    with socket.socket() as sock:
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        with contextlib.suppress(OSError):  # the server may answer an error and close before the end
            for chunk in chunks:
                await loop.sock_sendall(sock, chunk)
                await asyncio.sleep(0)
            sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(ConnectionError):  # reset once it closed: what it wrote before is what counts
            async with asyncio.timeout(TIMEOUT_S):
                while data := await loop.sock_recv(sock, 65536):
                    received += data
    return bytes(received)


@pytest.fixture
async def servers() -> AsyncIterator[tuple[int, int, list[str], Callable[[], int]]]:
    rng = random.Random(7)
    names = [f"node-{i}" for i in range(40)]
    cache = NodeCache()
    cache.replace([random_node(rng, name, NOW, [CATALOG], fitting=True) for name in names])
    fast = build_app(Extender(cache, ScoreWeights(), clock=lambda: NOW))
    plain: ExtenderApp = build_app(Extender(cache, ScoreWeights(), clock=lambda: NOW))
    plain.fast = None
    assert fast.fast is not None
    answered = 0
    done = fast.fast.done

    def counted(result: object) -> None:
        nonlocal answered
        answered += 1
        done(result)  # type: ignore[arg-type]

    fast.fast = fast.fast._replace(done=counted)
    running: list[HttpServer] = [await start(fast, "127.0.0.1", 0), await start(plain, "127.0.0.1", 0)]
    try:
        yield bound_port(running[0]), bound_port(running[1]), names, lambda: answered
    finally:
        for server in running:
            await server.cleanup()


async def test_any_bytes_in_any_chunks_get_the_same_answer_with_the_fast_route_as_without(
    servers: tuple[int, int, list[str], Callable[[], int]],
) -> None:
    fast_port, plain_port, names, answered = servers
    rng = random.Random(11)
    statuses: dict[bytes, int] = {}
    for index in range(CASES):
        chunks = case(rng, names, index)
        with_fast = await exchange(fast_port, chunks)
        without = await exchange(plain_port, chunks)
        assert with_fast == without, f"case {index}: {b''.join(chunks)[:300]!r}"
        for line in with_fast.split(b"\r\n"):
            if line.startswith(b"HTTP/1.1 "):
                statuses[line[9:12]] = statuses.get(line[9:12], 0) + 1
    # the cases reached the answers, the errors and the fast route, each many times
    assert statuses.get(b"200", 0) > CASES // 3, statuses
    assert statuses.get(b"400", 0) > CASES // 20, statuses
    assert answered() > CASES // 4, answered()
