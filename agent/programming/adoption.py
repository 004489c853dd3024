"""Pulled bitstreams entering and leaving the node catalog, in the catalog's own on-disk format.

A pull writes into a temp file staged in the catalog directory; :meth:`PulledCatalog.adopt` checks a GBS
header against the declaration and installs the file as ``catalog add`` does. A record's ``source`` marks
it as pulled (the cache's to evict); a local entry is never removed here. Blocking: use ``asyncio.to_thread``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

from agent.errors import BitstreamFileError, CatalogError, PlatformMismatch
from agent.files.atomic import StagedFile
from agent.files.bitstream import validate_name
from agent.programming.catalog import Catalog
from agent.programming.catalogentry import GBS_SUFFIX, RAW_SUFFIX, SLOT_SCOPE, CatalogEntry, FileDescription
from agent.programming.gbs import GbsFormatError, mismatched_id, read_gbs_header

#: The prefix of a pull's temp file in the catalog directory (:meth:`PulledCatalog.stage` names them so).
PULL_TEMP_PREFIX = ".tmp-pull-"
#: A file no record names is an orphan once it is this old: an install writes its record right after it.
ORPHAN_AGE_S = 60.0

logger = logging.getLogger(__name__)


class EntryFile(Protocol):
    """A catalog entry as far as clearing up needs it: its name and its file."""

    @property
    def name(self) -> str: ...
    @property
    def file(self) -> str: ...


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

    def prepare(self, entries: Sequence[EntryFile]) -> None:
        """Create the directory and remove crash leftovers: pull temp files (not ``catalog add``'s) and
        bitstream files no record in ``entries`` (the catalog as just read) names."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in self.directory.glob(PULL_TEMP_PREFIX + "*"):
            path.unlink(missing_ok=True)
        orphans = self.catalog.orphans({entry.name: entry.file for entry in entries}, ORPHAN_AGE_S)
        for path in orphans:
            path.unlink(missing_ok=True)
        if orphans:
            logger.warning(
                "bitstream catalog: removed %d file(s) no record names, left by an interrupted install or removal: %s",
                len(orphans),
                ", ".join(path.name for path in orphans),
            )

    def stage(self) -> StagedFile:
        """A new temp file in the catalog directory for a pull to write into; removed unless adopted."""
        return StagedFile(self.directory, mode=0o600, prefix=PULL_TEMP_PREFIX)

    def adopt(
        self,
        staged: StagedFile,
        name: str,
        sha256: str,
        size: int,
        platform: str,
        accelerator_id: str,
        source: str,
        scope: str = SLOT_SCOPE,
    ) -> CatalogEntry:
        """Install the verified ``staged`` file as ``name``, all or nothing (the owner of ``staged`` removes it).

        PlatformMismatch if a GBS header disagrees; a previous pulled entry is replaced, a local one refused."""
        validate_name(name)
        if staged.directory != self.directory:
            raise BitstreamFileError(f"bitstream {name!r}: a file staged in {staged.directory} is not in the catalog")
        previous = self.find(name)
        if previous is not None and not previous.source:
            raise CatalogError(f"bitstream {name!r} is a local catalog entry; a pulled file does not replace it")
        try:
            description = _check_format(staged.stream, name, platform, accelerator_id)
            entry = self.catalog.install(
                staged, name, size, sha256, description, source=source, previous=previous, scope=scope
            )
        except OSError as exc:
            raise BitstreamFileError(f"cannot add pulled bitstream {name!r}: {exc.strerror or exc}") from exc
        logger.info("bitstream catalog: added %s pulled from %s (%d bytes, sha256 %s)", name, source, size, sha256)
        return entry

    def remove(self, name: str) -> bool:
        """Remove the pulled entry ``name`` (record first, then file); False for a local or missing one."""
        entry = self.find(name)
        if entry is None or not entry.source:
            return False
        self.catalog.remove(entry)
        logger.info("bitstream catalog: evicted %s (%d bytes, pulled from %s)", name, entry.size, entry.source)
        return True


def _check_format(stream: BinaryIO, name: str, platform: str, accelerator_id: str) -> FileDescription:
    """The stored file's description; PlatformMismatch when a GBS header disagrees with the declaration."""
    try:
        header = read_gbs_header(stream)
    except GbsFormatError as exc:
        raise BitstreamFileError(f"bitstream {name!r}: the pulled GBS file {exc}") from exc
    if header is None:
        return FileDescription(platform, accelerator_id, RAW_SUFFIX)
    mismatch = mismatched_id(header, platform, accelerator_id)
    if mismatch is not None:
        what, declared, found = mismatch
        raise PlatformMismatch(
            f"bitstream {name!r}: the declared {what} {declared} differs from the GBS header's {found}"
        )
    return FileDescription(platform, accelerator_id, GBS_SUFFIX)
