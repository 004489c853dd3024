"""The simulated slots' sample bitstream: the example file's bytes, put into a catalog once, never over another."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest
import yaml

from agent.programming.catalog import Catalog
from agent.programming.simsample import add_sample_bitstream
from agent.simfpga.sample import SAMPLE_ACCELERATOR, SAMPLE_NAME, SAMPLE_PLATFORM, sample_bitstream
from tests.deploy.manifests import DAEMONSET_DIR

EXAMPLES = DAEMONSET_DIR / "examples" / "bitstreams"


def test_the_sample_is_the_example_file_that_the_example_fpgabitstream_declares() -> None:
    data = sample_bitstream()
    assert data == (EXAMPLES / "aes-v1.bin").read_bytes()
    spec = yaml.safe_load((EXAMPLES / "fpgabitstream.yaml").read_text())["spec"]
    assert (spec["sha256"], spec["size"]) == (hashlib.sha256(data).hexdigest(), len(data))
    assert (spec["platform"], spec["acceleratorId"]) == (SAMPLE_PLATFORM, SAMPLE_ACCELERATOR)


def test_the_sample_is_added_once(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog")
    add_sample_bitstream(catalog)
    entry = catalog.resolve(SAMPLE_NAME)
    assert (entry.platform, entry.accelerator_id, entry.size) == (SAMPLE_PLATFORM, SAMPLE_ACCELERATOR, 4096)
    assert catalog.read_image(entry) == sample_bitstream()
    add_sample_bitstream(catalog)  # the agent starts again: the entry stays as it was
    assert catalog.resolve(SAMPLE_NAME) == entry


def test_an_entry_of_the_operators_own_by_that_name_is_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    catalog = Catalog(tmp_path / "catalog")
    own = tmp_path / "own.bin"
    own.write_bytes(b"the operator's own aes-v1")
    mine = catalog.add(own, SAMPLE_NAME, platform=SAMPLE_PLATFORM, accelerator_id="0" * 32)
    with caplog.at_level(logging.WARNING):
        add_sample_bitstream(catalog)
    assert catalog.resolve(SAMPLE_NAME) == mine
    assert "aes-v1 is an entry of its own; the sample is not added" in caplog.text
