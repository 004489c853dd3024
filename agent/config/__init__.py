"""Configuration: one frozen, validated Config, resolved once at start.

Precedence: flag > ``FPGA_AGENT_<FLAG>`` environment variable > YAML file (``--config``) > default."""

# ruff: noqa: RUF009 - each Config field is an _option(...): a dataclasses.field that carries the option

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from agent.config import values as v
from agent.config.values import ListenAddress
from agent.discovery.static import StaticSlotSpec
from agent.errors import ConfigError
from agent.extender.ranking import ANSWER_LIMIT
from agent.extender.scoring import ScoreWeights, parse_score_weights
from agent.programming.commandspec import CommandSpec, check_selection

ENV_PREFIX = "FPGA_AGENT_"
#: The extender's event loops: uvloop (libuv) or Python's own.
EVENT_LOOPS = ("uvloop", "asyncio")
MODES = ("device-plugin", "dra")


@dataclass(frozen=True, slots=True)
class _Option:
    """An option as the command line, the environment and the ``--config`` file name it."""

    flag: str
    parse: Callable[[str], Any]
    #: the text parsed when nothing else gives a value (a function of the environment for the downward API's)
    default: str | Callable[[Mapping[str, str]], str]
    help: str

    @property
    def field(self) -> str:
        return self.flag.replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.field.upper()

    def default_text(self, env: Mapping[str, str]) -> str:
        return self.default if isinstance(self.default, str) else self.default(env)


