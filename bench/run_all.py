"""Run every benchmark as its own process and print their rows as one table (see bench/run)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.table import JSON_PREFIX, Row, format_rows  # noqa: E402

FULL = {
    "device_plugin.py": [],
    "udev_latency.py": ["--events", "1000"],
    "reconfigure.py": ["--pods", "400"],
    "extender.py": [],
    "extender_handler.py": [],
    "webhook.py": [],
    "extender_replay.py": [],
    "soak.py": [],
    "chaos.py": [],
    "scheduler.py": [],
    "pull.py": [],
    "early_pull.py": [],
}
QUICK = {
    "device_plugin.py": ["--calls", "500", "--restarts", "5"],
    "udev_latency.py": ["--events", "200"],
    "reconfigure.py": ["--pods", "100"],
    "extender.py": ["--quick"],
    "extender_handler.py": ["--calls", "500"],
    "webhook.py": ["--calls", "300", "--rounds", "2"],
    "extender_replay.py": ["--calls", "500", "--rounds", "1"],
    "soak.py": ["--quick"],
    "chaos.py": ["--kills", "5"],
    "scheduler.py": ["--quick"],
    "pull.py": ["--mb", "16", "--runs", "3"],
    "early_pull.py": ["--mb", "4", "--runs", "2"],
}
#: The real kube-scheduler benchmark needs root and the bundled Kubernetes.
K8S = Path(os.environ.get("FPGA_SLOT_K8S", ROOT.parent / "shared" / "k8s"))


def rows_of(script: str, args: list[str]) -> list[Row]:
    env = dict(os.environ, GRPC_VERBOSITY="ERROR")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(JSON_PREFIX):
            return [tuple(row) for row in json.loads(line[len(JSON_PREFIX) :])]  # type: ignore[misc]
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return [(f"{script} failed (exit {done.returncode})", " / ".join(tail)[:100], "-")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples, for a smoke run")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    started = time.monotonic()
    rows: list[Row] = []
    for script, script_args in plan.items():
        if script == "scheduler.py" and (os.geteuid() != 0 or not (K8S / "scripts" / "bench-cp.sh").exists()):
            rows.append(("kube-scheduler benchmark", f"not run: needs root and the bundled Kubernetes at {K8S}", "-"))
            continue
        rows += rows_of(script, script_args)
    print(
        f"fpga-slot benchmarks, {time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )
    print(format_rows(rows))
    print()
    sim = ["--pods", "5000"] if args.quick else ["--grid"]
    subprocess.run([sys.executable, str(ROOT / "bench" / "cluster_sim.py"), *sim], check=False)
    print(f"\nall benchmarks in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
