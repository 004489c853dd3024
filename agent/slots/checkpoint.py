"""The agent's checkpoint (JSON, see :func:`encode`): what each slot holds and who holds it, across restarts.

Written atomically; a corrupt, mis-checksummed or unknown-version file is set aside and the state rebuilt.
After a reboot (another ``boot_id``) a recorded content is kept only where the slot reports that accelerator."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.files.atomic import read_no_follow, write_atomically
from agent.slots.model import Holder, SlotId
from agent.slots.registry import Content, SlotRegistry, SlotState

logger = logging.getLogger(__name__)

VERSION = 1
FILE_NAME = "checkpoint.json"
#: The checkpoint names pods: readable by the agent (root) only.
FILE_MODE = 0o600
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


class CheckpointError(ValueError):
    """The checkpoint cannot be trusted (corrupt, wrong checksum, unknown version)."""


@dataclass(frozen=True, slots=True)
class SlotRecord:
    """One slot as the checkpoint remembers it."""

    content: Content | None
    holder: Holder | None
    last_used: float | None
    #: A programming under way when the file was written.
    programming: Content | None = None
    #: Written since the node last started: a recorded content the slot cannot report may be trusted.
    same_boot: bool = True


@functools.cache
def current_boot_id() -> str | None:
    """The kernel's identity of this boot (None where it cannot be read)."""
    try:
        return BOOT_ID_PATH.read_text().strip() or None
    except OSError:
        return None


def _canonical(slots: dict[str, Any]) -> bytes:
    return json.dumps(slots, sort_keys=True, separators=(",", ":")).encode()


def encode(states: list[SlotState]) -> bytes:
    slots: dict[str, Any] = {}
    for state in states:
        entry: dict[str, Any] = {"last_used": state.last_used}
        if state.content is not None:
            entry |= asdict(state.content)
        if state.programming is not None:
            entry["programming"] = asdict(state.programming)
        if state.holder is not None:
            entry["holder"] = asdict(state.holder)
        slots[state.slot.id] = entry
    checksum = hashlib.sha256(_canonical(slots)).hexdigest()
    document = {"version": VERSION, "checksum": checksum, "boot_id": current_boot_id(), "slots": slots}
    return json.dumps(document, indent=1).encode()


def _optional_str(entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise CheckpointError(f"{key} is not a string")
    return value


def _optional_float(entry: dict[str, Any], key: str) -> float | None:
    value = entry.get(key)
    if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
        raise CheckpointError(f"{key} is not a number")
    return None if value is None else float(value)


def _object(entry: dict[str, Any], key: str, slot_id: str) -> dict[str, Any] | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, dict):
        raise CheckpointError(f"slot {slot_id!r} {key} is not an object")
    return value


def _content(entry: dict[str, Any]) -> Content | None:
    bitstream, accelerator = _optional_str(entry, "bitstream"), _optional_str(entry, "accelerator_id")
    return Content(bitstream, accelerator) if bitstream and accelerator else None


