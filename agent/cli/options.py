"""Every configuration option (``agent.config.OPTIONS``) as a command-line flag whose default is 'not given',
so that the environment and the ``--config`` file still apply (``agent.config.load_config``)."""

from __future__ import annotations

import argparse

from agent.config import ENV_PREFIX, OPTIONS
from agent.config.values import Choice, parse_bool

_BY_FIELD = {opt.field: opt for opt in OPTIONS}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and every option as a flag whose default is 'not given'."""
    add_config_file_argument(parser)
    for opt in OPTIONS:
        add_option_argument(parser, opt.flag)


def add_config_file_argument(container: argparse._ActionsContainer) -> None:
    """``--config FILE``: the YAML file read after flags and environment."""
    container.add_argument(
        "--config", default=None, metavar="FILE", help=f"YAML file of option values (env {ENV_PREFIX}CONFIG)"
    )


def add_option_argument(container: argparse._ActionsContainer, flag: str) -> None:
    """Add the option ``--flag`` (help shows default and env); a boolean one is an on/off flag (``--cdi``,
    ``--no-cdi``) that still takes a value (``--cdi false``)."""
    opt = _BY_FIELD[flag.replace("-", "_")]
    default = _SHOWN_DEFAULTS.get(opt.flag) or opt.default({}) or "none"
    where = f"default: {default}; env {opt.env}"
    help_text = f"{opt.help} ({where})".replace("%", "%%")
    if opt.parse is parse_bool:
        container.add_argument(
            f"--{opt.flag}", dest=opt.field, nargs="?", const="true", default=None, metavar="BOOL", help=help_text
        )
        container.add_argument(
            f"--no-{opt.flag}", dest=opt.field, action="store_const", const="false", help=f"--{opt.flag} false"
        )
        return
    metavar = "{" + ",".join(opt.parse.choices) + "}" if isinstance(opt.parse, Choice) else None
    container.add_argument(f"--{opt.flag}", dest=opt.field, default=None, metavar=metavar, help=help_text)


#: Defaults that depend on the environment, said in words.
_SHOWN_DEFAULTS = {
    "node-name": "$NODE_NAME, else the host name",
    "namespace": "$POD_NAMESPACE, else fpga-slot",
    "kubeconfig": "$KUBECONFIG, else ~/.kube/config, else the pod's service account",
}


def option_flags() -> tuple[str, ...]:
    """Every option's flag name (without ``--``), in declaration order."""
    return tuple(opt.flag for opt in OPTIONS)
