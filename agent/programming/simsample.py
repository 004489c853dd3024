"""The sample slot and whole-card bitstreams in a simulated node's catalog (``--sim-sample-bitstream``);
an existing entry of the same name is kept."""

from __future__ import annotations

import hashlib
import logging
import tempfile
from pathlib import Path

from agent.errors import BitstreamFileError, UnknownBitstream
from agent.files.bitstream import CARD_SCOPE, SLOT_SCOPE
from agent.programming.catalog import Catalog
from agent.simfpga.sample import (
    SAMPLE_ACCELERATOR,
    SAMPLE_CARD_ACCELERATOR,
    SAMPLE_CARD_NAME,
    SAMPLE_NAME,
    SAMPLE_PLATFORM,
    sample_bitstream,
    sample_card_image,
)

logger = logging.getLogger(__name__)


def add_sample_bitstream(catalog: Catalog) -> None:
    """Put the sample bitstreams into ``catalog``, each unless it has an entry of that name (blocking)."""
    _add(catalog, SAMPLE_NAME, sample_bitstream(), SAMPLE_ACCELERATOR, SLOT_SCOPE)
    _add(catalog, SAMPLE_CARD_NAME, sample_card_image(), SAMPLE_CARD_ACCELERATOR, CARD_SCOPE)


def _add(catalog: Catalog, name: str, data: bytes, accelerator: str, scope: str) -> None:
    try:
        entry = catalog.resolve(name)
    except UnknownBitstream:
        pass
    except BitstreamFileError as exc:
        logger.warning("bitstream catalog: %s is unusable (%s); the sample is not added over it", name, exc)
        return
    else:
        if entry.sha256 != hashlib.sha256(data).hexdigest():
            logger.warning("bitstream catalog: %s is an entry of its own; the sample is not added", name)
        return
    with tempfile.TemporaryDirectory(prefix="fpga-sample-") as directory:
        source = Path(directory) / f"{name}.bin"
        source.write_bytes(data)
        catalog.add(source, name, platform=SAMPLE_PLATFORM, accelerator_id=accelerator, scope=scope)
    logger.info("bitstream catalog: added the simulated cards' sample %s (an image for a %s)", name, scope)
