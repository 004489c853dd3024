"""Pod create -> Running in DRA mode on the bundled cluster, with and without binding conditions (#45).

For each round and each setting (FPGA_AGENT_BINDING_CONDITIONS false, true; the order alternates by round)
the agent rolls out with the setting, then three pods of the cache-aware claim run one after another:
a cache hit (its bitstream loaded in a free slot), a miss (a bitstream no slot holds: programmed), and a
failed programming (the first slot the allocator takes fails once, through the simulated cards' fault
file): with binding conditions the pod is placed again on another slot, without them the kubelet retries
the prepare. Each time is from the pod's create call to the watch seeing it Running.

Run under the e2e lock, after scripts/e2e has built and imported the image (KUBECONFIG from the
cluster's env.sh)::

    flock /var/tmp/fpga-slot-k8s/.fpga-slot-e2e.lock .venv/bin/python bench/dra_binding.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import watch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.table import pct  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402
from tests.e2e.deployment import NAMESPACE, SCHEDULER, STATE_DIR, deploy, kubectl  # noqa: E402
from tests.e2e.test_dra_agent import apply_template, claim_pod  # noqa: E402
from tests.e2e.test_dra_binding import raw_slice, set_binding_conditions  # noqa: E402

#: Three bitstreams over the sim overlay's slots: a pod asking for the one not loaded is a miss.
BITSTREAMS = ("bench-b0", "bench-b1", "bench-b2")
RUNNING_TIMEOUT_S = 300.0


def add_bitstreams(deployment: Any) -> None:
    for index, name in enumerate(BITSTREAMS):
        command = (
            f"head -c 65536 /dev/urandom > /tmp/{name}.bin && fpga-agent catalog add /tmp/{name}.bin --name {name} "
            f"--platform sim-pr-v1 --accelerator-id {0xBE0C0000 + index:08x}{'0' * 24} --replace && rm /tmp/{name}.bin"
        )
        kubectl("exec", "-n", NAMESPACE, deployment.suite.agent_pod, "-c", "agent", "--", "sh", "-c", command)


def time_to_running(deployment: Any, name: str, bitstream: str) -> float:
    suite = deployment.suite
    stream = watch.Watch()
    start = time.monotonic()
    claim_pod(suite, name, bitstream)
    try:
        for event in stream.stream(
            suite.cluster.core.list_namespaced_pod,
            suite.namespace,
            field_selector=f"metadata.name={name}",
            timeout_seconds=int(RUNNING_TIMEOUT_S),
        ):
            if event["object"].status.phase == "Running":
                return time.monotonic() - start
    finally:
        stream.stop()
    raise AssertionError(f"pod {name} not Running within {RUNNING_TIMEOUT_S:.0f} s")


def loaded(deployment: Any) -> dict[str, str]:
    """Device -> bitstream of the node's untainted devices, in slice order."""
    devices = raw_slice(deployment.suite.node)["spec"]["devices"]
    return {d["name"]: d["attributes"]["bitstream"]["string"] for d in devices if not d.get("taints")}


def arm_failure(deployment: Any, bitstream: str, binding: bool) -> None:
    """The slot the allocator takes for ``bitstream`` fails its next programming: the first untainted slot in
    slice order not holding it (without binding conditions every slot is armed, so the one taken fails even if
    the slice lags; the others' faults go with the agent restarted for the next setting)."""
    free = [name for name, held in loaded(deployment).items() if held != bitstream]
    for slot in free if not binding else free[:1]:
        command = f"mkdir -p {STATE_DIR}/sim-dev/faults && echo bench > {STATE_DIR}/sim-dev/faults/{slot}.fail-next"
        kubectl("exec", "-n", NAMESPACE, deployment.suite.agent_pod, "-c", "agent", "--", "sh", "-c", command)
    time.sleep(2.0)  # the agent looks at the fault files every second


def one_setting(
    deployment: Any, binding: bool, round_no: int, times: dict[tuple[bool, str], list[float]], recent: list[str]
) -> None:
    """``recent``: the bitstreams by last use (the last one loaded; with two slots the first one is not)."""
    suite = deployment.suite
    # A new agent each time: none keeps a slot tainted by the last setting's failed programming.
    kubectl("rollout", "restart", "-n", NAMESPACE, "daemonset/fpga-slot-agent")
    set_binding_conditions(deployment, binding)
    tag = f"{'on' if binding else 'off'}-{round_no}"
    for kind in ("hit", "miss", "failed"):
        bitstream = recent[-1] if kind == "hit" else recent[0]
        if kind == "failed":
            arm_failure(deployment, bitstream, binding)
        name = f"{kind}-{tag}"
        times[(binding, kind)].append(time_to_running(deployment, name, bitstream))
        print(f"{name}: {times[(binding, kind)][-1]:.1f} s", file=sys.stderr, flush=True)
        suite.delete_pod(name)
        recent.remove(bitstream)
        recent.append(bitstream)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--image", default="fpga-slot:e2e")
    parser.add_argument("--node", default="")
    args = parser.parse_args()
    times: dict[tuple[bool, str], list[float]] = {(b, k): [] for b in (False, True) for k in ("hit", "miss", "failed")}
    k8s = Path(os.environ.get("FPGA_SLOT_K8S", REPO.parent / "shared" / "k8s"))
    components = (REPO / "daemonset" / "dra-mode", REPO / "overlays" / "sim-dra" / "loopback-extender")
    with (
        Cluster.connect(Path(os.environ["KUBECONFIG"])) as cluster,
        deploy(
            cluster,
            image=args.image,
            node=args.node,
            overlay=Path("overlays/sim-hostnet"),
            kubelet_restart=str(k8s / "scripts" / "restart-kubelet.sh"),
            components=components,
        ) as deployment,
    ):
        deployment.wait_available(SCHEDULER)
        add_bitstreams(deployment)
        # Not measured here: the bitstream webhook (it refuses the templates until the extender reads the catalog).
        kubectl("delete", "validatingwebhookconfiguration", "fpga-slot-bitstreams", "--ignore-not-found")
        for bitstream in BITSTREAMS:
            # kubectl, as users apply them: it sends compact JSON (see docs/dra.md on opaque parameters sent with
            # spaces, whose claims' status the API server refuses to change)
            assert apply_template(deployment.suite, bitstream).returncode == 0
        recent = list(BITSTREAMS)
        for warm in BITSTREAMS[1:]:  # two slots: they hold the last two
            time_to_running(deployment, f"warm-{warm}", warm)
            deployment.suite.delete_pod(f"warm-{warm}")
        for round_no in range(args.rounds):
            order = (False, True) if round_no % 2 == 0 else (True, False)
            for binding in order:
                one_setting(deployment, binding, round_no, times, recent)
            print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'binding conditions':<20}{'pod':<8}{'p50 s':>8}{'p95 s':>8}{'min s':>8}{'max s':>8}{'rounds':>8}")
    for (binding, kind), samples in times.items():
        print(
            f"{'on' if binding else 'off':<20}{kind:<8}{statistics.median(samples):>8.1f}{pct(samples, 0.95):>8.1f}"
            f"{min(samples):>8.1f}{max(samples):>8.1f}{len(samples):>8}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
