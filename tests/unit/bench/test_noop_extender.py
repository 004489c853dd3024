"""The do-nothing extender over real HTTP: the floor answers ``[]``; as a probe it answers the first names asked."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.scheduler import parse_probe

ROOT = Path(__file__).resolve().parents[3]
BODY = json.dumps(
    {"Pod": {"metadata": {"name": "p"}}, "Nodes": None, "NodeNames": ["n-1", "n-2", "n-3", "n-4"]},
    separators=(",", ":"),
).encode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


Serve = Callable[..., tuple[http.client.HTTPConnection, int]]


@pytest.fixture
def serve() -> Iterator[Serve]:
    started: list[subprocess.Popen[bytes]] = []
    connections: list[http.client.HTTPConnection] = []

    def start(*flags: str) -> tuple[http.client.HTTPConnection, int]:
        """The server's connection and its process id."""
        port = free_port()
        command = [sys.executable, str(ROOT / "bench" / "noop_extender.py"), "--port", str(port), *flags]
        started.append(subprocess.Popen(command))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        connections.append(http.client.HTTPConnection("127.0.0.1", port, timeout=10))
        return connections[-1], started[-1].pid

    yield start
    for connection in connections:
        connection.close()
    for process in started:
        process.terminate()
        process.wait(timeout=10)


def prioritize(connection: http.client.HTTPConnection, body: bytes = BODY) -> object:
    connection.request("POST", "/prioritize", body, {"Content-Type": "application/json"})
    answer = connection.getresponse()
    assert answer.status == 200
    return json.loads(answer.read())


def test_the_floor_answers_an_empty_list_on_a_kept_alive_connection(serve: Serve) -> None:
    connection, _pid = serve()
    assert prioritize(connection) == []
    assert prioritize(connection) == []


def test_as_a_probe_it_answers_the_first_names_asked_with_falling_scores(serve: Serve) -> None:
    connection, _pid = serve("--answer", "3")
    assert prioritize(connection) == [
        {"Host": "n-1", "Score": 3},
        {"Host": "n-2", "Score": 2},
        {"Host": "n-3", "Score": 1},
    ]
    short = BODY.replace(b'"n-2","n-3","n-4"', b"")
    assert prioritize(connection, short) == [{"Host": "n-1", "Score": 3}]  # fewer names than asked for: all of them


def test_unscored_it_lists_the_first_names_asked_each_with_score_0(serve: Serve) -> None:
    connection, _pid = serve("--unscored", "2")
    assert prioritize(connection) == [{"Host": "n-1", "Score": 0}, {"Host": "n-2", "Score": 0}]


def test_fixed_it_answers_entries_made_once_that_name_no_node(serve: Serve) -> None:
    connection, _pid = serve("--fixed", "2")
    fixed = [{"Host": "fixed-0", "Score": 0}, {"Host": "fixed-1", "Score": 0}]
    assert prioritize(connection) == fixed
    assert prioritize(connection, b"not even json") == fixed


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_spinning_probe_burns_the_cpu_it_is_told_to_before_answering(serve: Serve) -> None:
    connection, pid = serve("--spin-us", "100000")
    before = cpu_seconds(pid)
    for _ in range(3):
        assert prioritize(connection) == []
    assert cpu_seconds(pid) - before >= 0.29  # 3 calls x 0.1 s of spinning (one clock tick of rounding)


def test_a_probe_knob_is_one_of_its_flags() -> None:
    assert parse_probe("answer=16") == ["--answer", "16"]
    assert parse_probe("spin-us=40") == ["--spin-us", "40"]
    for wrong in ("answer", "answer=-1", "delay=3", "spin-us=x"):
        with pytest.raises(Exception, match="expected KNOB=N with KNOB one of answer, unscored, fixed, spin-us"):
            parse_probe(wrong)
