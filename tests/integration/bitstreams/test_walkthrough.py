"""The bitstream walkthrough of docs/distribution.md, on the sample files it names: the sample
bitstream added to a node catalog, pushed to a real registry (the output is the example
FpgaBitstream, but for the registry's address), the example admitted by the CRD's schema, and
the object the push printed pulled back by the agent's puller."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from agent.bitstreams.declaration import parse_declaration
from agent.bitstreams.puller import BitstreamPuller
from agent.programming.catalog import Catalog
from tests.deploy.test_bitstream_crd import errors
from tests.fakes import run_fpga_agent
from tests.integration.bitstreams.servers import Registry

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "daemonset" / "examples" / "bitstreams" / "aes-v1.bin"
EXAMPLE = REPO / "daemonset" / "examples" / "bitstreams" / "fpgabitstream.yaml"
WALKTHROUGH = REPO / "docs" / "distribution.md"
#: The registry the example object names (one on the node, as in the walkthrough).
EXAMPLE_REGISTRY = "127.0.0.1:5000"
IDS = ("--platform", "sim-pr-v1", "--accelerator-id", "a5e0000000000000000000000000c0de")


def fpga_agent(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
    return run_fpga_agent(tmp_path, env, *args)


def example() -> dict[str, object]:
    obj: dict[str, object] = yaml.safe_load(EXAMPLE.read_text())
    return obj


def test_the_example_object_declares_the_sample_file_and_passes_the_schema() -> None:
    obj = example()
    assert errors(obj) == []
    spec = obj["spec"]
    assert isinstance(spec, dict)
    data = SAMPLE.read_bytes()
    assert (spec["size"], spec["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())


def test_the_walkthrough_names_the_sample_files_and_the_commands_tested_here() -> None:
    text = WALKTHROUGH.read_text()
    for needle in (
        "daemonset/examples/bitstreams/aes-v1.bin",
        "daemonset/examples/bitstreams/fpgabitstream.yaml",
        f"catalog push daemonset/examples/bitstreams/aes-v1.bin {EXAMPLE_REGISTRY}/fpga/aes-v1:1",
        "catalog add daemonset/examples/bitstreams/aes-v1.bin --name aes-v1",
    ):
        assert needle in text, needle


def test_the_sample_goes_into_a_node_catalog(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    added = fpga_agent(
        tmp_path, "catalog", "add", str(SAMPLE), "--name", "aes-v1", *IDS, "--bitstream-dir", str(catalog)
    )
    assert added.returncode == 0, added.stderr
    listed = fpga_agent(tmp_path, "catalog", "list", "--json", "--bitstream-dir", str(catalog))
    (entry,) = yaml.safe_load(listed.stdout)["bitstreams"]
    spec = example()["spec"]
    assert isinstance(spec, dict)
    assert (entry["name"], entry["sha256"], entry["size"]) == ("aes-v1", spec["sha256"], spec["size"])


async def test_pushing_the_sample_prints_the_example_and_the_agent_pulls_it(
    tmp_path: Path, registry: Registry, puller: BitstreamPuller, catalog: Catalog
) -> None:
    pushed = fpga_agent(
        tmp_path, "catalog", "push", str(SAMPLE), f"{registry.address}/fpga/aes-v1:1", "--name", "aes-v1", *IDS,
        "--plain-http",
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    printed = yaml.safe_load(pushed.stdout)
    expected = yaml.safe_load(EXAMPLE.read_text().replace(EXAMPLE_REGISTRY, registry.address))
    assert printed == expected

    puller.declare(parse_declaration(printed))
    entry = await puller.ensure("aes-v1", platform="sim-pr-v1")
    assert entry.sha256 == expected["spec"]["sha256"]
    assert catalog.read_image(catalog.resolve("aes-v1")) == SAMPLE.read_bytes()
