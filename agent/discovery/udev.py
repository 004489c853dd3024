"""The only module that talks to libudev (through pyudev): devices as plain :class:`DeviceRecord`
snapshots, and a netlink monitor bridged into asyncio."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyudev

from agent.errors import DiscoveryError
from agent.files.bitstream import normalize_id128

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """What a backend needs to know about one udev device."""

    sys_path: str
    sys_name: str
    driver: str | None
    device_node: str | None
    #: the requested attributes, decoded and stripped; None when absent or unreadable
    attributes: dict[str, str | None]
    #: sys_paths of the parent devices, nearest first
    ancestors: tuple[str, ...]

    def attr(self, name: str) -> str | None:
        return self.attributes.get(name)

    def id128(self, name: str, what: str = "") -> str:
        """Attribute ``name`` as a 128-bit id (dashes allowed) in 32 lower-case hex digits; ValueError naming
        ``what`` (default: ``name``)."""
        raw, what = self.attributes.get(name), what or name
        if raw is None:
            raise ValueError(f"{what} is missing")
        value = normalize_id128(raw)
        if value is None:
            shown = raw if len(raw) <= 40 else raw[:40] + "..."
            raise ValueError(f"{what} {shown!r} is not 32 hex digits")
        return value


def _read_attribute(device: pyudev.Device, name: str) -> str | None:
    try:
        raw = device.attributes.get(name)
        return None if raw is None else bytes(raw).decode("utf-8", errors="strict").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _record(device: pyudev.Device, attributes: Sequence[str]) -> DeviceRecord:
    ancestors = []
    parent = device.parent
    while parent is not None:
        ancestors.append(parent.sys_path)
        parent = parent.parent
    return DeviceRecord(
        sys_path=device.sys_path,
        sys_name=device.sys_name,
        driver=device.driver or device.properties.get("DRIVER"),
        device_node=device.device_node,
        attributes={name: _read_attribute(device, name) for name in attributes},
        ancestors=tuple(ancestors),
    )


def list_devices(
    subsystem: str, attributes: Sequence[str] = (), name: re.Pattern[str] | None = None
) -> list[DeviceRecord]:
    """Devices of ``subsystem`` (whose sys_name matches ``name``) with the named attributes read (blocking)."""
    try:
        context = pyudev.Context()
        return [
            _record(device, attributes)
            for device in context.list_devices(subsystem=subsystem)
            if name is None or name.fullmatch(device.sys_name)
        ]
    except (OSError, pyudev.DeviceNotFoundError) as exc:
        raise DiscoveryError(f"udev enumeration of subsystem {subsystem!r} failed: {exc}") from exc


class UdevMonitor:
    """Async context manager: :meth:`changed` waits for a uevent of some subsystems (or for lost ones)."""

    def __init__(self, subsystems: Iterable[str] | None, backend: str) -> None:
        """Wake on events of ``subsystems`` (None: of every subsystem); ``backend`` names the source in logs."""
        self._subsystems = None if subsystems is None else frozenset(subsystems)
        self._backend = backend
        self._changed = asyncio.Event()
        self._monitor: pyudev.Monitor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> UdevMonitor:
        try:
            monitor = pyudev.Monitor.from_netlink(pyudev.Context())
            monitor.start()
        except OSError as exc:
            raise DiscoveryError(f"cannot open the udev monitor: {exc}") from exc
        self._monitor = monitor
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(monitor.fileno(), self._on_readable)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._monitor is not None and self._loop is not None:
            self._loop.remove_reader(self._monitor.fileno())
            self._monitor = None  # pyudev has no close(); the last reference closes the socket

    def _on_readable(self) -> None:
        assert self._monitor is not None
        while True:
            try:
                device = self._monitor.poll(timeout=0)
            except OSError as exc:
                logger.warning("udev monitor read failed (%s): rescanning", exc)
                self._changed.set()
                return
            if device is None:
                return
            if self._subsystems is None or device.subsystem in self._subsystems:
                logger.debug("backend %s: uevent %s %s", self._backend, device.action or "", device.sys_path)
                self._changed.set()

    async def changed(self) -> None:
        """Wait until a uevent (or a lost one) came since the last call."""
        await self._changed.wait()
        self._changed.clear()
