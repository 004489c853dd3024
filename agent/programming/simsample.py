"""The sample bitstream in the node's catalog on simulated nodes (``--sim-sample-bitstream``).

Added at start unless the catalog already has an entry of that name: the same file is left as
it is, and an operator's own entry of that name is kept (said once in the log).
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from pathlib import Path

from agent.errors import BitstreamFileError, UnknownBitstream
from agent.programming.catalog import Catalog
from agent.simfpga.sample import SAMPLE_ACCELERATOR, SAMPLE_NAME, SAMPLE_PLATFORM, sample_bitstream

logger = logging.getLogger(__name__)


def add_sample_bitstream(catalog: Catalog) -> None:
    """Put the sample bitstream into ``catalog`` unless it has an entry of that name (blocking)."""
    data = sample_bitstream()
    try:
        entry = catalog.resolve(SAMPLE_NAME)
    except UnknownBitstream:
        pass
    except BitstreamFileError as exc:
        logger.warning("bitstream catalog: %s is unusable (%s); the sample is not added over it", SAMPLE_NAME, exc)
        return
    else:
        if entry.sha256 != hashlib.sha256(data).hexdigest():
            logger.warning("bitstream catalog: %s is an entry of its own; the sample is not added", SAMPLE_NAME)
        return
    with tempfile.TemporaryDirectory(prefix="fpga-sample-") as directory:
        source = Path(directory) / f"{SAMPLE_NAME}.bin"
        source.write_bytes(data)
        catalog.add(source, SAMPLE_NAME, platform=SAMPLE_PLATFORM, accelerator_id=SAMPLE_ACCELERATOR)
    logger.info("bitstream catalog: added the simulated slots' sample bitstream %s", SAMPLE_NAME)
