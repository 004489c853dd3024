"""Pulled bitstreams entering and leaving the node catalog, in the catalog's own on-disk format.

A puller downloads into a temp file inside the catalog directory and checks size and
sha256 itself; :meth:`PulledCatalog.adopt` then checks what only the file's format
tells (a GBS header's PR interface and accelerator id against the declaration),
renames the file to its catalog name and writes the record last, exactly as
``catalog add`` does. The record's ``source`` says where the file came from, which is
also what marks it as the cache's to evict; a local entry (no source) is never
removed here. Blocking: call through ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

from agent.errors import BitstreamFileError, CatalogError, PlatformMismatch
from agent.programming.atomicfile import fsync_directory, write_atomically
from agent.programming.catalog import RECORD_SUFFIX, Catalog, CatalogEntry, record_bytes, validate_name
from agent.programming.gbs import GBS_GUID, HEADER_FIXED_LEN, GbsFormatError, is_gbs, parse_gbs_header

#: The prefix of a pull's temp file in the catalog directory (``agent.bitstreams.download`` names them so).
PULL_TEMP_PREFIX = ".tmp-pull-"

logger = logging.getLogger(__name__)


class PulledCatalog:
    """The node catalog as the bitstream cache sees it: list, adopt a verified file, remove."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    @property
    def directory(self) -> Path:
        return self.catalog.directory

    def entries(self) -> list[CatalogEntry]:
        return self.catalog.list()

    def find(self, name: str) -> CatalogEntry | None:
        """The usable entry called ``name``, or None when there is none (or its record is unusable)."""
        try:
            return self.catalog.resolve(name)
        except CatalogError:
            return None

    def prepare(self) -> None:
        """Create the directory and remove the pulls' temp files a crash left behind (only those: a
        ``catalog add`` running now has its own temp file here)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in self.directory.glob(PULL_TEMP_PREFIX + "*"):
            path.unlink(missing_ok=True)

    def adopt(
        self, staged: Path, name: str, sha256: str, size: int, platform: str, accelerator_id: str, source: str
    ) -> CatalogEntry:
        """Move the verified temp file ``staged`` into the catalog as ``name``; all or nothing.

        ``staged`` must be in the catalog directory. A GBS file's header must name the
        declared platform and accelerator id (PlatformMismatch otherwise). The previous
        pulled entry of the name, if any, is replaced; a local one is refused. On any
        failure ``staged`` and everything this call made are removed.
        """
        installed: Path | None = None
        previous: CatalogEntry | None = None
        try:
            validate_name(name)
            if staged.parent != self.directory:
                raise BitstreamFileError(f"bitstream {name!r}: {staged} is not in the catalog {self.directory}")
            previous = self.find(name)
            if previous is not None and not previous.source:
                raise CatalogError(f"bitstream {name!r} is a local catalog entry; a pulled file does not replace it")
            suffix = _check_format(staged, name, platform, accelerator_id)
            installed = self.directory / f"{name}.{sha256[:12]}{suffix}"
            os.replace(staged, installed)
            fsync_directory(self.directory)
            entry = CatalogEntry(
                name=name,
                file=installed.name,
                size=size,
                sha256=sha256,
                platform=platform,
                accelerator_id=accelerator_id,
                added_at=datetime.now(UTC).isoformat(timespec="seconds"),
                source=source,
            )
            write_atomically(self.directory / (name + RECORD_SUFFIX), record_bytes(entry))
        except BaseException as exc:
            staged.unlink(missing_ok=True)
            if installed is not None and (previous is None or previous.file != installed.name):
                installed.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise BitstreamFileError(f"cannot add pulled bitstream {name!r}: {exc.strerror or exc}") from exc
            raise
        if previous is not None and previous.file != entry.file:
            (self.directory / previous.file).unlink(missing_ok=True)
        logger.info("bitstream catalog: added %s pulled from %s (%d bytes, sha256 %s)", name, source, size, sha256)
        return entry

    def remove(self, name: str) -> bool:
        """Remove the pulled entry ``name`` (record first, then file); False for a local or missing one."""
        entry = self.find(name)
        if entry is None or not entry.source:
            return False
        (self.directory / (name + RECORD_SUFFIX)).unlink(missing_ok=True)
        (self.directory / entry.file).unlink(missing_ok=True)
        fsync_directory(self.directory)
        logger.info("bitstream catalog: evicted %s (%d bytes, pulled from %s)", name, entry.size, entry.source)
        return True


def _check_format(path: Path, name: str, platform: str, accelerator_id: str) -> str:
    """The stored file's suffix; PlatformMismatch when a GBS header disagrees with the declaration."""
    with path.open("rb") as handle:
        head = handle.read(HEADER_FIXED_LEN)
        if not is_gbs(head):
            return ".bin"
        length = int.from_bytes(head[len(GBS_GUID) : HEADER_FIXED_LEN], "little")
        head += handle.read(length + 1)
    try:
        header = parse_gbs_header(head)
    except GbsFormatError as exc:
        raise BitstreamFileError(f"bitstream {name!r}: the pulled GBS file {exc}") from exc
    for declared, found, what in (
        (platform, header.interface_id, "platform"),
        (accelerator_id, header.accelerator_id, "accelerator id"),
    ):
        if declared != found:
            raise PlatformMismatch(
                f"bitstream {name!r}: the declared {what} {declared} differs from the GBS header's {found}"
            )
    return ".gbs"
