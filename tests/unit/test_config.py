"""load_config: one precedence (flag > env > file > default), errors naming flag and source."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.cli.flags import add_config_file_argument, add_option_argument
from agent.config import OPTIONS, load_config
from agent.errors import ConfigError

WriteYaml = Callable[..., Path]


@pytest.fixture
def write_yaml(tmp_path: Path) -> WriteYaml:
    """Write a YAML config file into the test's temp dir."""

    def write(text: str, name: str = "agent.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def test_defaults() -> None:
    config = load_config({}, env={"NODE_NAME": "node-a"})
    assert (
        config.backend,
        config.device_plugin_dir,
        config.pod_resources_socket,
        config.state_dir,
        config.sim_cards,
        config.sim_slots_per_card,
        config.sim_program_ms,
        config.node_name,
        config.log_level,
        config.log_format,
        config.cdi,
    ) == (
        "auto",
        Path("/var/lib/kubelet/device-plugins"),
        Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        Path("/var/lib/fpga-agent"),
        2,
        4,
        800,
        "node-a",
        "info",
        "text",
        False,
    )
    assert config.sim_dev_dir == Path("/var/lib/fpga-agent/sim-dev")


def test_node_name_defaults_to_the_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setattr("socket.gethostname", lambda: "host-b")
    assert load_config({}, env={}).node_name == "host-b"


@pytest.mark.parametrize(
    ("flag", "env", "file", "expected"),
    [
        pytest.param("5", "6", "7", 5, id="flag-beats-env-and-file"),
        pytest.param(None, "6", "7", 6, id="env-beats-file"),
        pytest.param(None, None, "7", 7, id="file-beats-default"),
        pytest.param(None, None, None, 2, id="default"),
        pytest.param("5", None, "7", 5, id="flag-beats-file"),
        pytest.param(None, "0", None, 0, id="env-zero-is-a-value"),
    ],
)
def test_precedence(write_yaml: WriteYaml, flag: str | None, env: str | None, file: str | None, expected: int) -> None:
    flags: dict[str, object] = {"sim_cards": flag}
    environ: dict[str, str] = {} if env is None else {"FPGA_AGENT_SIM_CARDS": env}
    if file is not None:
        flags["config"] = str(write_yaml(f"sim-cards: {file}\n"))
    assert load_config(flags, env=environ).sim_cards == expected


def test_precedence_is_per_option(write_yaml: WriteYaml) -> None:
    path = write_yaml("log-level: warning\nsim-cards: 3\nsim-program-ms: 10\n")
    config = load_config(
        {"config": str(path), "log_level": "debug"},
        env={"FPGA_AGENT_SIM_CARDS": "4"},
    )
    assert (config.log_level, config.sim_cards, config.sim_program_ms, config.sim_slots_per_card) == (
        "debug",
        4,
        10,
        4,
    )


def test_config_file_from_the_environment(write_yaml: WriteYaml) -> None:
    from_env = write_yaml("sim-cards: 9\n", "env.yaml")
    from_flag = write_yaml("sim-cards: 8\n", "flag.yaml")
    assert load_config({}, env={"FPGA_AGENT_CONFIG": str(from_env)}).sim_cards == 9
    assert load_config({"config": str(from_flag)}, env={"FPGA_AGENT_CONFIG": str(from_env)}).sim_cards == 8


def test_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FPGA_AGENT_SIM_SLOTS_PER_CARD", "7")
    assert load_config({}).sim_slots_per_card == 7


def test_flags_from_argparse(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_config_file_argument(parser)
    for opt in OPTIONS:
        add_option_argument(parser, opt.flag)
    args = parser.parse_args(
        [
            "--sim-cards",
            "3",
            "--device-plugin-dir",
            str(tmp_path / "dp"),
            "--cdi",
            "yes",
            "--log-format",
            "json",
        ]
    )
    config = load_config(vars(args), env={"FPGA_AGENT_SIM_CARDS": "9"})
    assert config.sim_cards == 3
    assert config.device_plugin_dir == tmp_path / "dp"
    assert config.cdi is True
    assert config.log_format == "json"


def test_config_is_frozen() -> None:
    config = load_config({"node_name": "n"}, env={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.sim_cards = 3  # type: ignore[misc]


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("flags", "env", "yaml_text", "expected"),
    [
        pytest.param(
            {"sim_cards": "x"},
            {},
            None,
            ["--sim-cards: must be an integer, got 'x'", "(from flag --sim-cards)"],
            id="flag-not-integer",
        ),
        pytest.param(
            {},
            {"FPGA_AGENT_SIM_CARDS": "x"},
            None,
            ["--sim-cards: must be an integer", "(from environment FPGA_AGENT_SIM_CARDS)"],
            id="env-not-integer",
        ),
        pytest.param(
            {},
            {},
            "sim-cards: 65\n",
            ["--sim-cards: must be between 0 and 64, got 65", "key 'sim-cards'"],
            id="file-out-of-range",
        ),
        pytest.param(
            {"sim_slots_per_card": "0"},
            {},
            None,
            ["--sim-slots-per-card: must be between 1 and 64, got 0"],
            id="slots-per-card-zero",
        ),
        pytest.param(
            {"sim_program_ms": "-1"},
            {},
            None,
            ["--sim-program-ms: must be between 0 and 600000"],
            id="negative-program-time",
        ),
        pytest.param(
            {"backend": "fpgax"},
            {},
            None,
            ["--backend: must be one of ", "got 'fpgax'", "(from flag --backend)"],
            id="unknown-backend",
        ),
        pytest.param(
            {},
            {"FPGA_AGENT_MODE": "both"},
            None,
            ["--mode: must be one of device-plugin, dra", "got 'both'", "(from environment FPGA_AGENT_MODE)"],
            id="unknown-mode",
        ),
        pytest.param(
            {},
            {"FPGA_AGENT_LOG_LEVEL": "verbose"},
            None,
            ["--log-level: must be one of debug, info, warning, error", "FPGA_AGENT_LOG_LEVEL"],
            id="env-log-level",
        ),
        pytest.param(
            {"log_format": "xml"},
            {},
            None,
            ["--log-format: must be one of text, json"],
            id="log-format",
        ),
        pytest.param(
            {},
            {"FPGA_AGENT_CDI": "maybe"},
            None,
            ["--cdi: must be true or false, got 'maybe'", "FPGA_AGENT_CDI"],
            id="cdi-not-bool",
        ),
        pytest.param(
            {"device_plugin_dir": "  "},
            {},
            None,
            ["--device-plugin-dir: must not be empty"],
            id="empty-path",
        ),
        pytest.param(
            {},
            {"FPGA_AGENT_NODE_NAME": ""},
            None,
            ["--node-name: must be a node name", "FPGA_AGENT_NODE_NAME"],
            id="empty-node-name",
        ),
        pytest.param(
            {"node_name": "n" * 254},
            {},
            None,
            ["--node-name: must be a node name of 1 to 253 characters"],
            id="node-name-too-long",
        ),
        pytest.param(
            {},
            {"FPGA_AGENT_FPGA_REGION_BASE_IMAGES": "fpga0=base.bin,fpga1"},
            None,
            ["--fpga-region-base-images: must be a comma-separated list of MANAGER=FIRMWARE", "'fpga1'"],
            id="base-image-without-firmware",
        ),
        pytest.param(
            {"fpga_region_base_images": "fpga0=../etc/passwd"},
            {},
            None,
            ["--fpga-region-base-images: must be a comma-separated list", "'fpga0=../etc/passwd'"],
            id="base-image-path",
        ),
        pytest.param(
            {},
            {},
            "fpga-region-base-images: fpga0=a.bin,fpga0=b.bin\n",
            ["--fpga-region-base-images: names FPGA manager 'fpga0' twice"],
            id="base-image-manager-twice",
        ),
    ],
)
def test_invalid_values_name_flag_and_source(
    write_yaml: WriteYaml,
    flags: dict[str, object],
    env: dict[str, str],
    yaml_text: str | None,
    expected: list[str],
) -> None:
    flags = dict(flags)
    if yaml_text is not None:
        flags["config"] = str(write_yaml(yaml_text))
    with pytest.raises(ConfigError) as info:
        load_config(flags, env=env)
    for part in expected:
        assert part in str(info.value)
    if yaml_text is not None:
        assert str(flags["config"]) in str(info.value)


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        pytest.param("sim-cardz: 2\n", "has unknown key 'sim-cardz'", id="unknown-key"),
        pytest.param("- sim-cards\n- 2\n", "must hold a mapping", id="list"),
        pytest.param("just a string\n", "must hold a mapping", id="scalar"),
        pytest.param("sim-cards: [1, 2]\n", "key 'sim-cards' must be a single value", id="list-value"),
        pytest.param("log-level:\n  a: b\n", "key 'log-level' must be a single value", id="mapping-value"),
        pytest.param("node-name:\n", "key 'node-name' must be a single value", id="null-value"),
        pytest.param("sim-cards: [1, 2\n", "is not valid YAML", id="broken-yaml"),
    ],
)
def test_bad_config_files(write_yaml: WriteYaml, yaml_text: str, expected: str) -> None:
    path = write_yaml(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_config({"config": str(path)}, env={})
    message = str(info.value)
    assert message.startswith("--config: ")
    assert str(path) in message
    assert expected in message


@pytest.mark.parametrize(
    "make_path",
    [
        pytest.param(lambda tmp: tmp / "missing.yaml", id="missing"),
        pytest.param(lambda tmp: tmp, id="directory"),
    ],
)
def test_unreadable_config_file(tmp_path: Path, make_path: Callable[[Path], Path]) -> None:
    path = make_path(tmp_path)
    with pytest.raises(ConfigError, match=r"^--config: cannot read ") as info:
        load_config({"config": str(path)}, env={})
    assert str(path) in str(info.value)


def test_config_file_accepts_both_spellings_and_yaml_types(write_yaml: WriteYaml) -> None:
    path = write_yaml("sim_cards: 3\nsim-slots-per-card: 2\ncdi: true\nlog-level: WARNING\n")
    config = load_config({"config": str(path)}, env={})
    assert (config.sim_cards, config.sim_slots_per_card, config.cdi, config.log_level) == (
        3,
        2,
        True,
        "warning",
    )


def test_empty_config_file_means_defaults(write_yaml: WriteYaml) -> None:
    path = write_yaml("")
    assert load_config({"config": str(path), "node_name": "n"}, env={}) == load_config({"node_name": "n"}, env={})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("1", True, id="1"),
        pytest.param("true", True, id="true"),
        pytest.param("YES", True, id="YES"),
        pytest.param(" on ", True, id="on-padded"),
        pytest.param("0", False, id="0"),
        pytest.param("False", False, id="False"),
        pytest.param("no", False, id="no"),
        pytest.param("OFF", False, id="OFF"),
    ],
)
def test_bool_parsing(raw: str, expected: bool) -> None:
    assert load_config({"node_name": "n"}, env={"FPGA_AGENT_CDI": raw}).cdi is expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("DEBUG", "debug", id="upper"),
        pytest.param(" Warning ", "warning", id="padded-mixed"),
    ],
)
def test_choices_are_case_insensitive(raw: str, expected: str) -> None:
    assert load_config({"log_level": raw, "node_name": "n"}, env={}).log_level == expected


def test_relative_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(
        {"device_plugin_dir": "dp", "node_name": "n"},
        env={"FPGA_AGENT_STATE_DIR": "state/../state2", "FPGA_AGENT_POD_RESOURCES_SOCKET": "pr/kubelet.sock"},
    )
    assert config.device_plugin_dir == tmp_path / "dp"
    assert config.state_dir == tmp_path / "state/../state2"
    assert config.pod_resources_socket == tmp_path / "pr" / "kubelet.sock"
    assert all(p.is_absolute() for p in (config.device_plugin_dir, config.state_dir, config.pod_resources_socket))


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = load_config({"state_dir": "~/agent", "node_name": "n"}, env={})
    assert config.state_dir == tmp_path / "agent"


def test_base_images_are_read_as_manager_and_firmware_pairs() -> None:
    config = load_config({}, env={"FPGA_AGENT_FPGA_REGION_BASE_IMAGES": " fpga0=base.bin, fpga1 = full-base_v2.bin ,"})
    assert config.fpga_region_base_images == (("fpga0", "base.bin"), ("fpga1", "full-base_v2.bin"))
    assert load_config({}, env={}).fpga_region_base_images == ()
