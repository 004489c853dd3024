"""The real kube-scheduler's throughput with and without our extender, at 5000 nodes.

Runs on the bench control plane of the bundled Kubernetes (``../shared/k8s``,
``bench-cp.sh``: an API server with 5000 kubelet-less nodes, each with 4
``example.com/fpga-slot`` and its slot state published as an FpgaNodeState) and its ``sched-bench.sh``
(backlog mode: the pods are created first, then a kube-scheduler is started with the
given configuration; pods/s from the first to the last bind). The pods request one
slot and carry bitstream annotations.

Four configurations, all the shipped ``daemonset/scheduler-config.yaml`` profile
(MostAllocated packing for the slots) with client QPS/burst lifted to 5000 (the
default 50 requests/s would cap every configuration at ~50 pods/s) and leader
election off:

* ``plain``: no extender;
* ``do-nothing extender``: ``bench/noop_extender.py``, which answers ``[]`` without
  parsing: the cost of the protocol itself (the scheduler's marshalling, one round trip);
* ``fpga-agent extender``: ours, as shipped (prioritize, names only, on uvloop's event
  loop), fed by a watch of the bench API server's FpgaNodeStates;
* ``do-nothing extender on uvloop``: the do-nothing extender on the event loop ours
  serves on: the floor with the cheaper loop, which ours is compared to as well;
* with ``--pair``, only the do-nothing extender and ours (``--against``'s too), back to
  back in each round: twice the rounds in the same time, for the per-round ratio by which
  the >= 95 % target is judged;
* with ``--probe KNOB=N`` (repeatable), also the do-nothing extender with one knob set: it
  answers the first N names asked (``answer=N``, the size of ours' answer), the same with
  score 0 (``unscored=N``: listed, steering nothing), answers N entries made once that name no
  node (``fixed=N``: listed, at no work per call) or spins N us before answering
  (``spin-us=N``): what the scheduler pays for each, without our code;
* with ``--variant FLAGS`` (repeatable), also ours with extra flags (``'--answer-limit 4'``);
* with ``--against DIR``, also the extender of another checkout (``DIR/agent``, run with
  this checkout's Python and packages) in the same rounds: the way to tell a change to the
  extender from the machine's drift, which moves every figure here by more than most changes;
* with ``--dra``, also the DRA claim forms of ``bench/dra_shapes.py`` (``--shapes``): the
  same nodes as DRA mode publishes them (a ResourceSlice each, made by the agent's slice
  code), a ResourceClaim per pod, no extender (``bench/dra_sched.py``). ``plainest`` is
  upstream's benchmark shape (one ``exactly`` device of a class matching only the driver,
  the default profile); ``shipped`` is daemonset/examples/dra/cached-first.yaml with the
  shipped class and DRA profile (daemonset/dra-mode/); the others are variants. A form
  may carry ``@N``: the DRA profile with ``percentageOfNodesToScore: N``.

The runs are interleaved (each round runs every configuration, in a rotating order)
and the medians compared within this one run: the machine is shared and noisy. The
extender's CPU time per scheduled pod is read from /proc around each of its runs; so are,
per pod, the CPU of the scheduler with the pod maker and that of the bench API server and
etcd, and the pods' making time is taken from sched-bench.sh's report: how fast the machine
ran in that run (``bench/scheduler_rounds.py`` reads them back).

Needs root (the bench control plane). Usage:
    python bench/scheduler.py [--pods 2000] [--rounds 3] [--quick] [--pair] [--probe KNOB=N ...]
                              [--variant FLAGS ...] [--against DIR]
                              [--dra [--shapes plainest,shipped,...]] [--dra-only] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import dra_sched, dra_shapes  # noqa: E402
from bench.procs import exit_on_sigterm, run_group, terminate  # noqa: E402
from bench.table import Row, emit, median_within  # noqa: E402

K8S = Path(os.environ.get("FPGA_SLOT_K8S", ROOT.parent / "shared" / "k8s")).resolve()
RIG = Path(os.environ.get("K8S_HOME", "/var/tmp/fpga-slot-k8s"))
BENCH_KUBECONFIG = RIG / "pki" / "bench-admin.kubeconfig"
EXTENDER_PORT = 18888
NOOP_PORT = 18889
AGAINST_PORT = 18890
NOOP_UVLOOP_PORT = 18891
#: The do-nothing extender as a probe (``--probe``): the first on this port, the next on the ports after it.
PROBE_PORT = 18892
#: Ours with other flags (``--variant``): the first on this port, the next on the ports after it.
VARIANT_PORT = 18900
#: ``--probe`` knobs: the do-nothing extender's flags (bench/noop_extender.py).
PROBE_KNOBS = ("answer", "unscored", "fixed", "spin-us")
STARTUP_TIMEOUT_S = 180.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: Keys of the shipped extender entry (HTTPS with client certificates) that the bench's loopback HTTP does not use.
TLS_KEYS = ("enableHTTPS", "tlsConfig")
PLAIN = "plain"
NOOP = "do-nothing extender"
OURS = "fpga-agent extender"
NOOP_UVLOOP = "do-nothing extender on uvloop"
#: The bench control plane's processes, by their pid files' names.
CONTROL_PLANE = ("bench-apiserver", "bench-etcd")


def scheduler_config(extender_url: str | None) -> str:
    """The shipped profile as a sched-bench.sh CONFIG: for the bench's pods, client limits lifted."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "daemonset" / "scheduler-config.yaml").read_text())
    config["leaderElection"] = {"leaderElect": False}
    config["clientConnection"] = {"kubeconfig": "@KUBECONFIG@", "qps": 5000, "burst": 5000}
    (profile,) = config["profiles"]
    profile["schedulerName"] = "default-scheduler"  # the bench's pods name no scheduler
    (extender,) = config.pop("extenders")
    if extender_url is not None:
        plain_http = {k: v for k, v in extender.items() if k not in TLS_KEYS}  # the bench's extenders: loopback HTTP
        config["extenders"] = [{**plain_http, "urlPrefix": extender_url}]
    return yaml.safe_dump(config, sort_keys=False)


