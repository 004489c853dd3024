"""``fpga-agent cluster`` as an operator runs it: a real process reading Nodes and FpgaNodeStates from the fake
API server."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.kube.nodefields import PLATFORM_LABEL, PLATFORM_LABEL_PREFIX
from tests.fakeapi import FakeKubeApiServer, running_apiserver
from tests.fakes import run_fpga_agent

SIM = "sim-pr-v1"
SLOTS: list[dict[str, Any]] = [
    {
        "id": "c0-s0",
        "card": "c0",
        "numa": 0,
        "platform": SIM,
        "bitstream": "aes",
        "accelerator": "aes-accel",
        "free": False,
        "healthy": True,
        "last_used": 1700000000,
    },
    {
        "id": "c0-s1",
        "card": "c0",
        "numa": 0,
        "platform": SIM,
        "bitstream": None,
        "accelerator": None,
        "free": True,
        "healthy": False,
        "last_used": None,
    },
    {
        "id": "c1-s0",
        "card": "c1",
        "numa": None,
        "platform": SIM,
        "bitstream": None,
        "accelerator": "foreign-accel",
        "free": True,
        "healthy": True,
        "last_used": 1700000100,
    },
]
MALFORMED = "malformed FpgaNodeState: FpgaNodeState node-b: slots: a string, not a list"


def put_state(api: FakeKubeApiServer, node: str, slots: object, bitstreams: object) -> None:
    """The node's FpgaNodeState as an agent writes it (``slots`` in the readers' form: ``last_used``)."""
    wire = slots
    if isinstance(slots, list):
        wire = [
            {**{k: v for k, v in slot.items() if k != "last_used"}, "lastUsed": slot["last_used"]} for slot in slots
        ]
    spec = {"nodeName": node, "slots": wire, "bitstreams": bitstreams}
    api.put_node_state({"metadata": {"name": node, "namespace": "fpga-slot"}, "spec": spec})


@pytest.fixture
def cluster() -> Iterator[FakeKubeApiServer]:
    """Three nodes: one with published state, one with a malformed object, one without any."""
    with running_apiserver() as api:
        api.add_node("node-a", labels={PLATFORM_LABEL: SIM, PLATFORM_LABEL_PREFIX + SIM: "true"})
        put_state(api, "node-a", SLOTS, {"aes": SIM})
        api.add_node("node-b")
        put_state(api, "node-b", "{not a list", {})
        api.add_node("node-c")
        yield api


def operator_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment without any kubeconfig or in-cluster hint, HOME in the test's directory."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FPGA_AGENT_", "KUBERNETES_")) and key != "KUBECONFIG"
    }
    env["HOME"] = str(home)
    env.update(extra)
    return env


def fpga_agent(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_fpga_agent(tmp_path, operator_env(tmp_path) if env is None else env, *args)


def table(stdout: str) -> list[list[str]]:
    """The table's lines split into cells (the NOTE column, last, may hold spaces)."""
    lines = stdout.strip().splitlines()
    width = len(lines[0].split())
    return [line.split(None, width - 1) for line in lines]


