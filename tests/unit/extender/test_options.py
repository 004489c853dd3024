"""The extender's options: --listen, --score-weights and --answer-limit, with the usual precedence and errors
naming the flag."""

from __future__ import annotations

import pytest

from agent.config import ListenAddress, load_config
from agent.errors import ConfigError
from agent.extender.scoring import ScoreWeights


def test_defaults() -> None:
    config = load_config({}, {})
    # Loopback unless told otherwise: the shipped Deployment says its pod's address (and HTTPS).
    assert config.listen == ListenAddress("127.0.0.1", 8888)
    assert config.probe_listen is None
    assert config.tls_cert_file is None
    assert config.score_weights == ScoreWeights(loaded=10, empty=7, evict=1, neutral=5)
    assert config.answer_limit == 16


def test_the_answer_limit_from_flag_or_environment() -> None:
    assert load_config({"answer_limit": "0"}, {"FPGA_AGENT_ANSWER_LIMIT": "8"}).answer_limit == 0
    assert load_config({}, {"FPGA_AGENT_ANSWER_LIMIT": "8"}).answer_limit == 8


@pytest.mark.parametrize(
    ("flags", "env", "listen", "weights"),
    [
        pytest.param({"listen": "127.0.0.1:9000"}, {}, ListenAddress("127.0.0.1", 9000), ScoreWeights(), id="flag"),
        pytest.param(
            {}, {"FPGA_AGENT_LISTEN": "[::1]:8889"}, ListenAddress("::1", 8889), ScoreWeights(), id="env-ipv6"
        ),
        # Every address only when asked, by ":PORT" (or 0.0.0.0:PORT) as in Go's listeners.
        pytest.param({"listen": ":7000"}, {}, ListenAddress("0.0.0.0", 7000), ScoreWeights(), id="port-only"),
        pytest.param(
            {"score_weights": "evict=1"},
            {"FPGA_AGENT_SCORE_WEIGHTS": "evict=2"},
            ListenAddress("127.0.0.1", 8888),
            ScoreWeights(evict=1),
            id="flag-over-env",
        ),
        pytest.param(
            {},
            {"FPGA_AGENT_SCORE_WEIGHTS": "loaded=9,neutral=0"},
            ListenAddress("127.0.0.1", 8888),
            ScoreWeights(loaded=9, neutral=0),
            id="weights-env",
        ),
    ],
)
def test_flags_and_environment(
    flags: dict[str, str], env: dict[str, str], listen: ListenAddress, weights: ScoreWeights
) -> None:
    config = load_config(flags, env)
    assert config.listen == listen
    assert config.score_weights == weights


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param({"listen": ""}, "--listen: must be HOST:PORT", id="listen-empty"),
        pytest.param({"listen": "host"}, "--listen: must be HOST:PORT", id="listen-no-port"),
        pytest.param({"listen": "h:70000"}, "--listen: must be HOST:PORT", id="listen-port-range"),
        pytest.param({"score_weights": "loaded=11"}, "--score-weights: loaded must be an integer from 0 to 10", id="w"),
        pytest.param({"score_weights": "x=1"}, "--score-weights: expects key=value pairs", id="weights-key"),
        pytest.param({"answer_limit": "-1"}, "--answer-limit: must be between 0 and 1000000, got -1", id="limit-low"),
        pytest.param({"answer_limit": "many"}, "--answer-limit: must be an integer, got 'many'", id="limit-word"),
    ],
)
def test_bad_values_name_the_flag(flags: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(flags, {})


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        pytest.param({"probe_listen": "10.0.0.2:8889"}, {}, ListenAddress("10.0.0.2", 8889), id="flag"),
        pytest.param({}, {"FPGA_AGENT_PROBE_LISTEN": "[fd00::2]:8889"}, ListenAddress("fd00::2", 8889), id="env"),
        pytest.param({"probe_listen": ""}, {"FPGA_AGENT_PROBE_LISTEN": "10.0.0.2:1"}, None, id="empty-flag-is-off"),
    ],
)
def test_the_probe_port_from_flag_or_environment(
    flags: dict[str, str], env: dict[str, str], expected: ListenAddress | None
) -> None:
    assert load_config(flags, env).probe_listen == expected


def test_a_bad_probe_address_names_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"^--probe-listen: must be HOST:PORT .*\(from environment FPGA_AGENT_PROBE"):
        load_config({}, {"FPGA_AGENT_PROBE_LISTEN": "nowhere"})