def dra_scheduler_config(shape: dra_shapes.Shape | None = None, extender_url: str | None = None) -> str:
    """The shipped DRA configuration (or ``shape``'s) for the bench's pods, client limits lifted; its extender
    called at ``extender_url`` over loopback HTTP, or left out (no URL, or a shape without it)."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "daemonset" / "dra-mode" / "scheduler-config.yaml").read_text())
    config["leaderElection"] = {"leaderElect": False}
    config["clientConnection"] = {"kubeconfig": str(BENCH_KUBECONFIG), "qps": 5000, "burst": 5000}
    (profile,) = config["profiles"]
    profile["schedulerName"] = "default-scheduler"
    (extender,) = config.pop("extenders")
    if shape is not None:
        config["profiles"] = [dra_shapes.scheduler_profile(profile, shape)]
    if extender_url is not None and (shape is None or shape.calls_extender):
        plain_http = {k: v for k, v in extender.items() if k not in TLS_KEYS}
        config["extenders"] = [{**plain_http, "urlPrefix": extender_url}]
    return yaml.safe_dump(config, sort_keys=False)


def parse_shapes(text: str) -> list[dra_shapes.Shape]:
    """``--shapes``: names of ``dra_shapes.SHAPES``, each optionally ``@N`` (percentageOfNodesToScore N) and
    ``-noext`` (without the profile's extender)."""
    shapes = []
    for item in (part.strip() for part in text.split(",")):
        item, no_extender = item.removesuffix("-noext"), item.endswith("-noext")
        name, _, percentage = item.partition("@")
        if name not in dra_shapes.SHAPES:
            raise SystemExit(f"--shapes: {name!r} is not one of {', '.join(dra_shapes.SHAPES)}")
        shape = dra_shapes.SHAPES[name]
        if percentage:
            if not percentage.isdigit() or not 0 < int(percentage) <= 100:
                raise SystemExit(f"--shapes: {item!r}: the percentage must be 1..100")
            shape = dra_shapes.with_profile(shape, percentageOfNodesToScore=int(percentage))
        if no_extender:
            shape = dra_shapes.without_extender(shape)
        shapes.append(shape)
    return shapes


@dataclass
class Configuration:
    name: str
    config_file: Path
    shape: dra_shapes.Shape | None = None
    #: Another checkout whose extender this configuration runs (``--against``).
    checkout: Path | None = None
    #: The do-nothing extender's flags for a probe (``--probe``), e.g. ``["--answer", "16"]``.
    probe: list[str] | None = None
    #: Ours' extra flags for a variant (``--variant``), e.g. ``["--answer-limit", "4"]``.
    variant: list[str] | None = None
    process: subprocess.Popen[bytes] | None = None
    pods_per_s: list[float] = field(default_factory=list)
    cpu_ms_per_pod: list[float] = field(default_factory=list)
    #: The CPU of sched-bench.sh and what it waited for (the scheduler, the pod maker), per pod: the same work
    #: in every configuration but the scheduler's.
    scheduler_cpu_ms_per_pod: list[float] = field(default_factory=list)
    #: The bench API server's and etcd's CPU over the run, per pod.
    control_plane_cpu_ms_per_pod: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.pods_per_s)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def children_cpu_seconds() -> float:
    """The CPU of every child process waited for so far, theirs included (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def control_plane_cpu_seconds() -> float:
    """The bench API server's and etcd's CPU so far (their pid files, written by the rig's bench-cp.sh)."""
    return sum(cpu_seconds(int((RIG / "data" / "run" / f"{name}.pid").read_text())) for name in CONTROL_PLANE)


def wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{url}: the process exited with {process.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.5)
    raise SystemExit(f"{url}: not healthy within {STARTUP_TIMEOUT_S:.0f} s")


@contextlib.contextmanager
def started(
    command: list[str], health_url: str, log: Path, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
    try:
        wait_healthy(health_url, process)
        yield process
    finally:
        terminate(process)


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def run_dra(config: Configuration, pods: int, api: dra_sched.Api, log: Path) -> None:
    assert config.shape is not None
    scheduler = [str(RIG / "bin" / "kube-scheduler"), f"--config={config.config_file}", "--secure-port=0", "--v=1"]
    before = cpu_seconds(config.process.pid) if config.process else 0.0
    rate = dra_sched.run(api, scheduler, pods, log, config.shape.claim, config.shape.node_selector())
    if config.process:  # the extender's CPU over the run (creating and deleting the claims and pods included)
        config.cpu_ms_per_pod.append((cpu_seconds(config.process.pid) - before) * 1000 / pods)
    config.pods_per_s.append(rate)
    print(f"  {config.name}: {rate:.1f} pods/s", file=sys.stderr)


def run_once(config: Configuration, pods: int) -> None:
    before = cpu_seconds(config.process.pid) if config.process else 0.0
    # the control plane runs before the first run (started by hand or by bench_control_plane)
    children, control_plane = children_cpu_seconds(), control_plane_cpu_seconds()
    rendered = f"--config={RIG / 'data' / 'bench' / config.config_file.name.removesuffix('.in')}"
    done = run_group(
        [str(K8S / "scripts" / "sched-bench.sh"), str(config.config_file), str(pods), "1", "--fpga", "--bitstream"],
        # the scheduler sched-bench.sh starts has a session of its own: found by its config
        on_abort=lambda: subprocess.run(["pkill", "-TERM", "-f", "--", rendered], check=False),
    )
    if done.returncode != 0:
        raise SystemExit(f"sched-bench.sh failed for {config.name}:\n{done.stdout}{done.stderr}")
    rate = float(done.stdout.strip().splitlines()[-1])
    config.pods_per_s.append(rate)
    config.scheduler_cpu_ms_per_pod.append((children_cpu_seconds() - children) * 1000 / pods)
    config.control_plane_cpu_ms_per_pod.append((control_plane_cpu_seconds() - control_plane) * 1000 / pods)
    if config.process:
        config.cpu_ms_per_pod.append((cpu_seconds(config.process.pid) - before) * 1000 / pods)
    print(f"  {config.name}: {rate:.1f} pods/s", file=sys.stderr)
    cpu = f"scheduler and pod maker {config.scheduler_cpu_ms_per_pod[-1]:.3f} ms"
    cpu += f", API server and etcd {config.control_plane_cpu_ms_per_pod[-1]:.3f} ms"
    if config.process:
        cpu += f", extender {config.cpu_ms_per_pod[-1]:.3f} ms"
    created = created_seconds(done.stderr)
    made = f"; the pods made in {created:.2f} s" if created is not None else ""
    print(f"    CPU per pod: {cpu}{made}", file=sys.stderr)


def created_seconds(report: str) -> float | None:
    """How long schedbench.py took to make the pods, before the scheduler started (its ``run N: {json}`` line
    on sched-bench.sh's stderr): a clock of the machine's speed that no extender takes part in."""
    for line in report.splitlines():
        head, _, text = line.partition(": ")
        if head.startswith("run ") and text.startswith("{"):
            with contextlib.suppress(ValueError, TypeError, KeyError):
                return float(json.loads(text)["create_s"])
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1000 pods, 3 rounds")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="also the extender of another checkout (e.g. a worktree before a change), in the same rounds",
    )
    parser.add_argument(
        "--pair",
        action="store_true",
        help="only the do-nothing extender and ours, back to back in each round: twice the rounds in the same time, "
        "for the per-round ratio the target is judged by",
    )
    parser.add_argument(
        "--probe",
        action="append",
        default=[],
        type=parse_probe,
        metavar="KNOB=N",
        help="also the do-nothing extender with one knob set (answer=N: it answers the first N names asked; "
        "unscored=N: the same, each with score 0; fixed=N: N entries made once, naming no node; "
        "spin-us=N: it spins N us before answering), in the same rounds; repeatable",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        type=shlex.split,
        metavar="FLAGS",
        help="also ours with these extra flags (e.g. '--answer-limit 4'), in the same rounds; repeatable",
    )
    parser.add_argument("--dra", action="store_true", help="also the DRA path: claims, slices, no extender")
    parser.add_argument(
        "--shapes",
        default="plainest,shipped",
        help=f"DRA claim forms with --dra, comma-separated, each NAME or NAME@PERCENT ({', '.join(dra_shapes.SHAPES)})",
    )
    parser.add_argument("--dra-only", action="store_true", help="only the DRA forms (implies --dra)")
    parser.add_argument("--json", action="store_true", help="machine-readable rows for bench/run")
    args = parser.parse_args()
    exit_on_sigterm()  # stopped with kill: the control plane and every process started are stopped too
    pods = 1000 if args.quick else args.pods
    args.dra = args.dra or args.dra_only
    args.shapes = parse_shapes(args.shapes) if args.dra else []
    if args.against is not None and not (args.against / "agent" / "cli" / "main.py").is_file():
        raise SystemExit(f"--against {args.against}: not a checkout of this project (no agent/cli/main.py)")
    extender_only = [
        flag
        for flag, given in (
            ("--pair", args.pair),
            ("--probe", args.probe),
            ("--variant", args.variant),
            ("--against", args.against is not None),
        )
        if given
    ]
    if extender_only and args.dra_only:
        raise SystemExit(f"{extender_only[0]} compares the extender path; it does not go with --dra-only")
    if os.geteuid() != 0 or not (K8S / "scripts" / "bench-cp.sh").exists():
        raise SystemExit(f"needs root and the bundled Kubernetes at {K8S} (FPGA_SLOT_K8S)")
    probe_ports = range(PROBE_PORT, PROBE_PORT + len(args.probe))
    variant_ports = range(VARIANT_PORT, VARIANT_PORT + len(args.variant))
    for port in (EXTENDER_PORT, NOOP_PORT, AGAINST_PORT, NOOP_UVLOOP_PORT, *probe_ports, *variant_ports):
        if not port_free(port):
            raise SystemExit(f"port {port} on 127.0.0.1 is taken")
    with bench_control_plane():
        configurations = run_rounds(args, pods)
    emit(summary_rows(configurations), as_json=args.json)
    return 0


@contextlib.contextmanager
def bench_control_plane() -> Iterator[None]:
    """The bench control plane for the length of the run; stopped afterwards unless it was already up.

    Its API server and etcd take most of a core while idle: left running, they skew every later
    figure on the machine. The fake nodes' slot state is published as FpgaNodeStates
    (``bench/publish_state.py``), what the extender reads.
    """
    script = str(K8S / "scripts" / "bench-cp.sh")
    status = subprocess.run([script, "status"], check=True, capture_output=True, text=True).stdout
    already_up = "bench-apiserver running" in status
    publish = f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'bench' / 'publish_state.py'))}"
    env = {**os.environ, "BENCH_STATE_CMD": publish}
    subprocess.run([script, "start"], check=True, stdout=subprocess.DEVNULL, env=env)
    if already_up:  # started earlier, perhaps without the objects: publish them (those there already stay)
        subprocess.run(publish, shell=True, check=True, env={**os.environ, "KUBECONFIG": str(BENCH_KUBECONFIG)})
    try:
        yield
    finally:
        if already_up:
            print("bench control plane left running: it was up before this run", file=sys.stderr)
        else:
            subprocess.run([script, "stop"], check=False, stdout=subprocess.DEVNULL)


