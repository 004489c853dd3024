"""Simulated FPGA cards with partially reconfigurable slots, behaving as the real backends' hardware.

Each slot has a device file under ``dev_dir``; contents survive restarts (``dev_dir/fabric.json``);
faults can be injected; every change is reported to subscribers as udev reports events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from agent.files.atomic import read_no_follow, write_atomically

logger = logging.getLogger(__name__)

PLATFORM = "sim-pr-v1"
STATE_FILE = "fabric.json"


class SimEvent(Enum):
    """What happened to a slot (mirrors udev's add/change/remove actions)."""

    ADD = "add"
    CHANGE = "change"
    REMOVE = "remove"


@dataclass(frozen=True, slots=True)
class SimSlotInfo:
    """What the simulated hardware reports about one slot."""

    card: str
    region: str
    numa: int
    device_path: str
    platform: str
    loaded: str | None
    healthy: bool
    reason: str
    #: ``loaded`` is the image of the whole card
    whole_card: bool = False


@dataclass(slots=True)
class _Slot:
    loaded: str | None = None
    healthy: bool = True
    reason: str = ""
    fail_next: str | None = None
    hang_next: bool = False


@dataclass(slots=True)
class _Card:
    name: str
    numa: int
    slots: dict[str, _Slot] = field(default_factory=dict)
    plugged: bool = True
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: the accelerator of a whole-card image, None while the base layout (its slots) is loaded
    image: str | None = None


Listener = Callable[[SimEvent, SimSlotInfo], None]


class SimFabric:
    """``cards`` x ``slots_per_card`` simulated slots whose device files live in ``dev_dir``."""

    def __init__(
        self, dev_dir: Path, cards: int, slots_per_card: int, program_s: float, *, device_nodes: bool = False
    ) -> None:
        if cards < 0 or slots_per_card < 1:
            raise ValueError(f"need cards >= 0 and slots_per_card >= 1, got {cards} x {slots_per_card}")
        self.dev_dir = dev_dir
        self.program_s = program_s
        self.device_nodes = device_nodes
        self._listeners: list[Listener] = []
        self._cards: dict[str, _Card] = {}
        for c in range(cards):
            card = _Card(name=f"simcard{c}", numa=c % 2)
            card.slots = {f"slot{s}": _Slot() for s in range(slots_per_card)}
            self._cards[card.name] = card
        self._restore()
        for card in self._cards.values():
            self._create_device_files(card)

    # ----------------------------------------------------------------- reading
    def slots(self) -> list[SimSlotInfo]:
        """Every slot of every plugged card."""
        return [self._info(card, region) for card in self._cards.values() if card.plugged for region in card.slots]

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` on every change; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # ----------------------------------------------------------- reconfigure
    async def program(self, card_name: str, region: str, accelerator_id: str) -> None:
        """Reconfigure one slot (one per card at a time, ``program_s`` each); OSError when the card is gone or
        an injected failure fires, after which the content is unknown."""
        async with self._plugged(card_name, region) as card:
            if card.image is not None:  # the base layout comes back first, every slot empty
                card.image = None
                self._save()
                for other in card.slots:
                    self._notify(SimEvent.CHANGE, card, other)
            slot = card.slots[region]
            await self._reconfigure(card, [region], lambda: setattr(slot, "loaded", accelerator_id))

    async def program_card(self, card_name: str, accelerator_id: str) -> None:
        """Load one image into the whole card, ``program_s``; errors as :meth:`program`."""
        async with self._plugged(card_name) as card:
            card.image = None
            await self._reconfigure(card, list(card.slots), lambda: setattr(card, "image", accelerator_id))

    @contextlib.asynccontextmanager
    async def _plugged(self, card_name: str, region: str | None = None) -> AsyncIterator[_Card]:
        """The card (that has ``region``) under its lock; FileNotFoundError without one, ENODEV while unplugged."""
        card = self._cards.get(card_name)
        if card is None or (region is not None and region not in card.slots):
            raise FileNotFoundError(
                f"no simulated card {card_name}" if region is None else f"no simulated slot {card_name}/{region}"
            )
        async with card.lock:
            if not card.plugged:
                raise OSError(19, f"simulated card {card_name} is not present")  # ENODEV
            yield card

    async def _reconfigure(self, card: _Card, regions: list[str], finish: Callable[[], None]) -> None:
        """Reconfigure ``regions`` (content unknown meanwhile) and call ``finish``, unless an injected hang or
        failure fires. The caller holds the card's lock."""
        slots = [card.slots[region] for region in regions]
        for slot in slots:
            slot.loaded = None
        self._save()
        for region in regions:
            self._notify(SimEvent.CHANGE, card, region)
        try:
            if any(slot.hang_next for slot in slots):
                for slot in slots:
                    slot.hang_next = False
                await asyncio.Event().wait()  # never completes; the caller's deadline cancels it
            await asyncio.sleep(self.program_s)
            failing = [slot for slot in slots if slot.fail_next is not None]
            if failing:
                reason = str(failing[0].fail_next)
                for slot in failing:
                    slot.fail_next = None
                raise OSError(5, reason)  # EIO
            if not card.plugged:
                raise OSError(19, f"simulated card {card.name} vanished while programming")
            finish()
        finally:
            self._save()
            if card.plugged:
                for region in regions:
                    self._notify(SimEvent.CHANGE, card, region)

    # ------------------------------------------------------- fault injection
    def set_health(self, card_name: str, region: str, healthy: bool, reason: str = "") -> None:
        """Make a slot report (un)healthy; an unplugged card shows it once plugged back."""
        card = self._cards[card_name]
        slot = card.slots[region]
        slot.healthy, slot.reason = healthy, ("" if healthy else reason or "injected fault")
        if card.plugged:
            self._notify(SimEvent.CHANGE, card, region)

    def fail_next_program(self, card_name: str, region: str, reason: str = "injected failure") -> None:
        """Make the next reconfiguration of this slot fail with EIO."""
        self._cards[card_name].slots[region].fail_next = reason

    def hang_next_program(self, card_name: str, region: str) -> None:
        """Make the next reconfiguration of this slot never finish."""
        self._cards[card_name].slots[region].hang_next = True

    def unplug(self, card_name: str) -> None:
        """Remove a card: its device files go away and every slot reports remove."""
        card = self._cards[card_name]
        if not card.plugged:
            return
        for region in card.slots:
            self._notify(SimEvent.REMOVE, card, region)
        card.plugged = False
        for region in card.slots:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._device_path(card, region))

    def plug(self, card_name: str) -> None:
        """Put a card back: its device files reappear and every slot reports add."""
        card = self._cards[card_name]
        if card.plugged:
            return
        card.plugged = True
        self._create_device_files(card)
        for region in card.slots:
            self._notify(SimEvent.ADD, card, region)

    # ---------------------------------------------------------------- helpers
    def _device_path(self, card: _Card, region: str) -> Path:
        return self.dev_dir / f"fpga-sim-{card.name}-{region}"

    def _info(self, card: _Card, region: str) -> SimSlotInfo:
        slot = card.slots[region]
        return SimSlotInfo(
            card=card.name,
            region=region,
            numa=card.numa,
            device_path=str(self._device_path(card, region)),
            platform=PLATFORM,
            loaded=slot.loaded if card.image is None else card.image,
            healthy=slot.healthy,
            reason=slot.reason,
            whole_card=card.image is not None,
        )

    def _notify(self, event: SimEvent, card: _Card, region: str) -> None:
        info = self._info(card, region)
        for listener in list(self._listeners):
            listener(event, info)

    def _create_device_files(self, card: _Card) -> None:
        """Each slot's device file; raises PermissionError for device nodes without root."""
        self.dev_dir.mkdir(parents=True, exist_ok=True)
        for region in card.slots:
            path = self._device_path(card, region)
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                mode = 0
            if self.device_nodes:
                if stat.S_ISCHR(mode):
                    continue
                if mode:  # a regular file left by a run without device nodes
                    os.unlink(path)
                os.mknod(path, 0o666 | stat.S_IFCHR, os.stat("/dev/null").st_rdev)
                os.chmod(path, 0o666)  # noqa: S103  # like /dev/null, usable by non-root containers; mknod applies the umask
            elif not mode:
                path.touch(mode=0o660)

    def _restore(self) -> None:
        path = self.dev_dir / STATE_FILE
        try:
            saved = json.loads(read_no_follow(path))
            loaded = saved["loaded"]
            images = saved.get("cards", {})
            if not isinstance(loaded, dict) or not isinstance(images, dict):
                raise TypeError("'loaded' or 'cards' is not an object")
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("simulated fabric state %s unreadable (%s); starting with empty slots", path, exc)
            return
        for key, accelerator in loaded.items():
            card_name, _, region = str(key).partition("/")
            card = self._cards.get(card_name)
            if card is not None and region in card.slots and isinstance(accelerator, str):
                card.slots[region].loaded = accelerator
        for card_name, image in images.items():
            if card_name in self._cards and isinstance(image, str):
                self._cards[card_name].image = image

    def _save(self) -> None:
        loaded = {
            f"{card.name}/{region}": slot.loaded
            for card in self._cards.values()
            for region, slot in card.slots.items()
            if slot.loaded is not None
        }
        images = {card.name: card.image for card in self._cards.values() if card.image is not None}
        state = json.dumps({"version": 1, "loaded": loaded, "cards": images}, sort_keys=True).encode()
        write_atomically(self.dev_dir / STATE_FILE, state, mode=0o600)
