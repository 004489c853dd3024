"""The parsers behind ``agent.config.OPTIONS``: an option's text to its value, or ValueError."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from agent.discovery.static import StaticSlotSpec, parse_static_slots
from agent.programming.commandspec import CommandSpec, parse_command_programmers

NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """A TCP address to serve on; port 0 asks the kernel for a free one."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_int(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"must be an integer, got {raw!r}") from None
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


@dataclass(frozen=True, slots=True)
class Choice:
    """Parse one of ``choices`` (case-insensitive); the command line shows them."""

    choices: tuple[str, ...]

    def __call__(self, raw: str) -> str:
        value = raw.strip().lower()
        if value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}, got {raw!r}")
        return value


def parse_path(raw: str) -> Path:
    if not raw.strip():
        raise ValueError("must not be empty")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    return path


def parse_optional_path(raw: str) -> Path | None:
    return parse_path(raw) if raw.strip() else None


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {raw!r}")


def _load_yaml(raw: str) -> object:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ValueError(f"is not valid YAML/JSON: {exc}") from None


def parse_static(raw: str) -> tuple[StaticSlotSpec, ...]:
    return parse_static_slots(_load_yaml(raw))


def parse_commands(raw: str) -> tuple[CommandSpec, ...]:
    return parse_command_programmers(_load_yaml(raw))


def parse_name(raw: str) -> str:
    value = raw.strip()
    if not value or len(value) > 253:
        raise ValueError(f"must be a node name of 1 to 253 characters, got {raw!r}")
    return value


def parse_hosts(raw: str) -> tuple[str, ...]:
    hosts = tuple(part.strip() for part in raw.split(",") if part.strip())
    for host in hosts:
        if any(c.isspace() or c in "/@?#" for c in host) or len(host) > 255:
            raise ValueError(f"must be a comma-separated list of registries as host[:port], got {raw!r}")
    return hosts


_MANAGER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_FIRMWARE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")


def parse_base_images(raw: str) -> tuple[tuple[str, str], ...]:
    """``MANAGER=FIRMWARE,...``: an FPGA manager's sysfs name and a file name in the firmware directory."""
    pairs: dict[str, str] = {}
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        manager, equals, firmware = (x.strip() for x in part.partition("="))
        if not equals or not _MANAGER.fullmatch(manager) or not _FIRMWARE.fullmatch(firmware):
            raise ValueError(
                f"must be a comma-separated list of MANAGER=FIRMWARE (an FPGA manager's name such as fpga0, a file "
                f"name in the firmware directory such as base.bin), got {part!r}"
            )
        if manager in pairs:
            raise ValueError(f"names FPGA manager {manager!r} twice")
        pairs[manager] = firmware
    return tuple(pairs.items())


def parse_namespace(raw: str) -> str:
    value = raw.strip()
    if len(value) > 63 or not NAMESPACE.fullmatch(value):
        raise ValueError(f"must be a namespace name (lower-case letters, digits and '-'), got {raw!r}")
    return value


def parse_pod_field(pattern: str, what: str) -> Callable[[str], str]:
    """Parse a value of the downward API (the pod's name or UID): ``pattern``, or empty for 'not in a pod'."""
    compiled = re.compile(pattern)

    def parse(raw: str) -> str:
        value = raw.strip()
        if value and not compiled.fullmatch(value):
            raise ValueError(f"must be {what} or empty, got {raw!r}")
        return value

    return parse


def parse_listen(raw: str, off: str = " (empty: off)") -> ListenAddress | None:
    """HOST:PORT; empty is None unless ``off`` is empty (a required address)."""
    value = raw.strip()
    if not value and off:
        return None
    host, colon, port = value.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"must be HOST:PORT with a port from 0 to 65535{off}, got {raw!r}")
    host = host.removeprefix("[").removesuffix("]")
    return ListenAddress(host or "0.0.0.0", int(port))


def parse_required_listen(raw: str) -> ListenAddress | None:
    return parse_listen(raw, "")
