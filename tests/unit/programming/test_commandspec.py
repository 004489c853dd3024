"""The command-programmers setting: what is accepted, and the one-line error for what is not."""

from __future__ import annotations

import json
import re

import pytest

from agent.config import load_config
from agent.errors import ConfigError, ProgrammingError
from agent.programming.commandspec import check_selection, parse_command_programmers

XBUTIL = "/opt/xilinx/xrt/bin/xbutil"


def test_command_programmer_spec_renders_each_placeholder_into_one_argument() -> None:
    (spec,) = parse_command_programmers(
        [
            {
                "slots": ["a-user"],
                "program": [XBUTIL, "program", "-d", "{control_node}", "--user={image}", "{accelerator}"],
            }
        ]
    )
    values = {"image": "/x y/vadd.bin", "control_node": "0000:e5:00.1", "accelerator": "ab", "slot": "s"}
    assert spec.program.render(values | {"card": "c", "region": "r"}) == (
        XBUTIL,
        "program",
        "-d",
        "0000:e5:00.1",
        "--user=/x y/vadd.bin",
        "ab",
    )


@pytest.mark.parametrize(
    ("template", "value"),
    [
        pytest.param("{accelerator}", "--force", id="accelerator"),
        pytest.param("{control_node}", "-d", id="control-node"),
        pytest.param("{card}x", "-rf", id="value-then-text"),
    ],
)
def test_command_programmer_spec_refuses_a_value_that_would_become_an_option(template: str, value: str) -> None:
    (spec,) = parse_command_programmers([{"slots": ["a-user"], "program": [XBUTIL, "program", template]}])
    values = {"image": "/i", "control_node": "n", "accelerator": "ab", "slot": "s", "card": "c", "region": "r"}
    name = template[1:].split("}")[0]
    with pytest.raises(ProgrammingError, match=rf"xbutil: argument \{{{name}\}}.* would read as an option"):
        spec.program.render(values | {name: value})
    # a template that is itself an option may carry any value after its '=': it stays one argument
    (spec,) = parse_command_programmers([{"slots": ["a-user"], "program": [XBUTIL, "--user={" + name + "}"]}])
    assert spec.program.render(values | {name: value}) == (XBUTIL, f"--user={value}")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("card", "--force", id="card"),
        pytest.param("region", "-x", id="region"),
        pytest.param("control-node", " --device=/dev/mem", id="control-node"),
    ],
)
def test_a_static_slot_value_that_reads_as_an_option_is_refused_at_start(field: str, value: str) -> None:
    slot = {"card": "u250", "region": "user", "devices": ["/dev/null"], "platform": "p"} | {field: value}
    with pytest.raises(ConfigError, match=rf"^--static-slots: \[0\]\.{field} '.*' starts with '-'"):
        load_config({"static_slots": json.dumps([slot])}, env={})


