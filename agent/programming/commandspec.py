"""What a command programmer runs: the ``command-programmers`` entries (docs/command-programmer.md), validated at
start. Each argument is one argv element (no shell); ``{placeholders}`` take the slot's values."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.errors import ProgrammingError, shown

#: What a template may name, and where: the image and the accelerator only in ``program``.
PLACEHOLDERS = ("image", "accelerator", "slot", "card", "region", "control_node")
_SLOT_PLACEHOLDERS = frozenset(PLACEHOLDERS) - {"image", "accelerator"}
#: What the card-level commands may name: ``program-card`` the image, the accelerator and the card.
_CARD_PLACEHOLDERS = frozenset({"image", "accelerator", "card"})
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_FIELDS = {
    "slots",
    "platform",
    "program",
    "read-back",
    "read-back-pattern",
    "reset",
    "program-card",
    "restore-base",
    "failure-pattern",
    "environment",
    "allow-loader-variables",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_ARGS = 64
MAX_ARG_CHARS = 4096


@dataclass(frozen=True, slots=True)
class ArgvTemplate:
    """An argv whose elements may hold ``{placeholder}`` fields; element 0 is the tool's absolute path."""

    argv: tuple[str, ...]

    @property
    def tool(self) -> str:
        return self.argv[0]

    def render(self, values: Mapping[str, str]) -> tuple[str, ...]:
        """The argv with every placeholder replaced; ProgrammingError if a value turns an argument into an option."""
        argv = tuple(_PLACEHOLDER.sub(lambda match: values[match.group(1)], arg) for arg in self.argv)
        for template, arg in zip(self.argv[1:], argv[1:], strict=True):
            if template.startswith("{") and arg.startswith("-"):
                raise ProgrammingError(
                    f"{os.path.basename(self.tool)}: argument {template} would be {shown(arg)}, "
                    "which the tool would read as an option; refused"
                )
        return argv


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """The commands of one ``command-programmers`` entry and the slots it is for."""

    program: ArgvTemplate
    slots: tuple[str, ...] = ()
    platform: str | None = None
    read_back: ArgvTemplate | None = None
    read_back_pattern: re.Pattern[str] | None = None
    reset: ArgvTemplate | None = None
    failure_pattern: re.Pattern[str] | None = None
    environment: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    #: where it was declared, for messages: ``[0]``
    where: str = ""
    #: loads a whole-card image into the card (the slots' ``card``); None: its cards are not offered whole
    program_card: ArgvTemplate | None = None
    #: puts the card's base layout back before one of its slots is programmed after a whole-card image
    restore_base: ArgvTemplate | None = None

    def templates(self) -> list[tuple[str, ArgvTemplate]]:
        found = (
            ("program", self.program),
            ("read-back", self.read_back),
            ("reset", self.reset),
            ("program-card", self.program_card),
            ("restore-base", self.restore_base),
        )
        return [(key, template) for key, template in found if template is not None]


def _template(entry: Mapping[str, object], key: str, where: str, allowed: frozenset[str]) -> ArgvTemplate | None:
    raw = entry.get(key)
    if raw is None:
        return None
    if not isinstance(raw, list | tuple) or not raw or len(raw) > MAX_ARGS:
        raise ValueError(f"{where}.{key} must be a list of 1 to {MAX_ARGS} arguments (the tool first), got {raw!r}")
    for arg in raw:
        if not isinstance(arg, str) or len(arg) > MAX_ARG_CHARS or "\0" in arg:
            raise ValueError(f"{where}.{key}: every argument must be a string without NUL bytes, got {arg!r}")
        for name in _PLACEHOLDER.findall(arg):
            if name not in allowed:
                raise ValueError(
                    f"{where}.{key}: unknown placeholder {{{name}}} in {arg!r}; "
                    f"{key} may use {', '.join('{' + p + '}' for p in PLACEHOLDERS if p in allowed)}"
                )
        if _PLACEHOLDER.sub("", arg).count("{") or _PLACEHOLDER.sub("", arg).count("}"):
            raise ValueError(f"{where}.{key}: unbalanced brace in {arg!r}")
    tool = raw[0]
    if _PLACEHOLDER.search(tool) or not os.path.isabs(tool):
        raise ValueError(
            f"{where}.{key}: the tool {tool!r} must be an absolute path (it runs with a minimal environment)"
        )
    return ArgvTemplate(tuple(raw))


def _pattern(entry: Mapping[str, object], key: str, where: str) -> re.Pattern[str] | None:
    raw = entry.get(key)
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        raise ValueError(f"{where}.{key} must be a regular expression, got {raw!r}")
    try:
        pattern = re.compile(raw, re.MULTILINE)
    except re.error as exc:
        raise ValueError(f"{where}.{key}: {raw!r} is not a regular expression: {exc}") from None
    if pattern.groups > 1:
        raise ValueError(f"{where}.{key}: {raw!r} may capture at most one group (the accelerator id)")
    return pattern


