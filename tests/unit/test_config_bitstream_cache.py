"""--bitstream-cache-bytes (#14): the byte budget of pulled bitstreams, from flag, environment or default."""

from __future__ import annotations

import pytest

from agent.config import load_config
from agent.errors import ConfigError


def test_the_default_is_two_gibibytes() -> None:
    assert load_config({}, env={}).bitstream_cache_bytes == 2 << 30


def test_flag_beats_environment() -> None:
    env = {"FPGA_AGENT_BITSTREAM_CACHE_BYTES": "1048576"}
    assert load_config({}, env=env).bitstream_cache_bytes == 1 << 20
    assert load_config({"bitstream_cache_bytes": "2097152"}, env=env).bitstream_cache_bytes == 2 << 20


@pytest.mark.parametrize("raw", [pytest.param("1000", id="below-1-MiB"), pytest.param("lots", id="not-a-number")])
def test_bad_values_name_the_flag(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"--bitstream-cache-bytes: .* \(from flag --bitstream-cache-bytes\)"):
        load_config({"bitstream_cache_bytes": raw}, env={})
