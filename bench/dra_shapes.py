"""What the DRA benchmarks put on the bench control plane, built by the code and files we ship.

* ``node_slice``: a fake node's ResourceSlice, made by the agent's own slice code
  (``agent.dra.mode.slice_devices`` over slot states, ``agent.kube.resourceslices.slice_spec``):
  the same device names, attributes, taints and order as a DRA-mode agent publishes.
* ``shipped_claim``: the claim of ``daemonset/examples/dra/cached-first.yaml`` (its
  ResourceClaimTemplate's spec: both alternatives of the selector-less class ``fpga-slot-cached``,
  ``cached`` by the bitstream's capacity, ``any`` by one selector that checks the driver first) for a
  given bitstream; ``plainest_claim``: upstream's
  benchmark shape, one ``exactly`` device of a class that matches only the driver.
* ``SHAPES``: the claim and class forms ``bench/scheduler.py --dra`` compares side by side,
  each with the scheduler profile it runs under.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from agent.dra.cards import counter_sets, offered_cards
from agent.dra.cards import offered as offered_names
from agent.dra.constants import DRIVER_NAME
from agent.dra.mode import bitstream_capacity, slice_devices
from agent.kube.resourceslices import GROUP_VERSION, counters_spec, slice_spec
from agent.slots.model import Health, Slot, SlotId
from agent.slots.registry import Content, SlotState

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "daemonset" / "examples" / "dra" / "cached-first.yaml"
SHIPPED_CLASS_FILE = ROOT / "daemonset" / "dra-mode" / "deviceclass.yaml"
CARD_CLASS_FILE = ROOT / "daemonset" / "dra-mode" / "deviceclass-card.yaml"
#: The selector-less class the shipped cache-aware example names (``fpga-slot-cached``).
CACHED_CLASS_FILE = ROOT / "daemonset" / "dra-mode" / "deviceclass-cached.yaml"
#: The bitstream and platform the shipped example names; the bench substitutes its own bitstream.
EXAMPLE_BITSTREAM = "aes-v1"
PLATFORM = "sim-pr-v1"
CARD = "0000:af:00.0"


def node_slice(node: str, contents: Sequence[tuple[str | None, float]]) -> dict[str, Any]:
    """The ResourceSlice a DRA-mode agent on ``node`` publishes for free slots holding ``contents``.

    ``contents``: per slot, the bitstream it holds (None: empty) and when it was last used.
    """
    return node_slices(node, contents)[0]


def node_slices(node: str, contents: Sequence[tuple[str | None, float]], cards: bool = False) -> list[dict[str, Any]]:
    """:func:`node_slice`, and with ``cards`` (the agent's ``--whole-cards``) its card offered whole: the card
    device in the devices' slice and the counters' slice after it."""
    states = []
    for index, (bitstream, last_used) in enumerate(contents):
        slot = Slot(
            id=SlotId(f"card0-port{index}"),
            card=CARD,
            region=f"port{index}",
            numa=0,
            device_nodes=(),
            platform=PLATFORM,
            loaded=None,
            health=Health.HEALTHY,
            backend="sim",
        )
        content = None if bitstream is None else Content(bitstream, f"accel-{bitstream}")
        states.append(SlotState(slot, None, last_used, True, content))
    offered = offered_cards(states, lambda _slots: True) if cards else []
    names = offered_names(states, offered)[0]
    slices = [
        {
            "apiVersion": GROUP_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER_NAME}"},
            "spec": slice_spec(
                DRIVER_NAME, node, slice_devices(states, names, cards=offered), slices=2 if offered else 1
            ),
        }
    ]
    if offered:
        spec = counters_spec(DRIVER_NAME, node, counter_sets(offered, names))
        slices.append(
            {
                "apiVersion": GROUP_VERSION,
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{DRIVER_NAME}-counters"},
                "spec": spec,
            }
        )
    return slices


def _example_template_spec() -> dict[str, Any]:
    for document in yaml.safe_load_all(EXAMPLE.read_text()):
        if document and document.get("kind") == "ResourceClaimTemplate":
            spec: dict[str, Any] = document["spec"]["spec"]
            if EXAMPLE_BITSTREAM not in json.dumps(spec):
                raise SystemExit(f"{EXAMPLE}: the template no longer names {EXAMPLE_BITSTREAM}")
            return spec
    raise SystemExit(f"{EXAMPLE}: no ResourceClaimTemplate")


_SHIPPED_SPEC = json.dumps(_example_template_spec())


def shipped_node_selector() -> dict[str, str]:
    """The node selector of the example's pod (the platform label of nodes whose slots are all of one platform)."""
    (pod,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] == "Pod"]
    selector: dict[str, str] = pod["spec"].get("nodeSelector", {})
    return selector