def _environment(entry: Mapping[str, object], where: str) -> tuple[tuple[str, str], ...]:
    """The entry's ``environment``; a dynamic-loader variable (``LD_*``) only if ``allow-loader-variables`` names it."""
    allowed = entry.get("allow-loader-variables")
    if allowed is None:
        allowed = ()
    if not isinstance(allowed, list | tuple) or not all(isinstance(n, str) and n.startswith("LD_") for n in allowed):
        raise ValueError(f"{where}.allow-loader-variables must be a list of LD_* variable names, got {allowed!r}")
    raw = entry.get("environment")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ValueError(f"{where}.environment must be a mapping of variable names to values, got {raw!r}")
    pairs = []
    for name, value in raw.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{where}.environment: {name!r} is not an environment variable name")
        if name.startswith("LD_") and name not in allowed:
            raise ValueError(
                f"{where}.environment.{name}: a dynamic-loader variable decides what code the tool runs; "
                f"refused unless the entry lists it in allow-loader-variables"
            )
        if not isinstance(value, str | int | float) or isinstance(value, bool) or "\0" in str(value):
            raise ValueError(f"{where}.environment.{name} must be a string, got {value!r}")
        pairs.append((name, str(value)))
    return tuple(sorted(pairs))


def _selection(entry: Mapping[str, object], where: str) -> tuple[tuple[str, ...], str | None]:
    slots, platform = entry.get("slots"), entry.get("platform")
    if (slots is None) == (platform is None):
        raise ValueError(f"{where} must name either slots (a list of static slot ids) or a platform, not both")
    if platform is not None:
        if not isinstance(platform, str) or not platform.strip():
            raise ValueError(f"{where}.platform must be a non-empty string, got {platform!r}")
        return (), platform.strip()
    if isinstance(slots, str):
        slots = [slots]
    if not isinstance(slots, list | tuple) or not slots or not all(isinstance(s, str) and s for s in slots):
        raise ValueError(f"{where}.slots must be a non-empty list of slot ids, got {slots!r}")
    return tuple(slots), None


def parse_command_programmers(data: object) -> tuple[CommandSpec, ...]:
    """Validate the ``command-programmers`` list; errors name the entry and the field."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ValueError(f"must be a list of command programmers, got {type(data).__name__}")
    specs = []
    for index, entry in enumerate(data):
        where = f"[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a mapping with slots or platform, and program")
        unknown = set(map(str, entry)) - _FIELDS
        if unknown:
            raise ValueError(f"{where} has unknown field(s) {', '.join(sorted(unknown))}")
        slots, platform = _selection(entry, where)
        program = _template(entry, "program", where, frozenset(PLACEHOLDERS))
        if program is None:
            raise ValueError(f"{where}.program is required: the tool and its arguments")
        read_back = _template(entry, "read-back", where, _SLOT_PLACEHOLDERS)
        read_back_pattern = _pattern(entry, "read-back-pattern", where)
        if read_back_pattern is not None and read_back is None:
            raise ValueError(f"{where}.read-back-pattern needs a read-back command")
        specs.append(
            CommandSpec(
                program=program,
                slots=slots,
                platform=platform,
                read_back=read_back,
                read_back_pattern=read_back_pattern,
                reset=_template(entry, "reset", where, _SLOT_PLACEHOLDERS),
                failure_pattern=_pattern(entry, "failure-pattern", where),
                environment=_environment(entry, where),
                where=where,
                program_card=_template(entry, "program-card", where, _CARD_PLACEHOLDERS),
                restore_base=_template(entry, "restore-base", where, frozenset({"card"})),
            )
        )
    return tuple(specs)


def check_selection(specs: Sequence[CommandSpec], slot_platforms: Mapping[str, str]) -> None:
    """ValueError naming the entry unless each selects a declared static slot (``slot_platforms``: id ->
    platform) and no slot is named twice."""
    named: dict[str, str] = {}
    for spec in specs:
        for slot_id in spec.slots:
            if slot_id not in slot_platforms:
                known = ", ".join(sorted(slot_platforms)) or "none"
                raise ValueError(f"{spec.where}.slots: {slot_id!r} is not a declared static slot (declared: {known})")
            if slot_id in named:
                raise ValueError(f"{spec.where}.slots: {slot_id!r} is already programmed by entry {named[slot_id]}")
            named[slot_id] = spec.where
        if spec.platform is not None and spec.platform not in slot_platforms.values():
            raise ValueError(f"{spec.where}.platform: no declared static slot has platform {spec.platform!r}")


def missing_tool(spec: CommandSpec) -> str | None:
    """Why a tool of ``spec`` cannot be run here ('<key>: <path> ...'), or None when all can."""
    for key, template in spec.templates():
        path = Path(template.tool)
        if not path.exists():
            return f"{key}: {template.tool} is not in this image (no such file)"
        if not path.is_file():
            return f"{key}: {template.tool} is not a regular file"
        if not os.access(path, os.X_OK):
            return f"{key}: {template.tool} is not executable"
    return None
