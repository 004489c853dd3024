"""ResourceClaimTemplates, read for what a DRA pod asks of the slots: which bitstream, how many slots.

Each is parsed once (fed by a list+watch), every field checked for type and size (``MAX_*``). See docs/dra.md."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

#: The DRA driver whose opaque configuration names the bitstream.
DRIVER = "fpga.example.com"
#: The key of that configuration's parameters that names the bitstream (as the agent reads it).
BITSTREAM_PARAMETER = "bitstream"
#: The shipped DeviceClass of whole cards (daemonset/dra-mode/deviceclass-card.yaml): a request of it asks for cards.
CARD_CLASS = "fpga-card"
#: The shipped DeviceClasses of slots (daemonset/dra-mode/deviceclass.yaml, deviceclass-cached.yaml).
SLOT_CLASSES = frozenset({"fpga-slot", "fpga-slot-cached"})
#: Bounds on what is read (the API server's own limits, or above them): longer is an error, not a truncation.
MAX_NAME_CHARS = 253
MAX_REQUESTS = 32
MAX_ALTERNATIVES = 8
MAX_CONFIGS = 32
MAX_SLOTS_PER_REQUEST = 128
#: Templates kept at most; past it new ones are left out (and said so once): templates are few.
MAX_TEMPLATES = 10_000


class ClaimTemplateError(ValueError):
    """A ResourceClaimTemplate that is not what the API server accepts, or that the extender cannot read."""


@dataclass(frozen=True, slots=True)
class TemplateRequest:
    """One request of a template: its name, the slots it asks for, the bitstream its configuration names."""

    name: str
    count: int
    bitstream: str | None
    #: Whether a configuration for ``fpga.example.com`` applies to it (a request for FPGA slots).
    ours: bool
    #: It asks for whole cards (``count`` of them; the class ``fpga-card``), not slots.
    whole_card: bool = False


@dataclass(frozen=True, slots=True)
class ClaimTemplate:
    """A parsed ResourceClaimTemplate; ``error`` says why it cannot be used (then ``requests`` is empty)."""

    namespace: str
    name: str
    resource_version: str = ""
    requests: tuple[TemplateRequest, ...] = ()
    error: str | None = None


def parse_claim_template(obj: Mapping[str, Any]) -> ClaimTemplate:
    """The template from its JSON; ValueError only without a name or namespace, else a template with an ``error``."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise ValueError("object has no usable metadata.name")
    if not isinstance(namespace, str) or not namespace or len(namespace) > MAX_NAME_CHARS:
        raise ValueError(f"ResourceClaimTemplate {name[:64]} has no usable metadata.namespace")
    version = meta.get("resourceVersion")
    version = version if isinstance(version, str) and len(version) <= MAX_NAME_CHARS else ""
    try:
        return ClaimTemplate(namespace, name, version, _requests(obj))
    except Exception as exc:  # a case nobody thought of costs this template only, never the watch
        error = str(exc) if isinstance(exc, ClaimTemplateError) else f"unreadable ({type(exc).__name__})"
    _report(namespace, name, version, error)
    return ClaimTemplate(namespace, name, version, (), error)


def _requests(obj: Mapping[str, Any]) -> tuple[TemplateRequest, ...]:
    spec = _mapping(_mapping(obj.get("spec"), "spec").get("spec"), "spec.spec")
    devices = _mapping(spec.get("devices"), "spec.spec.devices")
    raw_requests = _list(devices.get("requests"), "spec.spec.devices.requests", MAX_REQUESTS)
    configs = _configs(_list(devices.get("config"), "spec.spec.devices.config", MAX_CONFIGS))
    requests: list[TemplateRequest] = []
    for index, raw in enumerate(raw_requests):
        where = f"spec.spec.devices.requests[{index}]"
        request = _mapping(raw, where)
        name = _name(request.get("name"), f"{where}.name")
        exactly, alternatives = request.get("exactly"), request.get("firstAvailable")
        if exactly is not None:
            first = _mapping(exactly, f"{where}.exactly")
            count = _count(first, f"{where}.exactly")
        elif alternatives is not None:
            listed = _list(alternatives, f"{where}.firstAvailable", MAX_ALTERNATIVES)
            if not listed:
                raise ClaimTemplateError(f"{where}.firstAvailable is empty")
            first = _mapping(listed[0], f"{where}.firstAvailable[0]")
            count = _count(first, f"{where}.firstAvailable[0]")
        else:
            raise ClaimTemplateError(f"{where} has neither exactly nor firstAvailable")
        bitstream: str | None = None
        ours = False
        for applies_to, named in configs:
            if applies_to and name not in applies_to:
                continue
            ours = True
            bitstream = named or bitstream
        requests.append(TemplateRequest(name, count, bitstream, ours, first.get("deviceClassName") == CARD_CLASS))
    return tuple(requests)


