"""The protocol's floor: a scheduler extender that reads each request and answers ``[]`` without parsing it.

An empty HostPriorityList is a valid prioritize answer (every node scores 0), so
kube-scheduler pays for its side of the protocol (marshalling the pod and the names,
one HTTP round trip) and nothing else. Raw asyncio streams, one write per answer,
keep-alive, so the gap to it is the cost of our extender. ``--loop uvloop`` serves it on
uvloop's event loop, as ``fpga-agent extender`` serves by default: the cheaper floor
(43 us of CPU per call against 50 us on asyncio's own loop, bench/extender_replay.py).

Usage: python bench/noop_extender.py --port PORT [--loop asyncio|uvloop]
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]"
HEALTHY = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            writer.write(HEALTHY if head.startswith(b"GET") else ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(serve_connection, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the event loop")
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop if args.loop == "uvloop" else None) as runner:
        runner.run(main(args.port))
