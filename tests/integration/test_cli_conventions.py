"""The command line's conventions, as a user meets them: each command's own options (with defaults,
choices and environment variables) in its --help, --version, errors as one line with the right
command's usage, and options a command cannot honour refused before anything runs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

import agent.cli.flags as cliflags
from agent.cli.main import COMMANDS, build_parser, main, package_version
from agent.config import OPTIONS
from tests.fakes import run_fpga_agent

#: Each command line, and the options its --help must list (besides --help and --config).
OWN_OPTIONS: dict[tuple[str, ...], set[str]] = {
    ("run",): {flag for _, flags in cliflags.RUN for flag in flags},
    ("discover",): {"json"} | {flag for _, flags in cliflags.DISCOVER for flag in flags},
    ("catalog", "list"): {"json", "bitstream-dir", "log-level", "log-format"},
    ("catalog", "add"): {
        *("name", "platform", "accelerator-id", "scope", "replace", "bitstream-dir", "log-level", "log-format"),
    },
    ("catalog", "push"): {
        *("name", "platform", "accelerator-id", "pull-secret", "prefetch", "scope", "plain-http", "ca-file"),
        *("username", "password-stdin"),
    },
    ("cluster",): {"json", "all", "files", "claims", "kubeconfig", "log-level", "log-format"},
    ("uninstall",): {"kubeconfig", "namespace", "log-level", "log-format"},
    ("cleanup-grant",): {"kubeconfig", "namespace", "log-level", "log-format"},
    ("extender",): {
        *("listen", "probe-listen", "webhook-listen", "tls-cert-file", "tls-key-file", "tls-client-ca-file"),
        *("score-weights", "answer-limit", "event-loop"),
        *("kubeconfig", "log-level", "log-format"),
    },
    ("demo",): {"sim-cards", "sim-slots-per-card", "sim-program-ms", "log-level", "log-format"},
    ("certs",): {
        *("namespace", "service", "server-name", "server-secret", "client-secret", "client-name", "days"),
        *("kubeconfig", "out-dir", "webhook-configuration"),
    },
}
OPTION = re.compile(r"^\s{2}(--[a-z][a-z0-9-]*)", re.MULTILINE)


def clean_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
    env["COLUMNS"] = "400"  # argparse wraps help at the terminal's width, also inside paths with a '-'
    return env


def fpga_agent(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_fpga_agent(tmp_path, clean_env() if env is None else env, *args)


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``fpga-agent ARGS`` in this process, for what ends in argument parsing (help, usage errors)."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def listed_options(help_text: str) -> set[str]:
    return {match.removeprefix("--") for match in OPTION.findall(help_text)} - {"help", "config"}


def test_every_command_is_covered_here() -> None:
    top = {command.name for command in COMMANDS}
    assert top == {words[0] for words in OWN_OPTIONS}


@pytest.mark.usefixtures("wide")
@pytest.mark.parametrize("words", list(OWN_OPTIONS), ids=" ".join)
def test_help_lists_only_the_commands_own_options_with_defaults(
    capsys: pytest.CaptureFixture[str], words: tuple[str, ...]
) -> None:
    code, out, _ = run_main(capsys, *words, "--help")
    assert code == 0
    assert out.startswith(f"usage: fpga-agent {' '.join(words)} ")
    listed = listed_options(out)
    config_options = {opt.flag for opt in OPTIONS}
    expected = OWN_OPTIONS[words]
    # --no-cdi comes with --cdi, as --no-X with every other boolean option
    booleans = {"no-cdi", "no-bitstream-allow-link-local", "no-sim-sample-bitstream", "no-binding-conditions"}
    booleans |= {"no-whole-cards"}
    assert listed - booleans == expected
    flat = " ".join(out.split())
    for flag in expected & config_options:
        env = "FPGA_AGENT_" + flag.upper().replace("-", "_")
        assert re.search(rf"\(default: [^;]+; env {env}\)", flat), (flag, flat)


@pytest.mark.usefixtures("wide")
def test_choices_and_defaults_are_shown(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(run_main(capsys, "run", "--help")[1].split())
    assert "--mode {device-plugin,dra}" in text
    assert "--backend {auto,sim,dfl,fpga-region,static}" in text
    assert "(default: device-plugin; env FPGA_AGENT_MODE)" in text
    assert "(default: /var/lib/kubelet/device-plugins; env FPGA_AGENT_DEVICE_PLUGIN_DIR)" in text
    assert "(default: $NODE_NAME, else the host name; env FPGA_AGENT_NODE_NAME)" in text
    extender = " ".join(run_main(capsys, "extender", "--help")[1].split())
    assert "(default: 127.0.0.1:8888; env FPGA_AGENT_LISTEN)" in extender
    assert "--sim-cards" not in extender
    assert "--listen" not in text


def test_every_configuration_option_is_offered_by_some_command() -> None:
    offered = {
        flag for groups in vars(cliflags).values() if _is_groups(groups) for _, flags in groups for flag in flags
    }
    assert offered == {opt.flag for opt in OPTIONS}


def _is_groups(value: object) -> bool:
    return isinstance(value, tuple) and all(
        isinstance(group, tuple) and len(group) == 2 and isinstance(group[0], str) for group in value
    )


def test_version(tmp_path: Path) -> None:
    result = fpga_agent(tmp_path, "--version")
    assert (result.returncode, result.stdout) == (0, f"fpga-agent {package_version()}\n")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", package_version())


@pytest.mark.parametrize(
    "words",
    [
        ("run",),
        ("discover",),
        ("catalog", "list"),
        ("cluster",),
        ("extender",),
        ("certs",),
        ("cleanup-grant",),
        ("demo",),
    ],
    ids=" ".join,
)
def test_an_unknown_option_shows_the_commands_usage(capsys: pytest.CaptureFixture[str], words: tuple[str, ...]) -> None:
    code, out, err = run_main(capsys, *words, "--bogus")
    assert (code, out) == (2, "")
    assert err.startswith(f"usage: fpga-agent {' '.join(words)} ")
    assert err.endswith(f"fpga-agent {' '.join(words)}: unrecognized arguments: --bogus (--help lists the options)\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--sim-cards", "1", "--sim-slots-per-card", "1"],
            "fpga-agent demo: --sim-slots-per-card: the demo's first pod takes 2 slots of one card, got 1",
            id="one-slot",
        ),
        pytest.param(
            ["--sim-cards", "1", "--sim-slots-per-card", "3"],
            "fpga-agent demo: --sim-cards x --sim-slots-per-card: the demo's pods hold 4 slots at once, got 1 x 3",
            id="three-slots",
        ),
        pytest.param(["--backend", "dfl"], "fpga-agent demo: unrecognized arguments: --backend", id="backend"),
        pytest.param(["--mode", "dra"], "fpga-agent demo: unrecognized arguments: --mode", id="mode"),
        pytest.param(["dra-mode"], "fpga-agent demo: no demo named 'dra-mode'", id="unknown-demo"),
        pytest.param(
            ["extender", "--sim-cards", "2"],
            "fpga-agent demo: --sim-cards: only the device-plugin and dra demos simulate slots",
            id="sim-flag-elsewhere",
        ),
        pytest.param(
            ["dra", "--sim-cards", "1", "--sim-slots-per-card", "1"],
            "--sim-cards x --sim-slots-per-card: the dra demo's claims hold 2 slots at once, got 1 x 1",
            id="dra-one-slot",
        ),
    ],
)
def test_demo_refuses_what_it_cannot_do_before_it_starts(tmp_path: Path, args: list[str], message: str) -> None:
    result = fpga_agent(tmp_path, "demo", *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert message in result.stderr.splitlines()[-1]


def test_demo_runs_on_the_fewest_slots_it_accepts(tmp_path: Path) -> None:
    result = fpga_agent(tmp_path, "demo", "--sim-cards", "1", "--sim-slots-per-card", "4", "--sim-program-ms", "5")
    assert result.returncode == 0, result.stderr
    assert "\n== done" in result.stdout


def test_extender_demo_scores_the_loaded_node_highest(tmp_path: Path) -> None:
    result = fpga_agent(tmp_path, "demo", "extender")
    assert result.returncode == 0, result.stderr
    first_table = result.stdout.split("== 2.")[1].split("==")[0]
    scores = {line.split()[0]: int(line.split()[-1]) for line in first_table.splitlines() if line.startswith("node-")}
    assert scores["node-a"] == 10  # aes-v1 loaded in a free slot
    assert scores["node-a"] > scores["node-b"] == scores["node-c"] > scores["node-d"] > scores["node-e"]
    assert 'filtered out node-b: bitstream "aes-v1"' in result.stdout
    assert "kept: node-a, node-f" in result.stdout


def test_cdi_is_an_on_off_flag_that_still_takes_a_value() -> None:
    parser = build_parser()
    assert parser.parse_args(["run", "--cdi"]).cdi == "true"
    assert parser.parse_args(["run", "--no-cdi"]).cdi == "false"
    assert parser.parse_args(["run", "--cdi", "false"]).cdi == "false"
    assert parser.parse_args(["run"]).cdi is None  # not given: environment and file still apply


def test_catalog_add_refuses_an_accelerator_id_that_is_not_128_bits(tmp_path: Path) -> None:
    image = tmp_path / "raw.bin"
    image.write_bytes(b"\x00" * 64)
    catalog = tmp_path / "catalog"
    args = ["catalog", "add", str(image), "--name", "x", "--platform", "p", "--bitstream-dir", str(catalog)]
    result = fpga_agent(tmp_path, *args, "--accelerator-id", "a")
    assert result.returncode == 2
    assert "argument --accelerator-id: must be 32 hex digits" in result.stderr
    assert not catalog.exists()  # nothing was written
    uuid = "A5E00000-0000-0000-0000-00000000C0DE"
    accepted = fpga_agent(tmp_path, *args, "--accelerator-id", uuid)
    assert accepted.returncode == 0, accepted.stderr
    assert "accelerator a5e0000000000000000000000000c0de" in accepted.stdout


def test_catalog_list_of_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    result = fpga_agent(tmp_path, "catalog", "list", "--bitstream-dir", str(tmp_path / "typo"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert (
        result.stderr
        == f"fpga-agent catalog list: no catalog at {tmp_path / 'typo'}: no such directory (--bitstream-dir)\n"
    )


def test_discover_without_hardware_says_so(tmp_path: Path) -> None:
    result = fpga_agent(tmp_path, "discover", "--backend", "sim", "--sim-cards", "0", "--state-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "no FPGA slots on this node: backend sim found no usable" in result.stderr
    assert "registering" not in result.stderr


@pytest.mark.parametrize("command", ["cluster", "extender"])
def test_kubeconfig_naming_a_missing_file_is_one_line(tmp_path: Path, command: str) -> None:
    env = {**clean_env(), "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    result = fpga_agent(tmp_path, command, *(["--listen", "127.0.0.1:0"] if command == "extender" else []), env=env)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"fpga-agent {command}: $KUBECONFIG names {tmp_path / 'missing'}: no such file\n"


def test_pull_demo_pulls_the_pushed_bitstream_and_refuses_a_tampered_copy(tmp_path: Path) -> None:
    result = fpga_agent(tmp_path, "demo", "pull")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    declared = yaml.safe_load(out.split("the FpgaBitstream the push prints\n")[1].split("\n==")[0])
    assert declared["kind"] == "FpgaBitstream"
    assert declared["spec"]["size"] == 65536
    pulled = out.split("== 3.")[1].split("== 4.")[0]
    assert "pulled 65536 bytes in " in pulled
    assert f"aes-v1  sim-pr-v1  65536  {declared['spec']['sha256'][:12]}" in pulled
    assert "PulledHashMismatch: bitstream 'aes-v1-copy'" in out
    assert "the node's catalog holds: aes-v1\n" in out  # the tampered copy left nothing behind
    assert "\n== done" in out