def run_rounds(args: argparse.Namespace, pods: int) -> list[Configuration]:
    """Every configuration, interleaved round by round; returns them with their measurements."""
    with tempfile.TemporaryDirectory(prefix="fpga-slot-sched-") as tmp:
        work = Path(tmp)
        configurations = []
        if not args.dra_only:
            for name, url in (
                (PLAIN, None),
                (NOOP, f"http://127.0.0.1:{NOOP_PORT}"),
                (OURS, f"http://127.0.0.1:{EXTENDER_PORT}"),
                (NOOP_UVLOOP, f"http://127.0.0.1:{NOOP_UVLOOP_PORT}"),
            ):
                if args.pair and name not in (NOOP, OURS):
                    continue
                path = work / f"{name.replace(' ', '-')}.yaml.in"
                path.write_text(scheduler_config(url))
                configurations.append(Configuration(name, path))
            for index, flags in enumerate(args.probe):
                path = work / f"probe-{index}.yaml.in"
                path.write_text(scheduler_config(f"http://127.0.0.1:{PROBE_PORT + index}"))
                configurations.append(Configuration(f"{NOOP} {' '.join(flags)}", path, probe=flags))
            for index, flags in enumerate(args.variant):
                path = work / f"variant-{index}.yaml.in"
                path.write_text(scheduler_config(f"http://127.0.0.1:{VARIANT_PORT + index}"))
                configurations.append(Configuration(f"{OURS} {' '.join(flags)}", path, variant=flags))
            if args.against is not None:
                path = work / "against.yaml.in"
                path.write_text(scheduler_config(f"http://127.0.0.1:{AGAINST_PORT}"))
                configurations.append(Configuration(f"extender of {args.against}", path, checkout=args.against))
        api = dra_sched.Api(RIG / "pki")
        if args.shapes:
            classes: dict[str, dict[str, Any]] = {}
            for index, shape in enumerate(args.shapes):
                config = Configuration(f"DRA {shape.name}", work / f"dra-{index}.yaml", shape)
                config.config_file.write_text(dra_scheduler_config(shape, f"http://127.0.0.1:{EXTENDER_PORT}"))
                configurations.append(config)
                classes.update((c["metadata"]["name"], c) for c in shape.classes())
            nodes = dra_sched.publish(api, list(classes.values()))
            print(f"DRA: a ResourceSlice on each of {nodes} nodes; classes {', '.join(classes)}", file=sys.stderr)
        with contextlib.ExitStack() as stack:
            extender = [str(ROOT / ".venv" / "bin" / "fpga-agent"), *extender_arguments(EXTENDER_PORT)]
            if not args.dra_only:
                by_name = {config.name: config for config in configurations}
                noop = [sys.executable, str(ROOT / "bench" / "noop_extender.py")]

                def serve(config: Configuration, command: list[str], port: int, log: str) -> None:
                    health = f"http://127.0.0.1:{port}/healthz"
                    config.process = stack.enter_context(started(command, health, work / log))

                for name, port, loop in ((NOOP, NOOP_PORT, "asyncio"), (NOOP_UVLOOP, NOOP_UVLOOP_PORT, "uvloop")):
                    if name in by_name:
                        serve(by_name[name], [*noop, "--port", str(port), "--loop", loop], port, f"noop-{loop}.log")
                serve(by_name[OURS], extender, EXTENDER_PORT, "extender.log")
                probes = [config for config in configurations if config.probe is not None]
                for index, config in enumerate(probes):
                    port = PROBE_PORT + index
                    serve(config, [*noop, "--port", str(port), *(config.probe or [])], port, f"probe-{index}.log")
                variants = [config for config in configurations if config.variant is not None]
                for index, config in enumerate(variants):
                    port = VARIANT_PORT + index
                    command = [extender[0], *extender_arguments(port), *(config.variant or [])]
                    serve(config, command, port, f"variant-{index}.log")
                for config in configurations:
                    if config.checkout is not None:
                        config.process = stack.enter_context(started_against(config.checkout, work))
            elif any(shape.calls_extender for shape in args.shapes):
                health = f"http://127.0.0.1:{EXTENDER_PORT}/healthz"
                ours_process = stack.enter_context(started(extender, health, work / "extender.log"))
                for config in configurations:
                    if config.shape is not None and config.shape.calls_extender:
                        config.process = ours_process
            cards = False  # as dra_sched.publish left the slices
            for round_index in range(args.rounds):
                print(f"round {round_index + 1}/{args.rounds} ({pods} pods per run)", file=sys.stderr)
                shift = round_index % len(configurations)
                for config in configurations[shift:] + configurations[:shift]:
                    if config.shape is not None:
                        if config.shape.cards != cards:  # the nodes publish as this form needs, before the run
                            cards = config.shape.cards
                            dra_sched.publish_slices(api, cards, drop_counters=not cards)
                        run_dra(config, pods, api, work / "dra-scheduler.log")
                    else:
                        run_once(config, pods)
    return configurations