@pytest.mark.parametrize(("card", "region", "field"), [("...", ".", "card"), ("u250", ". .", "region")])
def test_a_static_slot_that_names_nothing_is_refused_at_start_naming_it(card: str, region: str, field: str) -> None:
    slot = {"card": card, "region": region, "devices": ["/dev/null"], "platform": "p"}
    with pytest.raises(ConfigError, match=rf"^--static-slots: \[0\]\.{field} '.*' has no letter or digit"):
        load_config({"static_slots": json.dumps([slot])}, env={})


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"program": [XBUTIL]}, "[0] must name either slots"),
        ({"platform": "p", "slots": ["a"], "program": [XBUTIL]}, "[0] must name either slots"),
        ({"platform": "p"}, "[0].program is required"),
        ({"platform": "p", "program": ["xbutil", "program"]}, "must be an absolute path"),
        ({"platform": "p", "program": ["{image}"]}, "must be an absolute path"),
        ({"platform": "p", "program": [XBUTIL, "{file}"]}, "unknown placeholder {file}"),
        ({"platform": "p", "program": [XBUTIL], "read-back": [XBUTIL, "{image}"]}, "unknown placeholder {image}"),
        ({"platform": "p", "program": [XBUTIL, "{card"]}, "unbalanced brace"),
        ({"platform": "p", "program": [XBUTIL], "read-back-pattern": "x"}, "needs a read-back command"),
        ({"platform": "p", "program": [XBUTIL], "read-back": [XBUTIL], "read-back-pattern": "("}, "not a regular"),
        ({"platform": "p", "program": [XBUTIL], "read-back": [XBUTIL], "read-back-pattern": "(a)(b)"}, "one group"),
        ({"platform": "p", "program": [XBUTIL], "environment": {"A B": "1"}}, "not an environment variable name"),
        (
            {"platform": "p", "program": [XBUTIL], "environment": {"LD_PRELOAD": "/tmp/x.so"}},
            "[0].environment.LD_PRELOAD: a dynamic-loader variable",
        ),
        (
            {
                "platform": "p",
                "program": [XBUTIL],
                "environment": {"LD_AUDIT": "/x.so"},
                "allow-loader-variables": ["LD_LIBRARY_PATH"],
            },
            "[0].environment.LD_AUDIT: a dynamic-loader variable",
        ),
        (
            {"platform": "p", "program": [XBUTIL], "allow-loader-variables": ["PATH"]},
            "[0].allow-loader-variables must be a list of LD_* variable names",
        ),
        ({"platform": "p", "program": [XBUTIL], "shell": True}, "unknown field(s) shell"),
    ],
    ids=[
        "no-selection",
        "both-selections",
        "no-program",
        "relative-tool",
        "placeholder-tool",
        "unknown-placeholder",
        "image-in-read-back",
        "unbalanced",
        "pattern-without-read-back",
        "bad-regex",
        "two-groups",
        "bad-env-name",
        "loader-variable",
        "loader-variable-not-listed",
        "allowed-not-a-loader-variable",
        "unknown-field",
    ],
)
def test_command_programmer_spec_rejects_with_a_message_naming_the_field(entry: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_command_programmers([entry])


def test_command_programmer_spec_selection_must_match_declared_static_slots() -> None:
    specs = parse_command_programmers(
        [{"slots": ["u250-user"], "program": [XBUTIL]}, {"slots": ["u250-user"], "program": [XBUTIL]}]
    )
    with pytest.raises(ValueError, match=r"\[1\]\.slots: 'u250-user' is already programmed by entry \[0\]"):
        check_selection(specs, {"u250-user": "p"})
    with pytest.raises(ValueError, match=r"\[0\]\.slots: 'u250-user' is not a declared static slot"):
        check_selection(specs[:1], {})
    with pytest.raises(ValueError, match=r"\[0\]\.platform: no declared static slot has platform 'q'"):
        check_selection(parse_command_programmers([{"platform": "q", "program": [XBUTIL]}]), {"a-b": "p"})


def test_command_programmer_config_error_names_the_flag_and_changes_nothing() -> None:
    slots = [{"card": "u250", "region": "user", "devices": ["/dev/null"], "platform": "p"}]
    good = [{"platform": "p", "program": [XBUTIL, "program", "--user", "{image}"]}]
    config = load_config({"static_slots": json.dumps(slots), "command_programmers": json.dumps(good)}, env={})
    assert config.command_programmers[0].program.tool == XBUTIL
    with pytest.raises(ConfigError, match=r"^--command-programmers: \[0\]\.platform: no declared static slot"):
        load_config({"command_programmers": json.dumps(good)}, env={})


def test_command_programmer_loader_variables_named_in_allow_loader_variables_are_set() -> None:
    (spec,) = parse_command_programmers(
        [
            {
                "platform": "p",
                "program": [XBUTIL],
                "environment": {"XILINX_XRT": "/opt/xilinx/xrt", "LD_LIBRARY_PATH": "/opt/xilinx/xrt/lib"},
                "allow-loader-variables": ["LD_LIBRARY_PATH"],
            }
        ]
    )
    assert spec.environment == (("LD_LIBRARY_PATH", "/opt/xilinx/xrt/lib"), ("XILINX_XRT", "/opt/xilinx/xrt"))