def shipped_claim(name: str, bitstream: str) -> dict[str, Any]:
    """A ResourceClaim with the shipped example template's spec, asking for ``bitstream``."""
    key, wanted = bitstream_capacity(EXAMPLE_BITSTREAM), bitstream_capacity(bitstream)
    if key is None or wanted is None:
        raise ValueError(f"bitstream name {bitstream!r} is too long for a capacity name")
    spec = json.loads(_SHIPPED_SPEC.replace(key, wanted).replace(EXAMPLE_BITSTREAM, bitstream))
    return {"metadata": {"name": name}, "spec": spec}


def _config(bitstream: str) -> list[dict[str, Any]]:
    return [{"requests": ["fpga"], "opaque": {"driver": DRIVER_NAME, "parameters": {"bitstream": bitstream}}}]


def plainest_claim(name: str, bitstream: str) -> dict[str, Any]:
    """Upstream's benchmark shape: one ``exactly`` device of ``bench-driver-only`` (the bitstream as config)."""
    request = {"name": "fpga", "exactly": {"deviceClassName": "bench-driver-only"}}
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": [request], "config": _config(bitstream)}}}


def _first_available(name: str, choices: list[dict[str, Any]], bitstream: str) -> dict[str, Any]:
    request = {"name": "fpga", "firstAvailable": choices}
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": [request], "config": _config(bitstream)}}}


def _cel(expression: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expression}}]


ATTRIBUTES = f'device.attributes["{DRIVER_NAME}"]'


def cel_cached(name: str, bitstream: str) -> dict[str, Any]:
    """The cache-aware claim as shipped before capacities: ``cached`` and ``any`` of the selector-less class, each
    with one CEL selector that checks the driver first (one evaluation per free device for ``cached``)."""
    guard = f'device.driver == "{DRIVER_NAME}" && {ATTRIBUTES}'
    choices: list[dict[str, Any]] = [
        {
            "name": "cached",
            "deviceClassName": "fpga-slot-cached",
            "selectors": _cel(f'{guard}.bitstream == "{bitstream}"'),
        },
        {"name": "any", "deviceClassName": "fpga-slot-cached", "selectors": _cel(f'{guard}.platform == "{PLATFORM}"')},
    ]
    return _first_available(name, choices, bitstream)


def cel_any(name: str, bitstream: str) -> dict[str, Any]:
    """``cached`` by the bitstream's capacity (as shipped), ``any`` by a CEL selector that checks driver and platform
    (the form for nodes that mix platforms; one CEL evaluation per node), no node selector."""
    wanted = bitstream_capacity(bitstream)
    if wanted is None:
        raise ValueError(f"bitstream name {bitstream!r} is too long for a capacity name")
    guard = f'device.driver == "{DRIVER_NAME}" && {ATTRIBUTES}'
    choices: list[dict[str, Any]] = [
        {"name": "cached", "deviceClassName": "fpga-slot-cached", "capacity": {"requests": {wanted: "1"}}},
        {"name": "any", "deviceClassName": "fpga-slot-cached", "selectors": _cel(f'{guard}.platform == "{PLATFORM}"')},
    ]
    return _first_available(name, choices, bitstream)


