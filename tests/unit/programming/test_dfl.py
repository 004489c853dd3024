"""DflProgrammer up to the system call: a regular file as the FME node, a recording ioctl."""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import errno
import logging
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.programming.dfl import DflProgrammer
from agent.slots.model import DeviceNode, Health, Slot, make_slot_id
from tests.unit.programming.cardlocks import busy

IMAGE = bytes(range(256)) * 16 + b"tail"
ACCELERATOR = "d8424dc4a4a3c413f89e433683f9040b"
# The test's own reading of fpga-dfl.h: _IO(0xB6, 0x80 + 0) on asm-generic architectures,
# struct {u32 argsz, flags, port_id, buffer_size; u64 buffer_address} in native byte order.
PORT_PR_REQUEST = (0xB6 << 8) | 0x80
PORT_PR_STRUCT = struct.Struct("=IIIIQ")
THREAD_WAIT_S = 10.0  # safety net so a broken test fails instead of hanging; never asserted on


@dataclass(frozen=True)
class IoctlCall:
    """One recorded call, decoded while the caller's buffer was still alive."""

    device: tuple[int, int]
    request: int
    argsz: int
    flags: int
    port_id: int
    buffer_size: int
    image: bytes


class FakeFme:
    """The kernel side: records each PR ioctl; can fail, or hold every call until released."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, errors: dict[int, int] | None = None, hold: bool = False
    ) -> None:
        self.calls: list[IoctlCall] = []
        self.events: list[tuple[str, str, int]] = []
        self.errors = errors or {}  # port id -> errno the "kernel" returns
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self._loop = loop
        self._lock = threading.Lock()
        self._entered: dict[tuple[str, int], asyncio.Event] = {}
        self.active: dict[str, int] = {}
        self.overlaps = 0

    def entered(self, node: Path, port: int) -> asyncio.Event:
        return self._entered.setdefault((str(node), port), asyncio.Event())

    def __call__(self, fd: int, request: int, argument: bytearray) -> int:
        assert isinstance(argument, bytearray)
        argsz, flags, port_id, size, address = PORT_PR_STRUCT.unpack(bytes(argument))
        node = os.readlink(f"/proc/self/fd/{fd}")
        stat = os.fstat(fd)
        with self._lock:
            self.active[node] = self.active.get(node, 0) + 1
            if self.active[node] > 1:
                self.overlaps += 1
            self.events.append(("enter", node, port_id))
            self.calls.append(
                IoctlCall(
                    (stat.st_dev, stat.st_ino), request, argsz, flags, port_id, size, ctypes.string_at(address, size)
                )
            )
        event = self.entered(Path(node), port_id)
        self._loop.call_soon_threadsafe(event.set)
        try:
            if not self.gate.wait(THREAD_WAIT_S):
                raise AssertionError("test never released the FME")
            if port_id in self.errors:
                code = self.errors[port_id]
                raise OSError(code, os.strerror(code))
            return 0
        finally:
            with self._lock:
                self.active[node] -= 1
                self.events.append(("exit", node, port_id))


def dfl_slot(fme: Path, port: int = 0, card: str = "0000:3b:00.0", region: str | None = None) -> Slot:
    region = region if region is not None else f"port{port}"
    return Slot(
        id=make_slot_id(card, region),
        card=card,
        region=region,
        numa=0,
        device_nodes=(DeviceNode(f"/dev/dfl-port.{port}", f"/dev/dfl-port.{port}"),),
        platform="69528db6eb31577a8c3668f9faa081f6",
        loaded=None,
        health=Health.HEALTHY,
        backend="dfl",
        control_node=str(fme),
    )


@pytest.fixture
def fme_nodes(tmp_path: Path) -> list[Path]:
    """Two cards' FME nodes: regular files standing in for /dev/dfl-fme.N."""
    nodes = [tmp_path / f"dfl-fme.{n}" for n in range(2)]
    for node in nodes:
        node.write_bytes(b"")
    return nodes


@pytest.fixture
def fme(fme_nodes: list[Path]) -> Path:
    return fme_nodes[0]