def _configs(raw_configs: list[Any]) -> list[tuple[frozenset[str], str | None]]:
    """(requests it applies to, empty: all; the bitstream it names or None) of each config for our driver, in order."""
    configs: list[tuple[frozenset[str], str | None]] = []
    for index, raw in enumerate(raw_configs):
        where = f"spec.spec.devices.config[{index}]"
        config = _mapping(raw, where)
        opaque = config.get("opaque")
        if opaque is None:
            continue
        opaque = _mapping(opaque, f"{where}.opaque")
        if opaque.get("driver") != DRIVER:
            continue
        listed = _list(config.get("requests"), f"{where}.requests", MAX_REQUESTS)
        # "fpga/any" (a subrequest) configures the request "fpga" when that alternative is taken.
        applies_to = frozenset(_name(r, f"{where}.requests").partition("/")[0] for r in listed)
        parameters = _mapping(opaque.get("parameters"), f"{where}.opaque.parameters")
        value = parameters.get(BITSTREAM_PARAMETER)
        if BITSTREAM_PARAMETER in parameters and (not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS):
            raise ClaimTemplateError(
                f"{where}.opaque.parameters.{BITSTREAM_PARAMETER} must be a bitstream name "
                f"(1 to {MAX_NAME_CHARS} characters)"
            )
        configs.append((applies_to, value))
    return configs


def _count(request: Mapping[str, Any], where: str) -> int:
    mode = request.get("allocationMode", "ExactCount")
    if mode == "All":
        raise ClaimTemplateError(f"{where}.allocationMode All: the slots it takes depend on the node")
    if mode != "ExactCount":
        raise ClaimTemplateError(f"{where}.allocationMode must be ExactCount or All")
    count = request.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SLOTS_PER_REQUEST:
        raise ClaimTemplateError(f"{where}.count must be an integer from 1 to {MAX_SLOTS_PER_REQUEST}")
    return count


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise ClaimTemplateError(f"{where} must be a name of 1 to {MAX_NAME_CHARS} characters")
    return value


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClaimTemplateError(f"{where} must be an object")
    return value


def _list(value: object, where: str, limit: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ClaimTemplateError(f"{where} must be a list")
    if len(value) > limit:
        raise ClaimTemplateError(f"{where} has {len(value)} entries, more than {limit}")
    return value


#: Where a DRA pod's templates are looked up: (namespace, name) -> template or None.
TemplateLookup = Callable[[str, str], ClaimTemplate | None]

_REPORTED: dict[tuple[str, str], str] = {}


def _report(namespace: str, name: str, version: str, error: str) -> None:
    """A warning once per template and resourceVersion."""
    if _REPORTED.get((namespace, name)) == version and version:
        return
    if len(_REPORTED) >= MAX_TEMPLATES:
        _REPORTED.clear()
    _REPORTED[(namespace, name)] = version
    logger.warning(
        "ResourceClaimTemplate %s/%s (resourceVersion %s) is not read, its pods score neutrally: %s",
        namespace,
        name,
        version or "-",
        error,
    )


class ClaimTemplates:
    """(namespace, name) -> parsed template, replaced by lists and updated by watch events. Loop-only."""

    def __init__(self, limit: int = MAX_TEMPLATES) -> None:
        self._limit = limit
        self._templates: dict[tuple[str, str], ClaimTemplate] = {}
        self._full_reported = False
        self._failing = False
        self._synced = False

    def get(self, namespace: str, name: str) -> ClaimTemplate | None:
        """The template (namespace, name), as a DRA pod's claims are looked up (:data:`TemplateLookup`)."""
        return self._templates.get((namespace, name))

    def __len__(self) -> int:
        return len(self._templates)

    def replace(self, templates: Iterable[ClaimTemplate]) -> None:
        """A list of every template: the table is these (at most ``limit``)."""
        table: dict[tuple[str, str], ClaimTemplate] = {}
        for template in templates:
            if len(table) >= self._limit:
                self._say_full()
                break
            table[(template.namespace, template.name)] = template
        self._templates = table
        if self._failing or not self._synced:
            logger.info("ResourceClaimTemplates listed: %d", len(table))
        self._failing = False
        self._synced = True

    def apply(self, kind: str, template: ClaimTemplate) -> None:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        key = (template.namespace, template.name)
        if kind == "DELETED":
            self._templates.pop(key, None)
        elif key in self._templates or len(self._templates) < self._limit:
            self._templates[key] = template
        else:
            self._say_full()

    def failed(self, text: str) -> None:
        """Listing failed: said once per outage; the last known templates are served meanwhile."""
        if not self._failing:
            logger.warning("ResourceClaimTemplates not listed (%s): DRA pods of unknown ones score neutrally", text)
        self._failing = True

    def _say_full(self) -> None:
        if not self._full_reported:
            logger.warning("more than %d ResourceClaimTemplates: the others score their pods neutrally", self._limit)
        self._full_reported = True