def driver_class(name: str, expression: str | None = f'device.driver == "{DRIVER_NAME}"') -> dict[str, Any]:
    """A DeviceClass with one CEL clause (None: no selector at all)."""
    spec = {} if expression is None else {"selectors": _cel(expression)}
    return {"apiVersion": GROUP_VERSION, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def shipped_class(path: Path = SHIPPED_CLASS_FILE) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def shipped_classes() -> list[dict[str, Any]]:
    """Both shipped DeviceClasses: ``fpga-slot`` and the cache-aware claims' ``fpga-slot-cached``."""
    return [shipped_class(), shipped_class(CACHED_CLASS_FILE)]


@dataclass(frozen=True)
class Shape:
    """A claim form: its classes, how a pod's claim is written, and the profile it is scheduled with."""

    name: str
    claim: Callable[[str, str], dict[str, Any]]
    classes: Callable[[], list[dict[str, Any]]]
    #: Fields set on the scheduler profile (e.g. percentageOfNodesToScore); ``None``: upstream's default profile
    #: (and no extender).
    profile: dict[str, Any] | None = field(default_factory=dict)
    #: Whether the configuration's extender (the shipped DRA profile calls ours for prioritize) stays.
    extender: bool = True
    #: The pods' node selector (the shipped example's names the platform; every fake node carries it).
    node_selector: Callable[[], dict[str, str]] = dict
    #: The nodes publish their card whole beside its slots (the agent's ``--whole-cards``): counters.
    cards: bool = False

    @property
    def calls_extender(self) -> bool:
        """The run needs the extender: the DRA profile with its extender (upstream's default profile has none)."""
        return self.extender and self.profile is not None


def _plain_classes() -> list[dict[str, Any]]:
    return [driver_class("bench-driver-only")]


#: The forms compared; the first is the anchor (upstream's shape), the second what we ship.
SHAPES: dict[str, Shape] = {
    "plainest": Shape("plainest: exactly 1, driver-only class, default profile", plainest_claim, _plain_classes, None),
    "plainest-cards": Shape(
        "plainest, nodes offering whole cards (shared counters, --whole-cards)",
        plainest_claim,
        _plain_classes,
        None,
        cards=True,
    ),
    "shipped": Shape(
        "shipped: cached-first.yaml, shipped classes and DRA profile",
        shipped_claim,
        shipped_classes,
        node_selector=shipped_node_selector,
    ),
    "shipped-cards": Shape(
        "shipped, nodes offering whole cards (shared counters, --whole-cards)",
        shipped_claim,
        lambda: [*shipped_classes(), shipped_class(CARD_CLASS_FILE)],
        node_selector=shipped_node_selector,
        cards=True,
    ),
    "cel": Shape(
        "cached-first with CEL for both alternatives (as shipped before), DRA profile", cel_cached, shipped_classes
    ),
    "cel-any": Shape("cached by capacity, any by a CEL platform selector, DRA profile", cel_any, shipped_classes),
}


def with_profile(shape: Shape, **fields: Any) -> Shape:
    """The same form under the DRA profile with ``fields`` set (a variant to compare)."""
    suffix = ", ".join(f"{k} {v}" for k, v in fields.items())
    return replace(shape, name=f"{shape.name}, {suffix}", profile={**(shape.profile or {}), **fields})


def without_extender(shape: Shape) -> Shape:
    """The same form with the extender left out of the configuration."""
    return replace(shape, name=f"{shape.name}, no extender", extender=False)


def scheduler_profile(base: dict[str, Any], shape: Shape) -> dict[str, Any]:
    """``base`` (the shipped DRA profile) as ``shape`` runs it: upstream's default profile when ``profile`` is None."""
    if shape.profile is None:
        return {"schedulerName": base["schedulerName"]}
    profile = copy.deepcopy(base)
    profile.update(shape.profile)
    return profile
