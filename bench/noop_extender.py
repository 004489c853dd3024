"""The protocol's floor: a scheduler extender that reads each request and answers ``[]`` without parsing it.

An empty HostPriorityList is a valid prioritize answer (every node scores 0), so
kube-scheduler pays for its side of the protocol (marshalling the pod and the names,
one HTTP round trip) and nothing else. Raw asyncio streams, one write per answer,
keep-alive, so the gap to it is the cost of our extender. ``--loop uvloop`` serves it on
uvloop's event loop, as ``fpga-agent extender`` serves by default: the cheaper floor
(43 us of CPU per call against 50 us on asyncio's own loop, bench/extender_replay.py).

Four knobs turn it into a probe of what the scheduler pays for, each alone:

* ``--answer N``: answer the first N names asked, scores N down to 1 (an answer of the size
  ours gives, 16 entries by default, found with one ``bytes.find`` per name): the scheduler's
  cost of decoding and adding up a real answer, without our work;
* ``--unscored N``: answer the first N names asked, each with score 0: an answer of the same
  kind that steers nothing (every node still scores 0), to tell the scheduler's cost of
  reading a listed answer from that of placing pods where an extender says;
* ``--fixed N``: answer N entries made once at start, naming no node (``fixed-0``, ...), each with
  score 0: a listed answer that costs this extender nothing per call, to tell the scheduler's
  cost of decoding a listed answer from the work of making one;
* ``--spin-us N``: burn N microseconds of CPU before answering (counted on the thread's own
  CPU clock, so a busy machine does not shorten it): a call that takes longer and burns the
  CPU it takes, without our code.

Usage: python bench/noop_extender.py --port PORT [--loop asyncio|uvloop] [--answer N | --unscored N | --fixed N]
                                              [--spin-us N]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import time
from collections.abc import Callable

import uvloop

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]"
HEALTHY = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


NAMES_MEMBER = b'"NodeNames":['


def first_names(body: bytes, count: int, *, scored: bool = True) -> bytes:
    """An answer listing the first ``count`` names of the body's NodeNames, scores ``count`` down to 1 (``scored``)
    or all 0."""
    at = body.find(NAMES_MEMBER)
    entries = []
    if at >= 0:
        at += len(NAMES_MEMBER)
        for score in range(count, 0, -1):
            start = body.find(b'"', at)
            end = body.find(b'"', start + 1)
            if start < 0 or end < 0 or body.find(b"]", at, start) >= 0:
                break
            entries.append({"Host": body[start + 1 : end].decode(), "Score": score if scored else 0})
            at = end + 1
    return json_response(entries)


def json_response(entries: list[dict[str, object]]) -> bytes:
    """``entries`` as a whole 200 response."""
    payload = json.dumps(entries, separators=(",", ":")).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(payload),
        payload,
    )


def spin(microseconds: int) -> None:
    """Burn ``microseconds`` of this thread's CPU (its own clock: on a busy machine the call takes longer, and
    still burns what it was told to)."""
    until = time.thread_time_ns() + microseconds * 1000
    while time.thread_time_ns() < until:
        pass


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: Callable[[bytes], bytes], spin_us: int
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await reader.readexactly(length) if length else b""
            if head.startswith(b"GET"):
                writer.write(HEALTHY)
                continue
            if spin_us:
                spin(spin_us)
            writer.write(reply(body))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def replier(answer: int, unscored: int, fixed: int) -> Callable[[bytes], bytes]:
    """The response to a prioritize body, as the knobs say (at most one of them set)."""
    if answer:
        return lambda body: first_names(body, answer)
    if unscored:
        return lambda body: first_names(body, unscored, scored=False)
    made = json_response([{"Host": f"fixed-{i}", "Score": 0} for i in range(fixed)]) if fixed else ANSWER
    return lambda _body: made


async def main(port: int, reply: Callable[[bytes], bytes], spin_us: int = 0) -> None:
    serve = functools.partial(serve_connection, reply=reply, spin_us=spin_us)
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the event loop")
    parser.add_argument("--answer", type=int, default=0, metavar="N", help="answer the first N names asked")
    parser.add_argument(
        "--unscored", type=int, default=0, metavar="N", help="answer the first N names asked, each with score 0"
    )
    parser.add_argument(
        "--fixed", type=int, default=0, metavar="N", help="answer N entries made once, naming no node, score 0"
    )
    parser.add_argument(
        "--spin-us", type=int, default=0, metavar="N", help="burn N microseconds of CPU before answering"
    )
    args = parser.parse_args()
    if min(args.answer, args.unscored, args.fixed, args.spin_us) < 0:
        parser.error("--answer, --unscored, --fixed and --spin-us take 0 or more")
    if sum(1 for n in (args.answer, args.unscored, args.fixed) if n) > 1:
        parser.error("--answer, --unscored and --fixed do not go together")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop if args.loop == "uvloop" else None) as runner:
        runner.run(main(args.port, replier(args.answer, args.unscored, args.fixed), args.spin_us))
