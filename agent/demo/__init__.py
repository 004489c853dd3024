"""The narrated demos behind ``fpga-agent demo`` and the stand-ins they run against (:mod:`agent.demo.kubelet`,
:mod:`agent.demo.kubeapi`), so that they run with no cluster, no root and no hardware."""

import time


def say(step: str, text: str = "") -> None:
    """Print a demo step heading, or (with ``text``) a line of narration under it."""
    print(f"\n== {step}" if not text else f"   {text}", flush=True)


def ms_since(start: float) -> str:
    return f"{(time.monotonic() - start) * 1000:.1f} ms"
