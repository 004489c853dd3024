"""Faults injected into a running simulated node through ``<dev_dir>/faults/<card>-<region>.<suffix>`` files:
``.fail-next`` (consumed) fails the next reconfiguration, ``.unhealthy`` makes the slot unhealthy while present.
See docs/dra.md ("Trying it on simulated slots")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from agent.simfpga.fabric import SimFabric

logger = logging.getLogger(__name__)

POLL_S = 1.0
FAULTS_DIR = "faults"
#: Bytes of a fault file read as its reason.
MAX_REASON = 256


def _reason(path: Path, default: str) -> str:
    try:
        text = path.read_bytes()[:MAX_REASON].decode("utf-8", "replace").strip()
    except OSError:
        return default
    return " ".join(text.split()) or default


def read_fault_files(directory: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(slot -> reason) of the ``.fail-next`` files (consumed) and of the ``.unhealthy`` files (blocking)."""
    fail: dict[str, str] = {}
    sick: dict[str, str] = {}
    try:
        paths = sorted(directory.iterdir())
    except OSError:
        return fail, sick
    for path in paths:
        if path.suffix == ".fail-next" and path.is_file():
            fail[path.stem] = _reason(path, "injected failure (fault file)")
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        elif path.suffix == ".unhealthy" and path.is_file():
            sick[path.stem] = _reason(path, "injected fault (fault file)")
    return fail, sick


def apply_faults(
    fabric: SimFabric, fail: dict[str, str], sick: dict[str, str], unhealthy: dict[str, str]
) -> dict[str, str]:
    """On the loop: arm the failures, set health from ``sick``; ``unhealthy`` and the result: slot -> reason
    of what the files made unhealthy (last time, now)."""
    now: dict[str, str] = {}
    for info in fabric.slots():
        slot = f"{info.card}-{info.region}"
        if slot in fail:
            fabric.fail_next_program(info.card, info.region, fail[slot])
            logger.warning("slot %s: its next programming fails (%s)", slot, fail[slot])
        if slot in sick:
            now[slot] = sick[slot]
            if unhealthy.get(slot) != sick[slot]:
                fabric.set_health(info.card, info.region, False, sick[slot])
        elif slot in unhealthy:
            fabric.set_health(info.card, info.region, True)
    return now


async def follow_fault_files(fabric: SimFabric, poll_s: float = POLL_S) -> None:
    """Apply the fault files every ``poll_s`` until cancelled."""
    unhealthy: dict[str, str] = {}
    directory = fabric.dev_dir / FAULTS_DIR
    while True:
        fail, sick = await asyncio.to_thread(read_fault_files, directory)
        unhealthy = apply_faults(fabric, fail, sick, unhealthy)
        await asyncio.sleep(poll_s)