def _option(parse: Callable[[str], Any], default: str | Callable[[Mapping[str, str]], str], help: str) -> Any:
    """A :class:`Config` field that is an option: how its text is parsed, its default and its help."""
    return field(metadata={"parse": parse, "default": default, "help": help})


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the agent needs to know, validated; each field is an option (:data:`OPTIONS`)."""

    backend: str = _option(
        v.Choice(("auto", "sim", "dfl", "fpga-region", "static")),
        "auto",
        "slot backend: auto (every hardware backend present), sim, dfl, fpga-region, static",
    )
    mode: str = _option(
        v.Choice(MODES),
        "device-plugin",
        "how pods get slots: device-plugin (the extended resource example.com/fpga-slot) or dra "
        "(ResourceClaims of the DRA driver fpga.example.com; needs API access)",
    )
    device_plugin_dir: Path = _option(
        v.parse_path,
        "/var/lib/kubelet/device-plugins",
        "kubelet device-plugin directory (holds kubelet.sock and our socket)",
    )
    pod_resources_socket: Path = _option(
        v.parse_path, "/var/lib/kubelet/pod-resources/kubelet.sock", "kubelet pod-resources API socket"
    )
    state_dir: Path = _option(v.parse_path, "/var/lib/fpga-agent", "agent state directory")
    sim_cards: int = _option(v.parse_int(0, 64), "2", "simulated cards")
    sim_slots_per_card: int = _option(v.parse_int(1, 64), "4", "slots per simulated card")
    sim_program_ms: int = _option(v.parse_int(0, 600_000), "800", "simulated reconfiguration (ms)")
    sim_device_nodes: str = _option(
        v.Choice(("char", "file")),
        "char",
        "simulated slots' device files: char (device nodes a container can be given; needs root) "
        "or file (regular files: no root, but no container starts with one)",
    )
    sim_sample_bitstream: bool = _option(
        v.parse_bool,
        "false",
        "with --backend sim: put the sample bitstream aes-v1 (platform sim-pr-v1) in the node's catalog at start, "
        "unless it has an entry of that name",
    )
    node_name: str = _option(v.parse_name, lambda env: env.get("NODE_NAME") or socket.gethostname(), "node name")
    log_level: str = _option(v.Choice(("debug", "info", "warning", "error")), "info", "log level")
    log_format: str = _option(v.Choice(("text", "json")), "text", "log format: text or json")
    dra_registry_dir: Path = _option(
        v.parse_path, "/var/lib/kubelet/plugins_registry", "dra mode: the kubelet's plugin registration directory"
    )
    dra_plugins_dir: Path = _option(
        v.parse_path,
        "/var/lib/kubelet/plugins",
        "dra mode: where the DRA socket goes (<dir>/fpga.example.com/dra.sock)",
    )
    cdi_dir: Path = _option(
        v.parse_path,
        "/var/run/cdi",
        "dra mode: the container runtime's CDI spec directory (one spec per prepared claim)",
    )
    binding_conditions: bool = _option(
        v.parse_bool,
        "false",
        "dra mode: program a claim's slots when the scheduler allocates them and let the pod bind only once "
        "they are ready; a failed programming places the pod again (device binding conditions, Kubernetes >= 1.36)",
    )
    whole_cards: bool = _option(
        v.parse_bool,
        "false",
        "dra mode: offer each card whole beside its slots (never both at once; partitionable devices, Kubernetes "
        ">= 1.36), where the backend can program a whole card (sim, fpga-region with base images, command "
        "programmers with program-card)",
    )
    fpga_region_base_images: tuple[tuple[str, str], ...] = _option(
        v.parse_base_images,
        "",
        "fpga-region: MANAGER=FIRMWARE,... the firmware (in /lib/firmware) that restores the child regions of the "
        "base region an FPGA manager programs; a manager named here can program that base region whole "
        "(--whole-cards)",
    )
    cdi: bool = _option(v.parse_bool, "false", "also return CDI device names (runtime supports CDI)")
    bitstream_dir: Path = _option(
        v.parse_path,
        "/var/lib/fpga-agent/bitstreams",
        "bitstream catalog directory (bitstreams and their metadata records)",
    )
    bitstream_cache_bytes: int = _option(
        v.parse_int(1 << 20, 1 << 50),
        str(2 << 30),
        "byte budget of bitstreams pulled from the cluster's FpgaBitstream sources (least recently used "
        "evicted first, never one in use; local catalog entries do not count)",
    )
    bitstream_plain_http: tuple[str, ...] = _option(
        v.parse_hosts,
        "",
        "registries (host[:port], comma-separated) that FpgaBitstream artifacts are pulled from over plain HTTP "
        "instead of HTTPS, e.g. a registry on the node's own network",
    )
    bitstream_ca_file: Path | None = _option(
        v.parse_optional_path,
        "",
        "CA certificates (PEM) to trust, besides the system's, for FpgaBitstream registries and HTTPS sources",
    )
    bitstream_allow_link_local: bool = _option(
        v.parse_bool,
        "false",
        "pull FpgaBitstream sources at link-local addresses (169.254.0.0/16, fe80::/10: a cloud's metadata "
        "service, the node's own link), which are refused otherwise",
    )
    namespace: str = _option(
        v.parse_namespace,
        lambda env: env.get("POD_NAMESPACE") or "fpga-slot",
        "the agent's own namespace (the downward API's POD_NAMESPACE): pull Secrets of FpgaBitstreams are read there",
    )
    pod_name: str = _option(
        v.parse_pod_field(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", "a pod name"),
        lambda env: env.get("POD_NAME") or "",
        "the agent's own pod (the downward API's POD_NAME): on a clean stop its DaemonSet says whether another "
        "agent follows on the node; empty: not in a pod",
    )
    pod_uid: str = _option(
        v.parse_pod_field(r"[0-9a-f][-0-9a-f]{0,63}", "a pod UID"),
        lambda env: env.get("POD_UID") or "",
        "the agent pod's UID (the downward API's POD_UID): DRA mode names its sockets after it, so that an "
        "updated agent can serve beside the old one",
    )
    program_timeout_s: float = _option(
        v.parse_int(1, 120), "25", "deadline for programming at PreStartContainer; the kubelet allows 30 s"
    )
    kubeconfig: Path | None = _option(
        v.parse_optional_path, "", "kubeconfig file for the API server, found as kubectl finds it"
    )
    static_slots: tuple[StaticSlotSpec, ...] = _option(
        v.parse_static,
        "[]",
        "slots of the static backend: list of {card, region, devices, numa, platform, control-node} (YAML/JSON)",
    )
    command_programmers: tuple[CommandSpec, ...] = _option(
        v.parse_commands,
        "[]",
        "vendor tools that program static slots: list of {slots or platform, program, read-back, "
        "read-back-pattern, reset, failure-pattern, environment} (YAML/JSON; see docs/command-programmer.md)",
    )
    health_listen: ListenAddress | None = _option(
        v.parse_listen,
        "127.0.0.1:8095",
        "HTTP address of /healthz, /readyz (the kubelet's probes) and /metrics; empty: no endpoint",
    )
    listen: ListenAddress = _option(
        v.parse_required_listen,
        "127.0.0.1:8888",
        "extender: HTTP address for kube-scheduler (/filter, /prioritize, /healthz)",
    )
    probe_listen: ListenAddress | None = _option(
        v.parse_listen,
        "",
        "extender: plain-HTTP address of /healthz and /metrics alone, for the kubelet's probes and Prometheus "
        "beside an HTTPS --listen; empty: none",
    )
    webhook_listen: ListenAddress | None = _option(
        v.parse_listen,
        "",
        "extender: HTTPS address of /validate, the admission webhook that refuses claims and pods naming a "
        "bitstream no node has and no FpgaBitstream declares (no client certificate asked; needs "
        "--tls-cert-file); empty: none",
    )
    tls_cert_file: Path | None = _option(
        v.parse_optional_path,
        "",
        "extender: serve HTTPS with this certificate (PEM; with --tls-key-file); empty: plain HTTP",
    )
    tls_key_file: Path | None = _option(v.parse_optional_path, "", "extender: the private key of --tls-cert-file")
    tls_client_ca_file: Path | None = _option(
        v.parse_optional_path,
        "",
        "extender: require client certificates signed by this CA (kube-scheduler's tlsConfig certFile)",
    )
    score_weights: ScoreWeights = _option(
        parse_score_weights,
        str(ScoreWeights()),
        "extender: prioritize values 0..10 of a slot that holds the bitstream, an empty slot, a slot to evict, "
        "and the neutral score (pod without bitstream, node without state)",
    )
    answer_limit: int = _option(
        v.parse_int(0, 1_000_000),
        str(ANSWER_LIMIT),
        "extender: most nodes a prioritize answer lists, the best by score, then by packing (MostAllocated); "
        "the others score the call's lowest score; 0 lists every node above it",
    )
    event_loop: str = _option(
        v.Choice(EVENT_LOOPS),
        "uvloop",
        "extender: the event loop that serves the calls: uvloop (libuv, a little less CPU per call) or asyncio "
        "(Python's own)",
    )

    @property
    def sim_dev_dir(self) -> Path:
        """Where the simulated cards keep their device files and contents."""
        return self.state_dir / "sim-dev"


OPTIONS = tuple(_Option(f.name.replace("_", "-"), **f.metadata) for f in fields(Config))
_BY_KEY = {opt.field: opt for opt in OPTIONS}


def read_file(name: str | None) -> tuple[dict[str, str], str]:
    """The ``--config`` file's values by option field (each as an option's text), and its name."""
    if not name:
        return {}, ""
    try:
        data = yaml.safe_load(Path(name).read_text())
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {name}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config: {name} is not valid YAML: {exc}") from None
    if data is None:
        return {}, name
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {name} must hold a mapping of option names to values")
    values: dict[str, str] = {}
    for key, value in data.items():
        key_field = str(key).replace("-", "_")
        if key_field not in _BY_KEY:
            raise ConfigError(f"--config: {name} has unknown key {key!r}")
        if key_field in ("static_slots", "command_programmers"):
            values[key_field] = json.dumps(value)
        elif isinstance(value, dict | list) or value is None:
            raise ConfigError(f"--config: {name} key {key!r} must be a single value")
        else:
            values[key_field] = str(value).lower() if isinstance(value, bool) else str(value)
    return values, name


def load_config(flags: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Resolve every option: flag > environment > config file > default; validate each."""
    env = os.environ if env is None else env
    file_values, file_name = read_file(flags.get("config") or env.get(f"{ENV_PREFIX}CONFIG"))
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        if flags.get(opt.field) is not None:
            raw, source = str(flags[opt.field]), f"flag --{opt.flag}"
        elif opt.env in env:
            raw, source = env[opt.env], f"environment {opt.env}"
        elif opt.field in file_values:
            raw, source = file_values[opt.field], f"{file_name} key {opt.flag!r}"
        else:
            raw, source = opt.default_text(env), "default"
        try:
            values[opt.field] = opt.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"--{opt.flag}: {exc} (from {source})") from None
    if (values["tls_cert_file"] is None) != (values["tls_key_file"] is None):
        raise ConfigError("--tls-cert-file and --tls-key-file: give both (HTTPS) or neither (plain HTTP)")
    if values["webhook_listen"] is not None and values["tls_cert_file"] is None:
        raise ConfigError(
            "--webhook-listen: the API server calls admission webhooks over HTTPS only: give --tls-cert-file"
        )
    if values["tls_client_ca_file"] is not None and values["tls_cert_file"] is None:
        raise ConfigError("--tls-client-ca-file: client certificates are checked over HTTPS only: give --tls-cert-file")
    if values["command_programmers"]:
        platforms = {spec.slot_id: spec.platform for spec in values["static_slots"]}
        try:
            check_selection(values["command_programmers"], platforms)
        except ValueError as exc:
            raise ConfigError(f"--command-programmers: {exc} (see --static-slots)") from None
    return Config(**values)
