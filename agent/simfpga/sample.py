"""The sample bitstreams of simulated cards, made here so that every image carries them.

``aes-v1`` is an image for a slot.

Its bytes are those of ``daemonset/examples/bitstreams/aes-v1.bin`` (a line of text in a
128-byte header, then a byte pattern up to 4 KiB; the example FpgaBitstream declares their
sha256), which a test checks.
With ``--sim-sample-bitstream`` the agent adds it to the node's catalog at start, so that the
sim overlays run ``daemonset/examples/pod.yaml`` with no step of the user's own.
``sim-card-v1`` is an image for a whole card (``daemonset/examples/dra/whole-card.yaml``),
added with it: the same header and pattern, its own text.
"""

from __future__ import annotations

from agent.simfpga.fabric import PLATFORM

SAMPLE_NAME = "aes-v1"
SAMPLE_PLATFORM = PLATFORM
SAMPLE_ACCELERATOR = "a5e0000000000000000000000000c0de"
SAMPLE_BYTES = 4096
_HEADER_BYTES = 128
_TEXT = b"fpga-slot sample bitstream aes-v1 (simulated slots, platform sim-pr-v1)\n"
SAMPLE_CARD_NAME = "sim-card-v1"
SAMPLE_CARD_ACCELERATOR = "ca4d0000000000000000000000000001"
_CARD_TEXT = b"fpga-slot sample whole-card image sim-card-v1 (simulated cards, platform sim-pr-v1)\n"


def sample_bitstream(text: bytes = _TEXT) -> bytes:
    """A sample's bytes: the header (``text``), then byte ``i`` of the rest is ``(37 i + 11) mod 256``."""
    body = bytes((37 * i + 11) % 256 for i in range(SAMPLE_BYTES - _HEADER_BYTES))
    return text.ljust(_HEADER_BYTES, b"\0") + body


def sample_card_image() -> bytes:
    """The whole-card sample's bytes."""
    return sample_bitstream(_CARD_TEXT)
