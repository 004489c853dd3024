"""Configuration: one frozen, validated Config, resolved once at start.

Precedence: flag > ``FPGA_AGENT_<FLAG>`` environment variable > YAML file (``--config``) > default."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config import values as v
from agent.config.values import ListenAddress, read_file
from agent.discovery.static import StaticSlotSpec
from agent.errors import ConfigError
from agent.extender.ranking import ANSWER_LIMIT
from agent.extender.scoring import ScoreWeights, parse_score_weights
from agent.programming.commandspec import CommandSpec, check_selection

ENV_PREFIX = "FPGA_AGENT_"
BACKENDS = ("auto", "sim", "dfl", "fpga-region", "static")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
SIM_DEVICE_NODES = ("char", "file")
#: The extender's event loops: uvloop (libuv) or Python's own.
EVENT_LOOPS = ("uvloop", "asyncio")
MODES = ("device-plugin", "dra")


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the agent needs to know, validated."""

    backend: str
    device_plugin_dir: Path
    pod_resources_socket: Path
    state_dir: Path
    sim_cards: int
    sim_slots_per_card: int
    sim_program_ms: int
    node_name: str
    log_level: str
    log_format: str
    cdi: bool
    static_slots: tuple[StaticSlotSpec, ...] = ()
    command_programmers: tuple[CommandSpec, ...] = ()
    bitstream_dir: Path = Path("/var/lib/fpga-agent/bitstreams")
    program_timeout_s: float = 25.0
    kubeconfig: Path | None = None
    health_listen: ListenAddress | None = None
    listen: ListenAddress = ListenAddress("127.0.0.1", 8888)
    probe_listen: ListenAddress | None = None
    score_weights: ScoreWeights = field(default_factory=ScoreWeights)
    answer_limit: int = ANSWER_LIMIT
    event_loop: str = "uvloop"
    sim_device_nodes: str = "char"
    sim_sample_bitstream: bool = False
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    webhook_listen: ListenAddress | None = None
    mode: str = "device-plugin"
    dra_registry_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    dra_plugins_dir: Path = Path("/var/lib/kubelet/plugins")
    cdi_dir: Path = Path("/var/run/cdi")
    binding_conditions: bool = False
    whole_cards: bool = False
    fpga_region_base_images: tuple[tuple[str, str], ...] = ()
    bitstream_cache_bytes: int = 2 << 30
    bitstream_plain_http: tuple[str, ...] = ()
    bitstream_ca_file: Path | None = None
    bitstream_allow_link_local: bool = False
    namespace: str = "fpga-slot"
    pod_name: str = ""
    pod_uid: str = ""

    @property
    def sim_dev_dir(self) -> Path:
        """Where the simulated cards keep their device files and contents."""
        return self.state_dir / "sim-dev"


@dataclass(frozen=True, slots=True)
class _Option:
    flag: str
    parse: Callable[[str], Any]
    default: Callable[[Mapping[str, str]], str]
    help: str

    @property
    def field(self) -> str:
        return self.flag.replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.field.upper()