def device_of(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_dev, stat.st_ino


def open_fds_to(path: Path) -> list[int]:
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == str(path):
                found.append(int(name))
        except OSError:
            continue
    return found


@pytest.fixture
def no_fd_leak(fme_nodes: list[Path]) -> Iterator[None]:
    yield
    for node in fme_nodes:
        assert open_fds_to(node) == [], f"{node} left open"


async def test_port_pr_ioctl_on_the_fme(fme: Path, no_fd_leak: None) -> None:
    kernel = FakeFme(asyncio.get_running_loop())
    took = await DflProgrammer(ioctl=kernel).program(dfl_slot(fme, port=2), IMAGE, ACCELERATOR, 5.0)
    assert took >= 0.0
    (call,) = kernel.calls
    assert call.device == device_of(fme)
    assert call.request == PORT_PR_REQUEST
    assert (call.argsz, call.flags, call.port_id, call.buffer_size) == (PORT_PR_STRUCT.size, 0, 2, len(IMAGE))
    assert call.image == IMAGE


@pytest.mark.parametrize(
    ("code", "text"),
    [
        pytest.param(errno.EBUSY, "EBUSY (Device or resource busy): the port or the FME is in use", id="EBUSY"),
        pytest.param(errno.EINVAL, "EINVAL (Invalid argument): the driver rejected the request", id="EINVAL"),
        pytest.param(errno.EIO, "EIO (Input/output error): the card reported a partial-reconfiguration", id="EIO"),
        pytest.param(errno.ENODEV, "ENODEV (No such device): the card is gone", id="ENODEV"),
        pytest.param(errno.EFAULT, "EFAULT (Bad address)", id="EFAULT-no-hint"),
    ],
)
async def test_ioctl_errors_name_slot_node_and_errno(fme: Path, no_fd_leak: None, code: int, text: str) -> None:
    kernel = FakeFme(asyncio.get_running_loop(), errors={1: code})
    slot = dfl_slot(fme, port=1)
    with pytest.raises(ProgrammingError) as info:
        await DflProgrammer(ioctl=kernel).program(slot, IMAGE, ACCELERATOR, 5.0)
    assert type(info.value) is ProgrammingError
    message = str(info.value)
    assert message.startswith(f"slot {slot.id}: programming {ACCELERATOR} through {fme} port 1 failed: ")
    assert text in message
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == code


async def test_missing_fme_node(tmp_path: Path) -> None:
    kernel = FakeFme(asyncio.get_running_loop())
    slot = dfl_slot(tmp_path / "dfl-fme.9")
    with pytest.raises(ProgrammingError, match=r"dfl-fme\.9 port 0 failed: ENOENT \(No such file or directory\)"):
        await DflProgrammer(ioctl=kernel).program(slot, IMAGE, ACCELERATOR, 5.0)
    assert kernel.calls == []


@pytest.mark.parametrize(
    ("slot_changes", "image", "message"),
    [
        pytest.param({"region": "region0"}, IMAGE, r"region 'region0' is not a DFL port \(port<N>\)", id="not-a-port"),
        pytest.param({"region": "port"}, IMAGE, r"region 'port' is not a DFL port", id="port-without-number"),
        pytest.param({"control_node": ""}, IMAGE, r"no FME device node to program it through", id="no-fme"),
        pytest.param({}, b"", r"bitstream image is empty", id="empty-image"),
    ],
)
async def test_refused_before_the_kernel(fme: Path, slot_changes: dict[str, str], image: bytes, message: str) -> None:
    kernel = FakeFme(asyncio.get_running_loop())
    slot = dataclasses.replace(dfl_slot(fme), **slot_changes)  # type: ignore[arg-type]
    with pytest.raises(ProgrammingError, match=rf"^slot {slot.id}: {message}"):
        await DflProgrammer(ioctl=kernel).program(slot, image, ACCELERATOR, 5.0)
    assert kernel.calls == []


async def test_timeout_keeps_the_card_busy_until_the_kernel_returns(fme: Path, no_fd_leak: None) -> None:
    kernel = FakeFme(asyncio.get_running_loop(), hold=True)
    programmer = DflProgrammer(ioctl=kernel)
    first, second = dfl_slot(fme, port=0), dfl_slot(fme, port=1)
    expected = (
        rf"^slot {first.id}: programming {ACCELERATOR} through {fme} did not finish within 0\.1 s; "
        r"the card stays busy until the kernel returns$"
    )
    with pytest.raises(ProgrammingTimeout, match=expected):
        await programmer.program(first, IMAGE, ACCELERATOR, 0.05)
    assert busy(programmer._cards, str(fme))

    later = asyncio.create_task(programmer.program(second, IMAGE, ACCELERATOR, 5.0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not later.done()
    assert [event[0] for event in kernel.events] == ["enter"]  # the second waits for the card

    kernel.gate.set()  # the kernel returns from the first call
    await later
    assert [(kind, port) for kind, _, port in kernel.events] == [("enter", 0), ("exit", 0), ("enter", 1), ("exit", 1)]
    assert kernel.overlaps == 0
    assert not busy(programmer._cards, str(fme))


async def test_waiting_for_a_busy_card_counts_against_the_deadline(fme: Path, no_fd_leak: None) -> None:
    kernel = FakeFme(asyncio.get_running_loop(), hold=True)
    programmer = DflProgrammer(ioctl=kernel)
    first = asyncio.create_task(programmer.program(dfl_slot(fme, port=0), IMAGE, ACCELERATOR, 30.0))
    await kernel.entered(fme, 0).wait()
    second = dfl_slot(fme, port=1)
    expected = rf"^slot {second.id}: card 0000:3b:00\.0 was busy with another programming operation through {fme}"
    with pytest.raises(ProgrammingTimeout, match=expected):
        await programmer.program(second, IMAGE, ACCELERATOR, 0.05)
    kernel.gate.set()
    await first
    assert [call.port_id for call in kernel.calls] == [0]


async def test_late_kernel_failure_is_logged(fme: Path, caplog: pytest.LogCaptureFixture, no_fd_leak: None) -> None:
    kernel = FakeFme(asyncio.get_running_loop(), hold=True, errors={0: errno.EIO})
    programmer = DflProgrammer(ioctl=kernel)
    with caplog.at_level(logging.WARNING, logger="agent.programming.cardlock"):
        with pytest.raises(ProgrammingTimeout):
            await programmer.program(dfl_slot(fme, port=0), IMAGE, ACCELERATOR, 0.05)
        kernel.gate.set()
        # The next operation gets the card only once the late call has returned.
        await programmer.program(dfl_slot(fme, port=1), IMAGE, ACCELERATOR, 5.0)
    late = [message for message in caplog.messages if "late hardware call" in message]
    assert late == [f"{fme}: a late hardware call failed: [Errno {errno.EIO}] {os.strerror(errno.EIO)}"]


async def test_one_operation_at_a_time_per_card(fme: Path, no_fd_leak: None) -> None:
    kernel = FakeFme(asyncio.get_running_loop(), hold=True)
    programmer = DflProgrammer(ioctl=kernel)
    first = asyncio.create_task(programmer.program(dfl_slot(fme, port=0), IMAGE, ACCELERATOR, 30.0))
    await kernel.entered(fme, 0).wait()
    second = asyncio.create_task(programmer.program(dfl_slot(fme, port=1), IMAGE, ACCELERATOR, 30.0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not second.done()
    assert not kernel.entered(fme, 1).is_set()
    kernel.gate.set()
    await asyncio.gather(first, second)
    assert [(kind, port) for kind, _, port in kernel.events] == [("enter", 0), ("exit", 0), ("enter", 1), ("exit", 1)]
    assert kernel.overlaps == 0


async def test_different_cards_in_parallel(fme_nodes: list[Path], no_fd_leak: None) -> None:
    kernel = FakeFme(asyncio.get_running_loop(), hold=True)
    programmer = DflProgrammer(ioctl=kernel)
    slots = [dfl_slot(node, card=f"0000:{n}b:00.0") for n, node in enumerate(fme_nodes)]
    tasks = [asyncio.create_task(programmer.program(slot, IMAGE, ACCELERATOR, 30.0)) for slot in slots]
    # Both cards are inside the kernel at the same time before either is released.
    await asyncio.gather(*(kernel.entered(node, 0).wait() for node in fme_nodes))
    assert all(busy(programmer._cards, str(node)) for node in fme_nodes)
    kernel.gate.set()
    await asyncio.gather(*tasks)
    assert sorted(call.device for call in kernel.calls) == sorted(device_of(node) for node in fme_nodes)
