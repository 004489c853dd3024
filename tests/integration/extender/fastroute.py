"""Byte streams for the fast route's differential checks (``test_fast_route.py``, ``bench/soak.py``): two servers
over one node cache, one with the compiled fast path and one without, and the same cases sent to both.

A case is kube-scheduler's prioritize requests as Go writes them, or the same with a header or
a byte changed, dropped or added, pipelined, cut into chunks, or cut short. Each case is sent
on a connection of its own, half-closed after the last chunk, and everything each server
writes until it closes is compared.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from agent.extender import NodeCache, ScoreWeights
from agent.extender.http import HttpServer
from agent.extender.server import Extender, bound_port, build_app, start
from tests.unit.extender.factories import CATALOG, random_node
from tests.unit.extender.test_answer_from_bytes import request
from tests.unit.extender.test_fastpath import http

NOW = 1_800_000_000.0
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
        data = data[: rng.randrange(1, len(data))]  # cut short
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


@dataclass
class Pair:
    """The two servers' ports, the node names, and the requests the fast route answered so far."""

    fast_port: int
    plain_port: int
    names: list[str]
    answered: int = 0


@dataclass
class Outcome:
    """What the cases got: the status of every response, and the cases whose two answers differ."""

    statuses: dict[bytes, int] = field(default_factory=dict)
    differ: list[tuple[int, bytes]] = field(default_factory=list)


@contextlib.asynccontextmanager
async def paired_servers(seed: int = 7) -> AsyncIterator[Pair]:
    """The two servers, on this event loop, until the block ends."""
    rng = random.Random(seed)
    names = [f"node-{i}" for i in range(40)]
    cache = NodeCache()
    cache.replace([random_node(rng, name, NOW, [CATALOG], fitting=True) for name in names])
    fast = build_app(Extender(cache, ScoreWeights(), clock=lambda: NOW))
    plain = build_app(Extender(cache, ScoreWeights(), clock=lambda: NOW))
    plain.fast = None
    serve = fast.fast
    assert serve is not None
    pair = Pair(0, 0, names)

    def counted(data: bytes, write: Callable[[bytes], object]) -> int | tuple[int, BaseException] | None:
        answered = serve(data, write)
        if answered:
            pair.answered += 1
        return answered

    fast.fast = counted
    running: list[HttpServer] = [await start(fast, "127.0.0.1", 0), await start(plain, "127.0.0.1", 0)]
    pair.fast_port, pair.plain_port = bound_port(running[0]), bound_port(running[1])
    try:
        yield pair
    finally:
        for server in running:
            await server.cleanup()


async def run_cases(pair: Pair, rng: random.Random, count: int) -> Outcome:
    """``count`` cases to both servers in turn."""
    outcome = Outcome()
    for index in range(count):
        chunks = case(rng, pair.names, index)
        with_fast = await exchange(pair.fast_port, chunks)
        if with_fast != await exchange(pair.plain_port, chunks):
            outcome.differ.append((index, b"".join(chunks)))
        for line in with_fast.split(b"\r\n"):
            if line.startswith(b"HTTP/1.1 "):
                outcome.statuses[line[9:12]] = outcome.statuses.get(line[9:12], 0) + 1
    return outcome
