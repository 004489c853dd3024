"""Command programmer: program static slots by running the board's vendor tool (XRT, OPAE, fpgautil...), one
operation per card, as ``command-programmers`` says (:mod:`agent.programming.commandspec`). See
docs/command-programmer.md."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from agent.errors import ProgrammingError
from agent.programming.cardlock import CardLocks
from agent.programming.catalogentry import normalize_platform_id
from agent.programming.commandspec import CommandSpec
from agent.programming.toolrun import ToolResult, run_tool, shown_output
from agent.slots.model import Slot, SlotId

logger = logging.getLogger(__name__)

#: The backend whose slots command programmers program (the static one: boards the kernel does not describe).
STATIC_BACKEND = "static"
#: Deadline of one read-back at start and of a reset run in the background.
READ_BACK_AT_START_S = 30.0
RESET_TIMEOUT_S = 60.0


class CommandProgrammer:
    """Programs static slots with the vendor tool their ``command-programmers`` entry names."""

    def __init__(self, specs: Sequence[CommandSpec]) -> None:
        self._by_slot = {slot_id: spec for spec in specs for slot_id in spec.slots}
        self._by_platform = {spec.platform: spec for spec in specs if spec.platform is not None}
        self._cards = CardLocks()
        #: what the read-back said each slot holds (None: empty or unknown); absent: never read
        self._reported: dict[SlotId, str | None] = {}
        #: card -> the slot whose failed programming still owes the card a reset
        self._owed_resets: dict[str, Slot] = {}
        self._background: set[asyncio.Task[None]] = set()
        #: card -> the slots of the whole-card image it holds (loaded by ``program-card``)
        self._card_images: dict[str, tuple[SlotId, ...]] = {}

    def spec_for(self, slot: Slot) -> CommandSpec | None:
        """The entry that programs ``slot``: the one naming it, else the one for its platform (static slots only)."""
        if slot.backend != STATIC_BACKEND:
            return None
        return self._by_slot.get(slot.id) or self._by_platform.get(slot.platform)

    def can_program(self, slot: Slot) -> bool:
        return self.spec_for(slot) is not None

    def reported(self, slot_id: SlotId) -> str | None:
        """The accelerator the last read-back found in the slot (what the static backend reports)."""
        return self._reported.get(slot_id)

    def whole_card(self, card: str) -> bool:
        """Whether the card holds a whole-card image this programmer loaded (what its slots report is the card's)."""
        return card in self._card_images

    def can_program_card(self, slots: Sequence[Slot]) -> bool:
        """Whether one entry with ``program-card`` programs every slot of ``slots`` (all of one card)."""
        return self._card_spec(slots) is not None

    def _card_spec(self, slots: Sequence[Slot]) -> CommandSpec | None:
        specs = [self.spec_for(slot) for slot in slots]
        spec = specs[0] if specs else None
        if spec is None or spec.program_card is None or len({slot.card for slot in slots}) != 1:
            return None
        return spec if all(other is spec for other in specs) else None

    async def program_card(self, slots: Sequence[Slot], image: bytes, accelerator_id: str, timeout_s: float) -> float:
        """Run the entry's ``program-card`` on the image, then its read-back on the first slot."""
        card = slots[0].card
        spec = self._card_spec(slots)
        if spec is None or spec.program_card is None:
            raise ProgrammingError(f"card {card}: no command programmer with program-card is configured for it")
        what = f"card {card}: programming {accelerator_id} with {os.path.basename(spec.program_card.tool)}"
        with _staged(image, f"card {card}") as staged:
            async with self._cards.hold(card, timeout_s, f"card {card}") as lease:
                deadline = lease.deadline
                self._card_images.pop(card, None)
                for slot in slots:
                    self._reported.pop(slot.id, None)
                await self._settle_owed_reset(card, deadline)
                values = {"image": str(staged), "accelerator": accelerator_id, "card": card}
                took = (await _run_ok(spec, spec.program_card.render(values), deadline, what, checked=True)).seconds
                if spec.read_back is not None:
                    await self._check_read_back(spec, slots[0], deadline, what, accelerator_id)
                for slot in slots:
                    self._reported[slot.id] = normalize_platform_id(accelerator_id, "accelerator id")
                self._card_images[card] = tuple(slot.id for slot in slots)
        logger.info("card %s programmed with %s in %.0f ms", card, accelerator_id, took * 1000)
        return took

    async def _restore_base(self, spec: CommandSpec, slot: Slot, deadline: float) -> None:
        """Before a slot of a card holding a whole-card image is programmed (the caller holds the card)."""
        held = self._card_images.pop(slot.card, None)
        if held is None:
            return
        for slot_id in held:
            self._reported.pop(slot_id, None)
        if spec.restore_base is not None:
            what = f"card {slot.card}: restoring the base layout with {os.path.basename(spec.restore_base.tool)}"
            await _run_ok(spec, spec.restore_base.render({"card": slot.card}), deadline, what, checked=True)

    # --------------------------------------------------------------- programming
    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        """Program from bytes (when no catalog file is at hand): staged in a private temp file first."""
        with _staged(image, f"slot {slot.id}") as staged:
            return await self.program_file(slot, staged, accelerator_id, timeout_s)

    async def program_file(self, slot: Slot, image_file: Path, accelerator_id: str, timeout_s: float) -> float:
        """Run the slot's program command on ``image_file`` (then its read-back); the seconds the tool took."""
        spec = self.spec_for(slot)
        if spec is None:
            raise ProgrammingError(f"slot {slot.id}: no command programmer is configured for it")
        what = f"slot {slot.id}: programming {accelerator_id} with {os.path.basename(spec.program.tool)}"
        async with self._cards.hold(slot.card, timeout_s, f"slot {slot.id}: card {slot.card}") as lease:
            deadline = lease.deadline
            self._reported.pop(slot.id, None)
            try:
                await self._settle_owed_reset(slot.card, deadline)
                await self._restore_base(spec, slot, deadline)
                values = {**_slot_values(slot), "image": str(image_file), "accelerator": accelerator_id}
                took = (await _run_ok(spec, spec.program.render(values), deadline, what, checked=True)).seconds
                if spec.read_back is not None:
                    self._reported[slot.id] = await self._check_read_back(spec, slot, deadline, what, accelerator_id)
            except ProgrammingError as exc:
                if spec.reset is not None:
                    self._owe_reset(slot, str(exc))
                raise
        logger.info("slot %s programmed with %s in %.0f ms", slot.id, accelerator_id, took * 1000)
        return took

    async def _check_read_back(
        self, spec: CommandSpec, slot: Slot, deadline: float, what: str, accelerator_id: str
    ) -> str | None:
        """The read-back after programming ``accelerator_id``; ProgrammingError when it reports anything else."""
        found = await self._read_back(spec, slot, deadline)
        if found != normalize_platform_id(accelerator_id, "accelerator id"):
            raise ProgrammingError(
                f"{what}: the read-back reports {'no accelerator' if found is None else 'accelerator ' + found} "
                f"after programming, expected {accelerator_id}"
            )
        return found

    async def _read_back(self, spec: CommandSpec, slot: Slot, deadline: float) -> str | None:
        """What the read-back command says the slot holds (None: no accelerator id in its output)."""
        assert spec.read_back is not None
        what = f"slot {slot.id}: read-back with {os.path.basename(spec.read_back.tool)}"
        result = await _run_ok(spec, spec.read_back.render(_slot_values(slot)), deadline, what)
        if spec.read_back_pattern is None:
            text = result.stdout.strip()
        else:
            match = spec.read_back_pattern.search(result.stdout)
            text = "" if match is None else (match.group(1) if spec.read_back_pattern.groups else match.group(0))
        if not text:
            return None
        try:
            return normalize_platform_id(text, "accelerator id")
        except ValueError:
            output = shown_output(result.stdout, result.stdout_bytes)
            raise ProgrammingError(f"{what}: its output is not an accelerator id: stdout {output}") from None

    # ------------------------------------------------------------- at start
    async def read_back_all(self, slots: Sequence[Slot], timeout_s: float = READ_BACK_AT_START_S) -> None:
        """Learn what the slots hold from their read-back commands; a slot whose read-back fails stays unknown."""
        by_card: dict[str, list[tuple[Slot, CommandSpec]]] = {}
        for slot in slots:
            spec = self.spec_for(slot)
            if spec is not None and spec.read_back is not None:
                by_card.setdefault(slot.card, []).append((slot, spec))
        await asyncio.gather(*(self._read_card(card, found, timeout_s) for card, found in by_card.items()))

    async def _read_card(self, card: str, found: list[tuple[Slot, CommandSpec]], timeout_s: float) -> None:
        for slot, spec in found:
            try:
                async with self._cards.hold(card, timeout_s, f"slot {slot.id}: card {card}") as lease:
                    self._reported[slot.id] = loaded = await self._read_back(spec, slot, lease.deadline)
            except ProgrammingError as exc:
                logger.warning("slot %s: content unknown at start, read-back failed: %s", slot.id, exc)
                continue
            logger.info("slot %s: read-back at start reports %s", slot.id, loaded or "no accelerator")

    # ------------------------------------------------------------------ reset
    def _owe_reset(self, slot: Slot, reason: str) -> None:
        """The card gets the slot's reset before its next operation, and soon in the background anyway."""
        self._owed_resets[slot.card] = slot
        logger.info("slot %s: reset owed after the failed programming (%s)", slot.id, reason)
        task = asyncio.create_task(self._reset_soon(slot.card), name=f"reset card {slot.card}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _reset_soon(self, card: str) -> None:
        try:
            async with self._cards.hold(card, RESET_TIMEOUT_S, f"card {card}") as lease:
                await self._settle_owed_reset(card, lease.deadline)
        except ProgrammingError as exc:
            logger.error("card %s: reset after a failed programming failed: %s", card, exc)

    async def _settle_owed_reset(self, card: str, deadline: float) -> None:
        """Run the reset the card owes, if any (the caller holds the card)."""
        slot = self._owed_resets.get(card)
        if slot is None:
            return
        spec = self.spec_for(slot)
        assert spec is not None
        assert spec.reset is not None
        what = f"slot {slot.id}: reset with {os.path.basename(spec.reset.tool)}"
        result = await _run_ok(
            spec, spec.reset.render(_slot_values(slot)), deadline, what, " after a failed programming"
        )
        del self._owed_resets[card]
        logger.info("slot %s: reset after the failed programming in %.0f ms", slot.id, result.seconds * 1000)

    async def close(self) -> None:
        """Stop background resets (each kills its tool's process group)."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)


async def _run_ok(
    spec: CommandSpec, argv: tuple[str, ...], deadline: float, what: str, context: str = "", checked: bool = False
) -> ToolResult:
    """Run a tool of the entry; ProgrammingError on a failed exit or (``checked``) output the failure pattern marks."""
    result = await run_tool(argv, deadline, what, dict(spec.environment))
    if result.status != 0:
        raise ProgrammingError(f"{what}{context}: {argv[0]} {result.ended()}: {result.output()}")
    pattern = spec.failure_pattern if checked else None
    match = None if pattern is None else pattern.search(result.stdout + "\n" + result.stderr)
    if match is not None:
        raise ProgrammingError(
            f"{what}: {argv[0]} exited with status 0 but printed {match.group(0)!r}, "
            f"which the failure pattern marks as failed: {result.output()}"
        )
    return result


def _slot_values(slot: Slot) -> dict[str, str]:
    return {"slot": slot.id, "card": slot.card, "region": slot.region, "control_node": slot.control_node}


@contextlib.contextmanager
def _staged(image: bytes, what: str) -> Iterator[Path]:
    """``image`` in a private temp file (0600, created exclusively) for a tool to read; removed afterwards."""
    if not image:
        raise ProgrammingError(f"{what}: bitstream image is empty")
    with tempfile.TemporaryDirectory(prefix="fpga-image-") as directory:
        staged = Path(directory) / "image.bin"
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(image)
        yield staged