def parse_probe(text: str) -> list[str]:
    """``answer=16`` -> the do-nothing extender's flags ``["--answer", "16"]`` (``--probe``)."""
    knob, _, value = text.partition("=")
    if knob not in PROBE_KNOBS or not value.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KNOB=N with KNOB one of {', '.join(PROBE_KNOBS)}")
    return [f"--{knob}", value]


def extender_arguments(port: int) -> list[str]:
    """``fpga-agent``'s arguments for an extender on ``port``, fed by the bench API server's Nodes."""
    listen = f"127.0.0.1:{port}"
    return ["extender", "--kubeconfig", str(BENCH_KUBECONFIG), "--listen", listen, "--log-level", "warning"]


def against_command(checkout: Path, port: int) -> tuple[list[str], Path]:
    """The command running the extender of another checkout with this checkout's Python (and so its packages),
    and the directory to run it in: the checkout itself. ``python -m`` puts its working directory first on the
    module path, ahead of PYTHONPATH, so run from here it would run this checkout's extender instead."""
    python = [str(ROOT / ".venv" / "bin" / "python"), "-m", "agent.cli.main"]
    return [*python, *extender_arguments(port)], checkout.resolve()


def started_against(checkout: Path, work: Path) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """The extender of another checkout (``against_command``), until the block ends."""
    command, cwd = against_command(checkout, AGAINST_PORT)
    return started(command, f"http://127.0.0.1:{AGAINST_PORT}/healthz", work / "against.log", cwd=cwd)