def decode(data: bytes) -> dict[SlotId, SlotRecord]:
    """Parse and verify a checkpoint; raises CheckpointError saying what is wrong."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CheckpointError("not a JSON object")
    if document.get("version") != VERSION:
        raise CheckpointError(f"unknown version {document.get('version')!r} (this agent reads {VERSION})")
    slots = document.get("slots")
    if not isinstance(slots, dict):
        raise CheckpointError("'slots' is not an object")
    if document.get("checksum") != hashlib.sha256(_canonical(slots)).hexdigest():
        raise CheckpointError("checksum mismatch")
    booted = current_boot_id()
    same_boot = booted is None or document.get("boot_id") == booted
    records: dict[SlotId, SlotRecord] = {}
    for slot_id, entry in slots.items():
        if not isinstance(entry, dict):
            raise CheckpointError(f"slot {slot_id!r} is not an object")
        content = _content(entry)
        holder = None
        if (raw_holder := _object(entry, "holder", slot_id)) is not None:
            holder = Holder(
                allocated_at=_optional_float(raw_holder, "allocated_at") or 0.0,
                namespace=_optional_str(raw_holder, "namespace"),
                pod=_optional_str(raw_holder, "pod"),
                container=_optional_str(raw_holder, "container"),
            )
        programming = None
        if (raw_programming := _object(entry, "programming", slot_id)) is not None:
            programming = _content(raw_programming)
            if programming is None:
                raise CheckpointError(f"slot {slot_id!r} programming names no bitstream and accelerator")
        last_used = _optional_float(entry, "last_used")
        records[SlotId(slot_id)] = SlotRecord(content, holder, last_used, programming, same_boot)
    return records


def load(path: Path) -> dict[SlotId, SlotRecord]:
    """Read the checkpoint; a missing file is empty, a bad one (a symbolic link too) is set aside (never raises)."""
    try:
        data = read_no_follow(path)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            logger.error("checkpoint %s unreadable (%s): rebuilding state from hardware and kubelet", path, exc)
            return {}
        problem = "it is a symbolic link, which is never followed"
    else:
        try:
            return decode(data)
        except CheckpointError as exc:
            problem = str(exc)
    aside = path.with_name(f"{path.name}.bad-{int(time.time())}")
    with contextlib.suppress(OSError):
        os.replace(path, aside)
    logger.error(
        "checkpoint %s rejected (%s): set aside as %s, rebuilding state from hardware and kubelet",
        path,
        problem,
        aside.name,
    )
    return {}


def restore_into(registry: SlotRegistry, records: dict[SlotId, SlotRecord]) -> None:
    """Apply checkpoint records to the registry (what the hardware reports wins)."""
    rebooted = [slot_id for slot_id, record in records.items() if not record.same_boot and record.content is not None]
    if rebooted:
        logger.warning(
            "the checkpoint was written before the node restarted: the recorded contents of %d slot(s) are kept "
            "only where the slot reports the same accelerator, the others are programmed again before use",
            len(rebooted),
        )
    for slot_id, record in records.items():
        restored = registry.restore(
            slot_id,
            record.content,
            record.holder,
            record.last_used,
            record.programming,
            confirmed_only=not record.same_boot,
        )
        if not restored:
            assert record.programming is not None
            logger.warning(
                "slot %s: programming with %s was under way when the agent stopped and the slot does not "
                "report it: content unknown, programmed again before it is used",
                slot_id,
                record.programming.bitstream,
            )


class CheckpointFile:
    """The checkpoint file of one registry: writes from any thread; an older snapshot never replaces a newer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._written = -1
        #: The bytes last written; None: write the next state even if it did not change.
        self.last: bytes | None = None

    def write(self, states: list[SlotState], version: int) -> None:
        """Write ``states`` (the registry as of ``version``) unless a newer version or the same bytes are written."""
        data = encode(states)
        with self._lock:
            if version >= self._written and data != self.last:
                write_atomically(self.path, data, FILE_MODE)
                self._written, self.last = version, data

    async def write_now(self, registry: SlotRegistry) -> None:
        """Write the registry as it is now, before going on (a programming must be on disk before it starts)."""
        await asyncio.to_thread(self.write, registry.snapshot(), registry.version)


#: Least time between two checkpoint writes; changes in between are coalesced.
WRITE_INTERVAL_S = 0.2


async def keep_checkpoint(
    file: CheckpointFile, registry: SlotRegistry, owned: Callable[[], bool] = lambda: True
) -> None:
    """Write the checkpoint (in a worker thread, at most every WRITE_INTERVAL_S) whenever it changes, and once
    more on cancellation; nothing while ``owned()`` is False (another agent took the node over)."""
    path = file.path
    in_thread: asyncio.Future[None] | None = None
    try:
        while True:
            version = registry.version
            try:
                if not owned():
                    file.last = None  # once it is ours again, the state is written even if unchanged
                else:  # snapshot on the loop; encode and write in the thread
                    in_thread = asyncio.ensure_future(asyncio.to_thread(file.write, registry.snapshot(), version))
                    await asyncio.shield(in_thread)
            except OSError as exc:
                logger.error("checkpoint %s could not be written: %s", path, exc)
            await asyncio.sleep(WRITE_INTERVAL_S)
            await registry.wait_for_change(version)
    finally:
        if in_thread is not None:
            with contextlib.suppress(OSError):
                await in_thread
        if not owned():
            logger.info("checkpoint %s left to the agent that took over", path)
        else:
            try:
                file.write(registry.snapshot(), registry.version)
            except OSError as exc:
                logger.error("final checkpoint %s could not be written: %s", path, exc)