OPTIONS: tuple[_Option, ...] = (
    _Option(
        "backend",
        v.Choice(BACKENDS),
        lambda env: "auto",
        "slot backend: auto (every hardware backend present), sim, dfl, fpga-region, static",
    ),
    _Option(
        "mode",
        v.Choice(MODES),
        lambda env: "device-plugin",
        "how pods get slots: device-plugin (the extended resource example.com/fpga-slot) or dra "
        "(ResourceClaims of the DRA driver fpga.example.com; needs API access)",
    ),
    _Option(
        "device-plugin-dir",
        v.parse_path,
        lambda env: "/var/lib/kubelet/device-plugins",
        "kubelet device-plugin directory (holds kubelet.sock and our socket)",
    ),
    _Option(
        "pod-resources-socket",
        v.parse_path,
        lambda env: "/var/lib/kubelet/pod-resources/kubelet.sock",
        "kubelet pod-resources API socket",
    ),
    _Option("state-dir", v.parse_path, lambda env: "/var/lib/fpga-agent", "agent state directory"),
    _Option("sim-cards", v.parse_int(0, 64), lambda env: "2", "simulated cards"),
    _Option("sim-slots-per-card", v.parse_int(1, 64), lambda env: "4", "slots per simulated card"),
    _Option("sim-program-ms", v.parse_int(0, 600_000), lambda env: "800", "simulated reconfiguration (ms)"),
    _Option(
        "sim-device-nodes",
        v.Choice(SIM_DEVICE_NODES),
        lambda env: "char",
        "simulated slots' device files: char (device nodes a container can be given; needs root) "
        "or file (regular files: no root, but no container starts with one)",
    ),
    _Option(
        "sim-sample-bitstream",
        v.parse_bool,
        lambda env: "false",
        "with --backend sim: put the sample bitstream aes-v1 (platform sim-pr-v1) in the node's catalog at start, "
        "unless it has an entry of that name",
    ),
    _Option("node-name", v.parse_name, lambda env: env.get("NODE_NAME") or socket.gethostname(), "node name"),
    _Option("log-level", v.Choice(LOG_LEVELS), lambda env: "info", "log level"),
    _Option("log-format", v.Choice(LOG_FORMATS), lambda env: "text", "log format: text or json"),
    _Option(
        "dra-registry-dir",
        v.parse_path,
        lambda env: "/var/lib/kubelet/plugins_registry",
        "dra mode: the kubelet's plugin registration directory",
    ),
    _Option(
        "dra-plugins-dir",
        v.parse_path,
        lambda env: "/var/lib/kubelet/plugins",
        "dra mode: where the DRA socket goes (<dir>/fpga.example.com/dra.sock)",
    ),
    _Option(
        "cdi-dir",
        v.parse_path,
        lambda env: "/var/run/cdi",
        "dra mode: the container runtime's CDI spec directory (one spec per prepared claim)",
    ),
    _Option(
        "binding-conditions",
        v.parse_bool,
        lambda env: "false",
        "dra mode: program a claim's slots when the scheduler allocates them and let the pod bind only once "
        "they are ready; a failed programming places the pod again (device binding conditions, Kubernetes >= 1.36)",
    ),
    _Option(
        "whole-cards",
        v.parse_bool,
        lambda env: "false",
        "dra mode: offer each card whole beside its slots (never both at once; partitionable devices, Kubernetes "
        ">= 1.36), where the backend can program a whole card (sim, fpga-region with base images, command "
        "programmers with program-card)",
    ),
    _Option(
        "fpga-region-base-images",
        v.parse_base_images,
        lambda env: "",
        "fpga-region: MANAGER=FIRMWARE,... the firmware (in /lib/firmware) that restores the child regions of the "
        "base region an FPGA manager programs; a manager named here can program that base region whole "
        "(--whole-cards)",
    ),
    _Option("cdi", v.parse_bool, lambda env: "false", "also return CDI device names (runtime supports CDI)"),
    _Option(
        "bitstream-dir",
        v.parse_path,
        lambda env: "/var/lib/fpga-agent/bitstreams",
        "bitstream catalog directory (bitstreams and their metadata records)",
    ),
    _Option(
        "bitstream-cache-bytes",
        v.parse_int(1 << 20, 1 << 50),
        lambda env: str(2 << 30),
        "byte budget of bitstreams pulled from the cluster's FpgaBitstream sources (least recently used "
        "evicted first, never one in use; local catalog entries do not count)",
    ),
    _Option(
        "bitstream-plain-http",
        v.parse_hosts,
        lambda env: "",
        "registries (host[:port], comma-separated) that FpgaBitstream artifacts are pulled from over plain HTTP "
        "instead of HTTPS, e.g. a registry on the node's own network",
    ),
    _Option(
        "bitstream-ca-file",
        v.parse_optional_path,
        lambda env: "",
        "CA certificates (PEM) to trust, besides the system's, for FpgaBitstream registries and HTTPS sources",
    ),
    _Option(
        "bitstream-allow-link-local",
        v.parse_bool,
        lambda env: "false",
        "pull FpgaBitstream sources at link-local addresses (169.254.0.0/16, fe80::/10: a cloud's metadata "
        "service, the node's own link), which are refused otherwise",
    ),
    _Option(
        "namespace",
        v.parse_namespace,
        lambda env: env.get("POD_NAMESPACE") or "fpga-slot",
        "the agent's own namespace (the downward API's POD_NAMESPACE): pull Secrets of FpgaBitstreams are read there",
    ),
    _Option(
        "pod-name",
        v.parse_pod_field(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", "a pod name"),
        lambda env: env.get("POD_NAME") or "",
        "the agent's own pod (the downward API's POD_NAME): on a clean stop its DaemonSet says whether another "
        "agent follows on the node; empty: not in a pod",
    ),
    _Option(
        "pod-uid",
        v.parse_pod_field(r"[0-9a-f][-0-9a-f]{0,63}", "a pod UID"),
        lambda env: env.get("POD_UID") or "",
        "the agent pod's UID (the downward API's POD_UID): DRA mode names its sockets after it, so that an "
        "updated agent can serve beside the old one",
    ),
    _Option(
        "program-timeout-s",
        v.parse_int(1, 120),
        lambda env: "25",
        "deadline for programming at PreStartContainer; the kubelet allows 30 s",
    ),
    _Option(
        "kubeconfig",
        v.parse_optional_path,
        lambda env: "",
        "kubeconfig file for the API server, found as kubectl finds it",
    ),
    _Option(
        "static-slots",
        v.parse_static,
        lambda env: "[]",
        "slots of the static backend: list of {card, region, devices, numa, platform, control-node} (YAML/JSON)",
    ),
    _Option(
        "command-programmers",
        v.parse_commands,
        lambda env: "[]",
        "vendor tools that program static slots: list of {slots or platform, program, read-back, "
        "read-back-pattern, reset, failure-pattern, environment} (YAML/JSON; see docs/command-programmer.md)",
    ),
    _Option(
        "health-listen",
        v.parse_listen,
        lambda env: "127.0.0.1:8095",
        "HTTP address of /healthz, /readyz (the kubelet's probes) and /metrics; empty: no endpoint",
    ),
    _Option(
        "listen",
        v.parse_required_listen,
        lambda env: "127.0.0.1:8888",
        "extender: HTTP address for kube-scheduler (/filter, /prioritize, /healthz)",
    ),
    _Option(
        "probe-listen",
        v.parse_listen,
        lambda env: "",
        "extender: plain-HTTP address of /healthz and /metrics alone, for the kubelet's probes and Prometheus "
        "beside an HTTPS --listen; empty: none",
    ),
    _Option(
        "webhook-listen",
        v.parse_listen,
        lambda env: "",
        "extender: HTTPS address of /validate, the admission webhook that refuses claims and pods naming a "
        "bitstream no node has and no FpgaBitstream declares (no client certificate asked; needs "
        "--tls-cert-file); empty: none",
    ),
    _Option(
        "tls-cert-file",
        v.parse_optional_path,
        lambda env: "",
        "extender: serve HTTPS with this certificate (PEM; with --tls-key-file); empty: plain HTTP",
    ),
    _Option("tls-key-file", v.parse_optional_path, lambda env: "", "extender: the private key of --tls-cert-file"),
    _Option(
        "tls-client-ca-file",
        v.parse_optional_path,
        lambda env: "",
        "extender: require client certificates signed by this CA (kube-scheduler's tlsConfig certFile)",
    ),
    _Option(
        "score-weights",
        parse_score_weights,
        lambda env: str(ScoreWeights()),
        "extender: prioritize values 0..10 of a slot that holds the bitstream, an empty slot, a slot to evict, "
        "and the neutral score (pod without bitstream, node without state)",
    ),
    _Option(
        "answer-limit",
        v.parse_int(0, 1_000_000),
        lambda env: str(ANSWER_LIMIT),
        "extender: most nodes a prioritize answer lists, the best by score, then by packing (MostAllocated); "
        "the others score the call's lowest score; 0 lists every node above it",
    ),
    _Option(
        "event-loop",
        v.Choice(EVENT_LOOPS),
        lambda env: "uvloop",
        "extender: the event loop that serves the calls: uvloop (libuv, a little less CPU per call) or asyncio "
        "(Python's own)",
    ),
)
_BY_KEY = {opt.field: opt for opt in OPTIONS}


def load_config(flags: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Resolve every option: flag > environment > config file > default; validate each."""
    env = os.environ if env is None else env
    file_values, file_name = read_file(flags.get("config") or env.get(f"{ENV_PREFIX}CONFIG"), _BY_KEY.keys())
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        if flags.get(opt.field) is not None:
            raw, source = str(flags[opt.field]), f"flag --{opt.flag}"
        elif opt.env in env:
            raw, source = env[opt.env], f"environment {opt.env}"
        elif opt.field in file_values:
            raw, source = file_values[opt.field], f"{file_name} key {opt.flag!r}"
        else:
            raw, source = opt.default(env), "default"
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
