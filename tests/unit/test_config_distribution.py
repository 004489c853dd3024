"""The pull options (#14): plain-HTTP registries, an extra CA file, and the agent's own namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import load_config
from agent.errors import ConfigError


def test_defaults_pull_over_https_with_the_system_cas_in_the_shipped_namespace() -> None:
    config = load_config({}, env={})
    assert config.bitstream_plain_http == ()
    assert config.bitstream_ca_file is None
    assert config.namespace == "fpga-slot"


def test_plain_http_registries_are_a_comma_separated_list() -> None:
    env = {"FPGA_AGENT_BITSTREAM_PLAIN_HTTP": "127.0.0.1:5000, registry.local ,"}
    assert load_config({}, env=env).bitstream_plain_http == ("127.0.0.1:5000", "registry.local")


def test_the_ca_file_is_an_absolute_path() -> None:
    assert load_config({"bitstream_ca_file": "/etc/ca.pem"}, env={}).bitstream_ca_file == Path("/etc/ca.pem")


def test_the_namespace_comes_from_the_downward_api_unless_set() -> None:
    assert load_config({}, env={"POD_NAMESPACE": "fpga-x"}).namespace == "fpga-x"
    assert load_config({"namespace": "fpga-y"}, env={"POD_NAMESPACE": "fpga-x"}).namespace == "fpga-y"


@pytest.mark.parametrize(
    ("flag", "raw"),
    [
        pytest.param("bitstream_plain_http", "http://127.0.0.1:5000", id="a-url-not-a-host"),
        pytest.param("bitstream_plain_http", "a b", id="space"),
        pytest.param("namespace", "Fpga_Slot", id="not-a-namespace-name"),
        pytest.param("namespace", "x" * 64, id="namespace-too-long"),
    ],
)
def test_bad_values_name_the_flag(flag: str, raw: str) -> None:
    dashed = flag.replace("_", "-")
    with pytest.raises(ConfigError, match=rf"^--{dashed}: .* \(from flag --{dashed}\)"):
        load_config({flag: raw}, env={})
