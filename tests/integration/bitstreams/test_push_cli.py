"""``fpga-agent catalog push`` as a publisher runs it: a real process pushing to the real registry, its
FpgaBitstream passing the CRD's schema, and that object pulled back by the agent's puller; a GBS file's
ids read from its header, and flags that contradict it refused before anything is pushed."""

from __future__ import annotations

import dataclasses
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
from tests.unit.programming.gbs_files import ACCELERATOR_ID, INTERFACE_ID, INTERFACE_UUID, build_gbs

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

PLATFORM_UUID = "9A3D7C8E-1111-4F0A-8D1B-0123456789AB"
PLATFORM_ID = "9a3d7c8e11114f0a8d1b0123456789ab"
DATA = b"\x00raw bitstream\xff" * 4000


def push(tmp_path: Path, *args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
    if password is not None:
        env["FPGA_AGENT_REGISTRY_PASSWORD"] = password
    return run_fpga_agent(tmp_path, env, "catalog", "push", *args)


@pytest.fixture
def bitstream(tmp_path: Path) -> Path:
    path = tmp_path / "nlb.bin"
    path.write_bytes(DATA)
    return path


async def test_push_prints_an_object_the_crd_admits_and_the_agent_pulls(
    tmp_path: Path, bitstream: Path, registry: Registry, puller: BitstreamPuller, catalog: Catalog
) -> None:
    ref = f"{registry.address}/fpga/nlb:2.1"
    done = push(
        tmp_path, str(bitstream), ref, "--name", "nlb", "--platform", PLATFORM_UUID, "--accelerator-id", "sim-nlb",
        "--pull-secret", "registry-creds", "--plain-http",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    obj = yaml.safe_load(done.stdout)
    assert errors(obj) == []
    sha = hashlib.sha256(DATA).hexdigest()
    assert obj["metadata"] == {"name": "nlb"}
    assert obj["spec"]["sha256"] == sha
    assert obj["spec"]["size"] == len(DATA)
    assert obj["spec"]["platform"] == PLATFORM_ID
    assert obj["spec"]["source"]["oci"].startswith(f"{ref}@sha256:")
    assert obj["spec"]["source"]["pullSecret"] == "registry-creds"
    assert f"pushed {bitstream} as {obj['spec']['source']['oci']}" in done.stderr

    declaration = parse_declaration(obj)
    puller.declare(dataclasses.replace(declaration, pull_secret=None))  # the test registry is open
    entry = await puller.ensure("nlb", platform=PLATFORM_UUID)
    assert entry.sha256 == sha
    assert catalog.read_image(catalog.resolve("nlb")) == DATA


def test_push_with_credentials(tmp_path: Path, bitstream: Path, auth_registry: Registry) -> None:
    args = [str(bitstream), f"{auth_registry.address}/fpga/private:1", "--name", "private", "--platform", "p",
            "--accelerator-id", "a", "--plain-http", "--username", "alice"]  # fmt: skip
    refused = push(tmp_path, *args, password="nope")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert "fpga-agent catalog push: " in refused.stderr
    assert "the credentials were refused" in refused.stderr
    assert push(tmp_path, *args, password="wonderland").returncode == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(["--name", "Bad"], "invalid bitstream name 'Bad'", id="name"),
        pytest.param(["--pull-secret", "A_B"], "pull Secret name 'A_B'", id="secret"),
        pytest.param(["--platform", ""], "platform '' must be", id="platform"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_pushed(
    tmp_path: Path, bitstream: Path, registry: Registry, change: list[str], message: str
) -> None:
    args = [str(bitstream), f"{registry.address}/fpga/bad:1", "--name", "ok", "--platform", "p",
            "--accelerator-id", "a", "--plain-http", *change]  # fmt: skip
    done = push(tmp_path, *args)
    assert done.returncode == 1
    assert message in done.stderr
    assert not (registry.storage / "docker/registry/v2/repositories/fpga/bad").exists()


def test_a_reference_without_a_tag_and_a_missing_file_are_named(tmp_path: Path, registry: Registry) -> None:
    base = ["--name", "x", "--platform", "p", "--accelerator-id", "a", "--plain-http"]
    no_tag = push(tmp_path, str(tmp_path), f"{registry.address}/fpga/x", *base)
    assert no_tag.returncode == 1
    assert "invalid OCI reference" in no_tag.stderr
    missing = push(tmp_path, str(tmp_path / "missing.bin"), f"{registry.address}/fpga/x:1", *base)
    assert missing.returncode == 1
    assert "cannot read" in missing.stderr


def test_a_gbs_files_ids_come_from_its_header(tmp_path: Path, registry: Registry) -> None:
    path = tmp_path / "nlb.gbs"
    path.write_bytes(build_gbs())
    done = push(tmp_path, str(path), f"{registry.address}/fpga/gbs:1", "--name", "gbs", "--plain-http")
    assert done.returncode == 0, done.stderr
    spec = yaml.safe_load(done.stdout)["spec"]
    assert (spec["platform"], spec["acceleratorId"]) == (INTERFACE_ID, ACCELERATOR_ID)
    agreeing = push(
        tmp_path, str(path), f"{registry.address}/fpga/gbs:2", "--name", "gbs", "--plain-http",
        "--platform", INTERFACE_UUID, "--accelerator-id", ACCELERATOR_ID,
    )  # fmt: skip
    assert agreeing.returncode == 0, agreeing.stderr
    agreed = yaml.safe_load(agreeing.stdout)["spec"]
    assert {k: v for k, v in agreed.items() if k != "source"} == {k: v for k, v in spec.items() if k != "source"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param(
            ["--platform", "0" * 32],
            f"the given platform (interface-uuid) {'0' * 32} differs from the GBS header of {{path}}: {INTERFACE_ID}",
            id="platform",
        ),
        pytest.param(
            ["--accelerator-id", "sim-nlb"],
            f"the given accelerator id (accelerator-type-uuid) sim-nlb differs from the GBS header of {{path}}: "
            f"{ACCELERATOR_ID}",
            id="accelerator",
        ),
    ],
)
def test_ids_that_contradict_the_gbs_header_are_refused_before_anything_is_pushed(
    tmp_path: Path, registry: Registry, flags: list[str], message: str
) -> None:
    path = tmp_path / "nlb.gbs"
    path.write_bytes(build_gbs())
    done = push(tmp_path, str(path), f"{registry.address}/fpga/contradicted:1", "--name", "x", "--plain-http", *flags)
    assert done.returncode == 1
    assert done.stdout == ""
    assert f"fpga-agent catalog push: {message.format(path=path)}" in done.stderr
    assert not (registry.storage / "docker/registry/v2/repositories/fpga/contradicted").exists()


def test_a_raw_file_needs_both_ids(tmp_path: Path, bitstream: Path, registry: Registry) -> None:
    done = push(tmp_path, str(bitstream), f"{registry.address}/fpga/raw:1", "--name", "x", "--platform", "p")
    assert done.returncode == 1
    assert (
        f"{bitstream} is not an Intel GBS file, so its platform and accelerator id cannot be read from it: "
        "give both (--platform, --accelerator-id)"
    ) in done.stderr
    assert not (registry.storage / "docker/registry/v2/repositories/fpga/raw").exists()
