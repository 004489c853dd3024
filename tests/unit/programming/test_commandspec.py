"""The command-programmers setting: what is accepted, and the one-line error for what is not."""

from __future__ import annotations

import json
import re

import pytest

from agent.config import load_config
from agent.errors import ConfigError
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
