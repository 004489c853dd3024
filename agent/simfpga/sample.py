"""The sample bitstreams of simulated cards: ``aes-v1`` for a slot (the bytes of
``daemonset/examples/bitstreams/aes-v1.bin``) and ``sim-card-v1`` for a whole card."""

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
