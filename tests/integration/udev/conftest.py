"""The udev test bed fixture: real libudev (through pyudev) over umockdev's fake sysfs.

These tests must run under ``umockdev-wrapper``; without it they fail (never skip),
because pyudev would silently read the host's real /sys instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.udevbed import UdevTestbed, require_umockdev


@pytest.fixture
def udevbed() -> Iterator[UdevTestbed]:
    """An empty test bed for this test only; destroyed (with its fake root) afterwards."""
    require_umockdev()
    bed = UdevTestbed()
    try:
        yield bed
    finally:
        bed.close()
