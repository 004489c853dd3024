"""The configuration options as command-line flags, and which of them each subcommand takes, grouped as its
``--help`` shows them.

Every option lives once in :mod:`agent.config`; a flag's default is 'not given', so that one set by
environment or ``--config`` file still applies to every command (flag > ``FPGA_AGENT_*`` > file > default).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import TypeAlias

from agent.config import ENV_PREFIX, OPTIONS, Config, load_config
from agent.config.values import Choice, parse_bool
from agent.output.logs import setup_logging

#: What a subcommand module adds its parser to (``add_<name>_command(commands)``).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
#: (group title, option flags); a command adds the groups it uses.
Groups = tuple[tuple[str, tuple[str, ...]], ...]

LOGGING: Groups = (("logging", ("log-level", "log-format")),)
SIMULATED: Groups = (
    ("simulated backend (--backend sim)", ("sim-cards", "sim-slots-per-card", "sim-program-ms", "sim-device-nodes")),
)
HARDWARE: Groups = (
    ("hardware", ("backend", "static-slots", "command-programmers", "fpga-region-base-images", "state-dir")),
    *SIMULATED,
)
RUN: Groups = (
    ("mode", ("mode", "node-name", "namespace", "pod-name", "pod-uid")),
    *HARDWARE,
    ("kubelet (device-plugin mode)", ("device-plugin-dir", "pod-resources-socket", "program-timeout-s", "cdi")),
    ("kubelet (dra mode)", ("dra-registry-dir", "dra-plugins-dir", "cdi-dir", "binding-conditions", "whole-cards")),
    (
        "bitstreams",
        (
            "bitstream-dir",
            "bitstream-cache-bytes",
            "bitstream-plain-http",
            "bitstream-ca-file",
            "bitstream-allow-link-local",
            "sim-sample-bitstream",
        ),
    ),
    ("API server and probes", ("kubeconfig", "health-listen")),
    *LOGGING,
)
DISCOVER: Groups = (*HARDWARE, *LOGGING)
CATALOG: Groups = (("catalog", ("bitstream-dir",)), *LOGGING)
CLUSTER: Groups = (("API server", ("kubeconfig",)), *LOGGING)
UNINSTALL: Groups = (("API server", ("kubeconfig", "namespace")), *LOGGING)
EXTENDER: Groups = (
    ("HTTP", ("listen", "probe-listen", "webhook-listen", "tls-cert-file", "tls-key-file", "tls-client-ca-file")),
    ("serving", ("event-loop",)),
    ("scoring", ("score-weights", "answer-limit")),
    ("API server", ("kubeconfig",)),
    *LOGGING,
)
DEMO: Groups = (
    ("simulated node", ("sim-cards", "sim-slots-per-card", "sim-program-ms")),
    *LOGGING,
)


#: Defaults that depend on the environment, said in words.
_SHOWN_DEFAULTS = {
    "node-name": "$NODE_NAME, else the host name",
    "namespace": "$POD_NAMESPACE, else fpga-slot",
    "kubeconfig": "$KUBECONFIG, else ~/.kube/config, else the pod's service account",
}


def add_config_file_argument(container: argparse._ActionsContainer) -> None:
    """``--config FILE``: the YAML file read after flags and environment."""
    container.add_argument(
        "--config", default=None, metavar="FILE", help=f"YAML file of option values (env {ENV_PREFIX}CONFIG)"
    )


def add_option_argument(container: argparse._ActionsContainer, flag: str) -> None:
    """Add the option ``--flag`` (help shows default and env); a boolean one is an on/off flag (``--cdi``,
    ``--no-cdi``) that still takes a value (``--cdi false``)."""
    opt = next(opt for opt in OPTIONS if opt.flag == flag)
    default = _SHOWN_DEFAULTS.get(opt.flag) or opt.default_text({}) or "none"
    help_text = f"{opt.help} (default: {default}; env {opt.env})".replace("%", "%%")
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


def add_option_groups(parser: argparse.ArgumentParser, groups: Groups) -> None:
    """``--config`` and the options of ``groups``, each group under its title."""
    add_config_file_argument(parser)
    for title, flags in groups:
        group = parser.add_argument_group(title)
        for flag in flags:
            add_option_argument(group, flag)


def command_config(args: argparse.Namespace) -> Config:
    """The validated configuration of parsed arguments, logging set up; ConfigError names the flag and source."""
    config = load_config(vars(args))
    setup_logging(config.log_level, config.log_format)
    return config


def stop_on_signals() -> asyncio.Event:
    """An event that SIGTERM or SIGINT sets: how a long-running command learns it should stop (in a running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop
