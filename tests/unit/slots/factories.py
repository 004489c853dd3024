"""Domain values for the slot tests, built the way discovery builds them."""

from __future__ import annotations

from agent.slots.model import DeviceNode, Health, Slot, make_slot_id


def make_slot(
    card: str = "card0",
    region: str = "slot0",
    *,
    numa: int | None = 0,
    loaded: str | None = None,
    health: Health = Health.HEALTHY,
    reason: str = "",
    platform: str = "test-pr",
    backend: str = "test",
) -> Slot:
    """A slot with one device node, ID derived from card and region."""
    slot_id = make_slot_id(card, region)
    return Slot(
        id=slot_id,
        card=card,
        region=region,
        numa=numa,
        device_nodes=(DeviceNode(f"/dev/test-{slot_id}", f"/dev/fpga/{slot_id}"),),
        platform=platform,
        loaded=loaded,
        health=health,
        backend=backend,
        reason=reason,
    )


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now