def test_table_lists_every_slot_and_names_a_malformed_node(cluster: FakeKubeApiServer, tmp_path: Path) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    result = fpga_agent(tmp_path, "cluster", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 0, result.stderr
    rows = table(result.stdout)
    assert rows[0] == ["NODE", "SLOT", "PLATFORM", "BITSTREAM", "STATE", "HEALTH", "NOTE"]
    assert rows[1:4] == [
        ["node-a", "c0-s0", SIM, "aes", "held", "healthy", "-"],
        ["node-a", "c0-s1", SIM, "-", "free", "unhealthy", "-"],
        ["node-a", "c1-s0", SIM, "(foreign-accel)", "free", "healthy", "-"],
    ]
    assert rows[4][:6] == ["node-b", "-", "-", "-", "error", "-"]
    assert rows[4][6].startswith(MALFORMED)
    assert len(rows) == 5  # node-c publishes nothing: left out, and said so
    assert "nodes without published FPGA slot state: 1 (--all lists them)" in result.stderr


def test_files_lists_the_bitstream_files_of_each_node(cluster: FakeKubeApiServer, tmp_path: Path) -> None:
    cluster.add_node("node-d")
    put_state(cluster, "node-d", [], {"sha": SIM, "aes": SIM})
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    result = fpga_agent(tmp_path, "cluster", "--files", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 0, result.stderr
    rows = [line.split(None, 2) for line in result.stdout.strip().splitlines()]
    assert rows == [
        ["NODE", "FILES", "BITSTREAMS"],
        ["node-a", "1", "aes"],
        ["node-b", "0", "-"],  # its object is malformed: nothing of it is shown
        ["node-d", "2", "aes, sha"],
    ]


def test_all_lists_nodes_without_published_state(cluster: FakeKubeApiServer, tmp_path: Path) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    result = fpga_agent(tmp_path, "cluster", "--all", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 0, result.stderr
    assert table(result.stdout)[-1] == ["node-c", "-", "-", "-", "-", "-", "no published state"]


def test_json_gives_the_same_data(cluster: FakeKubeApiServer, tmp_path: Path) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    result = fpga_agent(tmp_path, "cluster", "--json", "--all", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    node_b = document["nodes"][1]
    [error] = node_b.pop("errors")
    assert error.startswith(MALFORMED)
    assert document == {
        "nodes": [
            {
                "name": "node-a",
                "published": True,
                "slots": SLOTS,
                "bitstreams": {"aes": SIM},
                "labels": {PLATFORM_LABEL: SIM, PLATFORM_LABEL_PREFIX + SIM: "true"},
                "errors": [],
            },
            {"name": "node-b", "published": True, "slots": [], "bitstreams": None, "labels": {}},
            {"name": "node-c", "published": False, "slots": [], "bitstreams": None, "labels": {}, "errors": []},
        ]
    }
    # Without --all, the node without state is left out of the JSON as well.
    plain = fpga_agent(tmp_path, "cluster", "--json", "--kubeconfig", str(kubeconfig))
    assert [node["name"] for node in json.loads(plain.stdout)["nodes"]] == ["node-a", "node-b"]


def test_no_node_with_state_says_so(tmp_path: Path) -> None:
    with running_apiserver() as api:
        api.add_node("plain")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        result = fpga_agent(tmp_path, "cluster", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "no node publishes FPGA slot state (1 nodes)" in result.stderr


@pytest.mark.parametrize(
    "found_by", ["flag", "FPGA_AGENT_KUBECONFIG", "KUBECONFIG", "home-kube-config"], ids=lambda found_by: found_by
)
def test_kubeconfig_is_found_as_kubectl_finds_it(cluster: FakeKubeApiServer, tmp_path: Path, found_by: str) -> None:
    if found_by == "home-kube-config":
        (tmp_path / ".kube").mkdir()
        kubeconfig = cluster.write_kubeconfig(tmp_path / ".kube" / "config")
    else:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    args = ["--kubeconfig", str(kubeconfig)] if found_by == "flag" else []
    extra = {found_by: f"{tmp_path / 'missing'}{os.pathsep}{kubeconfig}"} if found_by.isupper() else {}
    if found_by == "FPGA_AGENT_KUBECONFIG":
        extra = {found_by: str(kubeconfig)}
    result = fpga_agent(tmp_path, "cluster", "--json", *args, env=operator_env(tmp_path, **extra))
    assert result.returncode == 0, result.stderr
    assert [node["name"] for node in json.loads(result.stdout)["nodes"]] == ["node-a", "node-b"]


def _unreachable(tmp_path: Path) -> list[str]:
    with running_apiserver() as gone:
        kubeconfig = gone.write_kubeconfig(tmp_path / "kubeconfig")
    return ["--kubeconfig", str(kubeconfig)]


def _bad_token(tmp_path: Path, api: FakeKubeApiServer) -> list[str]:
    return ["--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig", token="wrong"))]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        pytest.param("unreachable", "listing nodes failed: cannot reach the API server", id="unreachable"),
        pytest.param("bad-token", "listing nodes failed: HTTP 401", id="unauthorized"),
        pytest.param("missing-file", "no such file", id="kubeconfig-missing"),
        pytest.param("nothing", "no API server access", id="no-kubeconfig-not-in-cluster"),
    ],
)
def test_an_api_server_that_cannot_be_read_is_one_clear_line_and_exit_1(
    cluster: FakeKubeApiServer, tmp_path: Path, case: str, message: str
) -> None:
    args = {
        "unreachable": lambda: _unreachable(tmp_path),
        "bad-token": lambda: _bad_token(tmp_path, cluster),
        "missing-file": lambda: ["--kubeconfig", str(tmp_path / "missing")],
        "nothing": lambda: [],
    }[case]()
    result = fpga_agent(tmp_path, "cluster", *args)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("fpga-agent cluster: ")
    assert message in last
    assert "urllib3" not in result.stderr  # its retry warnings are not repeated at the operator