def spread(rates: list[float]) -> str:
    """Median (runs, min-max as % of the median)."""
    median = statistics.median(rates)
    runs = " ".join(f"{rate:.0f}" for rate in rates)
    return f"{median:.1f} ({runs}; range {min(rates) / median:.0%}-{max(rates) / median:.0%})"


def summary_rows(configurations: list[Configuration]) -> list[Row]:
    rows: list[Row] = [
        (f"kube-scheduler 5000 nodes, {config.name}: pods/s median", spread(config.pods_per_s), "")
        for config in configurations
    ]
    extenders = {
        c.name: c
        for c in configurations
        if c.shape is None and c.checkout is None and c.probe is None and c.variant is None
    }
    others = [c for c in configurations if c.checkout is not None or c.variant is not None]
    probes = [c for c in configurations if c.probe is not None]
    if extenders:
        noop, ours = extenders[NOOP], extenders[OURS]
        plain, noop_uvloop = extenders.get(PLAIN), extenders.get(NOOP_UVLOOP)  # not run with --pair
        if plain is not None:
            rows.append(("fpga-agent extender / plain", f"{ours.median / plain.median:.1%}", ">= 90 %"))
        rows.append(("fpga-agent extender / do-nothing extender", f"{ours.median / noop.median:.1%}", ">= 95 %"))
        rows.append(("fpga-agent extender / do-nothing extender, per round", paired(ours, noop), ">= 95 %"))
        if noop_uvloop is not None:
            rows.append((f"fpga-agent extender / {noop_uvloop.name}", _ratio(ours, noop_uvloop), ">= 95 %"))
        if plain is not None:
            rows.append(("do-nothing extender / plain (the protocol's cost)", f"{noop.median / plain.median:.1%}", ""))
        if noop_uvloop is not None:
            rows.append((f"{noop_uvloop.name} / do-nothing extender", _ratio(noop_uvloop, noop), ""))
        for other in others:
            rows.append((f"fpga-agent extender / {other.name}", _ratio(ours, other), ""))
            rows.append((f"{other.name} / do-nothing extender, per round", paired(other, noop), ""))
        for probe in probes:
            rows.append((f"{probe.name} / do-nothing extender", _ratio(probe, noop), ""))
            rows.append((f"fpga-agent extender / {probe.name}", _ratio(ours, probe), ""))
        for config in (noop, noop_uvloop, ours, *others, *probes):
            if config is not None:
                cpu = statistics.median(config.cpu_ms_per_pod)
                rows.append((f"{config.name}: CPU per scheduled pod (median of runs)", f"{cpu:.2f} ms", ""))
        for config in configurations:
            if config.shape is None and config.scheduler_cpu_ms_per_pod:
                rows.append(
                    (
                        f"{config.name}: CPU per pod of the scheduler and pod maker; API server and etcd",
                        f"{statistics.median(config.scheduler_cpu_ms_per_pod):.2f} ms; "
                        f"{statistics.median(config.control_plane_cpu_ms_per_pod):.2f} ms",
                        "",
                    )
                )
    forms = [c for c in configurations if c.shape is not None]
    for config in forms:
        if config.cpu_ms_per_pod:
            cpu = statistics.median(config.cpu_ms_per_pod)
            rows.append((f"{config.name}: the extender's CPU per pod (median of runs)", f"{cpu:.2f} ms", ""))
    if forms:
        anchor = forms[0]
        for config in forms[1:]:
            rows.append((f"{config.name} / {anchor.name}", _ratio(config, anchor), ""))
    return rows


def paired(ours: Configuration, other: Configuration) -> str:
    """Each round's ratio (the runs of one round ran back to back), their median and, from 5 rounds on, a 90 %
    interval for that median (``table.median_interval``: it holds whatever the law of the round-to-round noise)."""
    ratios = [a / b for a, b in zip(ours.pods_per_s, other.pods_per_s, strict=True)]
    return f"{median_within(ratios)} (" + " ".join(f"{r:.0%}" for r in ratios) + ")"


def _ratio(config: Configuration, anchor: Configuration) -> str:
    return f"{config.median / anchor.median:.1%}; per round {paired(config, anchor)}"


if __name__ == "__main__":
    sys.exit(main())
