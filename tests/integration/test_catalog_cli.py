"""``fpga-agent catalog list|add`` as an operator runs it: real processes, real files."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import run_fpga_agent
from tests.unit.programming.gbs_files import ACCELERATOR_ID, INTERFACE_ID, build_gbs, gbs_metadata

PLATFORM_UUID = "9A3D7C8E-1111-4F0A-8D1B-0123456789AB"
PLATFORM_ID = "9a3d7c8e11114f0a8d1b0123456789ab"
AES_ID = "a5e0000000000000000000000000a001"


def catalog_env(bitstream_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
    env.update(FPGA_AGENT_BITSTREAM_DIR=str(bitstream_dir), FPGA_AGENT_NODE_NAME="catalog-test-node")
    return env


def fpga_agent(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_fpga_agent(root, catalog_env(root / "bitstreams") if env is None else env, *args)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def gbs_file(root: Path) -> Path:
    path = root / "nlb.gbs"
    path.write_bytes(build_gbs())
    return path


@pytest.fixture
def raw_file(root: Path) -> Path:
    path = root / "aes.bit"
    path.write_bytes(b"\x00raw bitstream\xff" * 40)
    return path


def listed(root: Path) -> Any:
    """``catalog list --json``, parsed."""
    result = fpga_agent(root, "catalog", "list", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_add_gbs_then_list(root: Path, gbs_file: Path) -> None:
    added = fpga_agent(root, "catalog", "add", str(gbs_file), "--name", "nlb-400")
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("added nlb-400: ")
    assert f"platform {INTERFACE_ID}, accelerator {ACCELERATOR_ID}" in added.stdout

    data = listed(root)
    assert data["directory"] == str(root / "bitstreams")
    assert data["problems"] == []
    (entry,) = data["bitstreams"]
    assert entry["name"] == "nlb-400"
    assert (entry["platform"], entry["accelerator_id"]) == (INTERFACE_ID, ACCELERATOR_ID)
    assert entry["size"] == gbs_file.stat().st_size

    table = fpga_agent(root, "catalog", "list")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "SCOPE", "PLATFORM", "ACCELERATOR", "SIZE", "SHA256", "ADDED_AT"]
    assert row.split()[:6] == [
        "nlb-400",
        "slot",
        INTERFACE_ID,
        ACCELERATOR_ID,
        str(entry["size"]),
        entry["sha256"][:12],
    ]


def test_add_raw_with_ids_and_replace(root: Path, raw_file: Path, gbs_file: Path) -> None:
    args = ("catalog", "add", str(raw_file), "--name", "aes")
    ids = ("--platform", PLATFORM_UUID, "--accelerator-id", AES_ID)
    assert fpga_agent(root, *args, *ids).returncode == 0
    again = fpga_agent(root, "catalog", "add", str(gbs_file), "--name", "aes")
    assert again.returncode == 1
    assert "'aes' is already in the catalog" in again.stderr
    replaced = fpga_agent(root, "catalog", "add", str(gbs_file), "--name", "aes", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    (entry,) = listed(root)["bitstreams"]
    assert entry["platform"] == INTERFACE_ID
    assert sorted(os.listdir(root / "bitstreams")) == sorted(["aes.json", entry["file"]])


def test_bitstream_dir_flag_beats_environment(root: Path, raw_file: Path) -> None:
    flag_dir = root / "from-flag"
    result = fpga_agent(
        root,
        *("catalog", "add", str(raw_file), "--name", "aes", "--bitstream-dir", str(flag_dir)),
        *("--platform", PLATFORM_ID, "--accelerator-id", AES_ID),
    )
    assert result.returncode == 0, result.stderr
    assert (flag_dir / "aes.json").is_file()
    assert not (root / "bitstreams").exists()


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        pytest.param(
            lambda r: ["absent.gbs", "--name", "x"], r"cannot add .*absent\.gbs as 'x': No such file", id="missing-file"
        ),
        pytest.param(
            lambda r: [str(r / "nlb.gbs"), "--name", "Bad/Name"], r"invalid bitstream name 'Bad/Name'", id="bad-name"
        ),
        pytest.param(
            lambda r: [str(r / "aes.bit"), "--name", "aes"], r"not an Intel GBS file.*--platform", id="raw-without-ids"
        ),
        pytest.param(
            lambda r: [str(r / "broken.gbs"), "--name", "broken"],
            r"GBS file .*broken\.gbs declares 100000 bytes of metadata, past the end",
            id="gbs-length-past-eof",
        ),
        pytest.param(
            lambda r: [str(r / "nokeys.gbs"), "--name", "nokeys"],
            r'no valid "afu-image"\."interface-uuid"',
            id="gbs-missing-keys",
        ),
        pytest.param(
            lambda r: [str(r / "nlb.gbs"), "--name", "nlb", "--platform", PLATFORM_UUID],
            rf"platform \(interface-uuid\) {PLATFORM_ID} differs from the GBS header",
            id="gbs-platform-mismatch",
        ),
    ],
)
def test_add_errors_exit_1_with_one_clear_line(
    root: Path, gbs_file: Path, raw_file: Path, make_args: Callable[[Path], list[str]], message: str
) -> None:
    (root / "broken.gbs").write_bytes(build_gbs(length=100_000))
    metadata = gbs_metadata()
    del metadata["afu-image"]["interface-uuid"]
    (root / "nokeys.gbs").write_bytes(build_gbs(metadata))
    result = fpga_agent(root, "catalog", "add", *make_args(root))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("fpga-agent catalog add: ")
    assert re.search(message, line), line
    assert not (root / "bitstreams").exists() or os.listdir(root / "bitstreams") == []


def test_list_reports_unusable_records_and_keeps_going(root: Path, raw_file: Path) -> None:
    ids = ("--platform", PLATFORM_ID, "--accelerator-id", AES_ID)
    assert fpga_agent(root, "catalog", "add", str(raw_file), "--name", "aes", *ids).returncode == 0
    (root / "bitstreams" / "bad.json").write_text('{"name": "bad"}')
    table = fpga_agent(root, "catalog", "list")
    assert table.returncode == 0
    assert [line.split()[0] for line in table.stdout.splitlines()] == ["NAME", "aes"]
    assert "skipped bad.json: record " in table.stderr
    assert "lacks file, size, sha256, platform, accelerator_id, added_at" in table.stderr
    data = listed(root)
    assert [entry["name"] for entry in data["bitstreams"]] == ["aes"]
    assert [problem["record"] for problem in data["problems"]] == ["bad.json"]


def test_list_of_an_empty_catalog(root: Path) -> None:
    (root / "bitstreams").mkdir()
    result = fpga_agent(root, "catalog", "list")
    assert result.returncode == 0
    assert result.stdout.split() == ["NAME", "SCOPE", "PLATFORM", "ACCELERATOR", "SIZE", "SHA256", "ADDED_AT"]
    assert f"no bitstreams in {root / 'bitstreams'}" in result.stderr
    assert listed(root) == {"directory": str(root / "bitstreams"), "bitstreams": [], "problems": []}


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        # an option the command does not take is still validated once from the environment
        pytest.param(
            [],
            {"FPGA_AGENT_PROGRAM_TIMEOUT_S": "0"},
            "--program-timeout-s: must be between 1 and 120, got 0 (from environment",
            id="timeout-0",
        ),
        pytest.param(
            [], {"FPGA_AGENT_PROGRAM_TIMEOUT_S": "121"}, "must be between 1 and 120, got 121", id="timeout-121"
        ),
        pytest.param(
            ["--bitstream-dir", ""],
            {},
            "--bitstream-dir: must not be empty (from flag --bitstream-dir)",
            id="empty-dir",
        ),
        pytest.param(
            ["--program-timeout-s", "5"], {}, "unrecognized arguments: --program-timeout-s", id="not-its-option"
        ),
    ],
)
def test_bad_options_exit_2_naming_the_flag(root: Path, args: list[str], env: dict[str, str], message: str) -> None:
    result = fpga_agent(root, "catalog", "list", *args, env={**catalog_env(root / "bitstreams"), **env})
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_catalog_needs_a_subcommand(root: Path) -> None:
    result = fpga_agent(root, "catalog")
    assert result.returncode == 2
    assert "list" in result.stderr
    assert "add" in result.stderr
