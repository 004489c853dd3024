"""The bitstream catalog: one directory (``--bitstream-dir``) of files and a JSON record ``<name>.json`` each.

Files are added atomically, the record written last, and checked again on every read for programming. A pulled
entry has a ``source`` (the cache's to evict); a pull never touches a local one. Blocking: ``asyncio.to_thread``."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from agent.errors import BitstreamFileError, BitstreamHashError, CatalogError, PlatformMismatch, UnknownBitstream, shown
from agent.files.atomic import StagedFile, fsync_directory, read_no_follow, write_atomically
from agent.files.bitstream import SCOPES, SLOT_SCOPE, copy_hashing, validate_name
from agent.programming.catalogentry import (
    FILE_NAME,
    GBS_SUFFIX,
    INSTALLED_FILE,
    RAW_SUFFIX,
    RECORD_SUFFIX,
    CatalogEntry,
    CatalogProblem,
    CatalogScan,
    FileDescription,
    describe_bitstream,
    entry_from_record,
    installed_name,
    normalize_given_id,
    record_bytes,
)
from agent.programming.gbs import GbsFormatError, is_gbs, mismatched_id, parse_gbs_header, read_gbs_header

#: The prefix of a pull's temp file in the catalog directory (:meth:`Catalog.stage` names them so).
PULL_TEMP_PREFIX = ".tmp-pull-"
#: A file no record names is an orphan once it is this old: an install writes its record right after it.
ORPHAN_AGE_S = 60.0

logger = logging.getLogger(__name__)


class Catalog:
    """The bitstream catalog in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # file name -> (file identity when it last matched, its sha256): an unchanged file is not hashed again
        self._verified: dict[str, tuple[tuple[int, ...], str]] = {}

    def scan(self) -> CatalogScan:
        """Read every record; a malformed one becomes a problem, never an exception."""
        entries: list[CatalogEntry] = []
        problems: list[CatalogProblem] = []
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return CatalogScan([], [])
        except OSError as exc:
            raise BitstreamFileError(f"cannot read the catalog {self.directory}: {exc.strerror}") from exc
        for record_name in names:
            if not record_name.endswith(RECORD_SUFFIX) or record_name.startswith("."):
                continue
            try:
                entry = self._load_record(record_name)
                self._check_file_present(entry)
            except BitstreamFileError as exc:
                problems.append(CatalogProblem(record_name, str(exc)))
                continue
            entries.append(entry)
        return CatalogScan(entries, problems)

    def list(self) -> list[CatalogEntry]:
        """Every usable entry, sorted by name; each malformed record is logged and skipped."""
        scan = self.scan()
        for problem in scan.problems:
            logger.warning("bitstream catalog: skipping %s: %s", problem.record, problem.reason)
        return scan.entries

    def resolve(self, name: str) -> CatalogEntry:
        """The entry called ``name``: InvalidBitstreamName, UnknownBitstream or BitstreamFileError."""
        validate_name(name)
        record = self.directory / (name + RECORD_SUFFIX)
        if not record.is_file() and not record.is_symlink():
            raise UnknownBitstream(f"bitstream {name!r} is not in the catalog {self.directory}")
        entry = self._load_record(name + RECORD_SUFFIX)
        self._check_file_present(entry)
        return entry

    def find(self, name: str) -> CatalogEntry | None:
        """The usable entry called ``name``, or None when there is none (or its record is unusable)."""
        try:
            return self.resolve(name)
        except CatalogError:
            return None

    def read_image(self, entry: CatalogEntry) -> bytes:
        """The bytes to program: the file checked against the record, without its GBS header."""
        if not FILE_NAME.fullmatch(entry.file):
            raise BitstreamFileError(f"bitstream {entry.name!r}: file {entry.file!r} is not a plain file name")
        path = self.directory / entry.file
        try:
            with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as handle:
                st = os.fstat(handle.fileno())
                data = handle.read()
        except OSError as exc:
            raise BitstreamFileError(f"bitstream {entry.name!r}: cannot read {path}: {_no_follow_reason(exc)}") from exc
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if self._verified.get(entry.file) != (identity, entry.sha256):
            actual = hashlib.sha256(data).hexdigest()
            if len(data) != entry.size or actual != entry.sha256:
                self._verified.pop(entry.file, None)
                raise BitstreamHashError(
                    f"bitstream {entry.name!r}: {path} does not match the catalog: expected "
                    f"{entry.size} bytes with sha256 {entry.sha256}, found {len(data)} bytes with sha256 {actual}"
                )
            self._verified[entry.file] = (identity, entry.sha256)
        if not is_gbs(data):
            return data
        try:
            header = parse_gbs_header(data)
        except GbsFormatError as exc:
            raise BitstreamFileError(f"bitstream {entry.name!r}: GBS file {path} {exc}") from exc
        return data[header.payload_offset :]

    def _load_record(self, record_name: str) -> CatalogEntry:
        path = self.directory / record_name
        try:
            data = json.loads(read_no_follow(path).decode("utf-8"))
        except OSError as exc:
            raise BitstreamFileError(f"cannot read record {path}: {_no_follow_reason(exc)}") from exc
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BitstreamFileError(f"record {path} is not valid JSON: {exc}") from exc
        try:
            return entry_from_record(data, record_name)
        except ValueError as exc:
            raise BitstreamFileError(f"record {path} {exc}") from exc

    def _check_file_present(self, entry: CatalogEntry) -> None:
        path = self.directory / entry.file
        if path.is_symlink():
            raise BitstreamFileError(f"bitstream {entry.name!r}: file {path} is a symbolic link, which is refused")
        if not path.is_file():
            raise BitstreamFileError(f"bitstream {entry.name!r}: file {path} is missing")

    def add(
        self,
        source: Path,
        name: str,
        platform: str | None = None,
        accelerator_id: str | None = None,
        replace: bool = False,
        scope: str = SLOT_SCOPE,
    ) -> CatalogEntry:
        """Copy ``source`` into the catalog as ``name``, all or nothing; an existing name only if ``replace``.
        A GBS header gives the ids (given ones must agree); other files need both given."""
        validate_name(name)
        if scope not in SCOPES:
            raise CatalogError(f"scope {shown(scope)} is not one of {', '.join(SCOPES)}")
        given_platform = normalize_given_id(platform, "platform")
        given_accelerator = normalize_given_id(accelerator_id, "accelerator id", accelerator=True)
        previous = self._previous_entry(name, replace)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with source.open("rb") as source_stream, StagedFile(self.directory) as staged:
                size, sha256 = copy_hashing(source_stream, staged.stream)
                if size == 0:
                    raise BitstreamFileError(f"cannot add {source} as {name!r}: the file is empty")
                description = describe_bitstream(staged.stream, source, given_platform, given_accelerator)
                entry = self._install(staged, name, size, sha256, description, previous=previous, scope=scope)
        except OSError as exc:
            raise BitstreamFileError(f"cannot add {source} as {name!r}: {_reason(exc)}") from exc
        logger.info(
            "bitstream catalog: added %s from %s (%d bytes, sha256 %s, platform %s, accelerator %s)",
            name,
            source,
            size,
            sha256,
            entry.platform,
            entry.accelerator_id,
        )
        return entry

    def _install(
        self,
        staged: StagedFile,
        name: str,
        size: int,
        sha256: str,
        description: FileDescription,
        *,
        source: str = "",
        previous: CatalogEntry | None = None,
        scope: str = SLOT_SCOPE,
    ) -> CatalogEntry:
        """Rename the checked ``staged`` file to ``<name>.<sha256 prefix><suffix>`` and write its record last;
        all or nothing. ``previous``: the entry replaced, whose file goes once the new record is written."""
        installed = staged.install(installed_name(name, sha256, description.suffix))
        entry = CatalogEntry(
            name=name,
            file=installed.name,
            size=size,
            sha256=sha256,
            platform=description.platform,
            accelerator_id=description.accelerator_id,
            added_at=datetime.now(UTC).isoformat(timespec="seconds"),
            source=source,
            scope=scope,
        )
        try:
            write_atomically(self.directory / (name + RECORD_SUFFIX), record_bytes(entry))
        except BaseException:
            if previous is None or previous.file != installed.name:
                installed.unlink(missing_ok=True)
            raise
        if previous is not None and previous.file != entry.file:
            (self.directory / previous.file).unlink(missing_ok=True)
        return entry

    def prepare(self, files: Mapping[str, str]) -> None:
        """Create the directory and remove crash leftovers: pull temp files and old installed files that no usable
        entry names (``files``: name -> file of each); a record that does not parse keeps its name's files."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in self.directory.glob(PULL_TEMP_PREFIX + "*"):
            path.unlink(missing_ok=True)
        limit = time.time() - ORPHAN_AGE_S
        orphans = []
        for path in sorted(self.directory.iterdir()):
            match = INSTALLED_FILE.fullmatch(path.name)
            if match is None:
                continue
            name = match["name"]
            if files.get(name) == path.name:
                continue
            if name not in files and (self.directory / (name + RECORD_SUFFIX)).exists():
                continue  # its record does not parse: an operator's to mend
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mtime < limit:
                path.unlink(missing_ok=True)
                orphans.append(path.name)
        if orphans:
            logger.warning(
                "bitstream catalog: removed %d file(s) no record names, left by an interrupted install or removal: %s",
                len(orphans),
                ", ".join(orphans),
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
        """Install the verified pulled ``staged`` file as ``name``, all or nothing (the owner of ``staged`` removes
        it). PlatformMismatch if a GBS header disagrees; a previous pulled entry is replaced, a local one refused."""
        validate_name(name)
        if staged.directory != self.directory:
            raise BitstreamFileError(f"bitstream {name!r}: a file staged in {staged.directory} is not in the catalog")
        previous = self.find(name)
        if previous is not None and not previous.source:
            raise CatalogError(f"bitstream {name!r} is a local catalog entry; a pulled file does not replace it")
        try:
            description = _check_pulled_format(staged, name, platform, accelerator_id)
            entry = self._install(
                staged, name, size, sha256, description, source=source, previous=previous, scope=scope
            )
        except OSError as exc:
            raise BitstreamFileError(f"cannot add pulled bitstream {name!r}: {_reason(exc)}") from exc
        logger.info("bitstream catalog: added %s pulled from %s (%d bytes, sha256 %s)", name, source, size, sha256)
        return entry

    def remove(self, entry: CatalogEntry) -> None:
        """Take ``entry`` out of the catalog: its record first, then its file."""
        (self.directory / (entry.name + RECORD_SUFFIX)).unlink(missing_ok=True)
        (self.directory / entry.file).unlink(missing_ok=True)
        fsync_directory(self.directory)

    def evict(self, name: str) -> bool:
        """Remove the pulled entry ``name``; False for a local or missing one."""
        entry = self.find(name)
        if entry is None or not entry.source:
            return False
        self.remove(entry)
        logger.info("bitstream catalog: evicted %s (%d bytes, pulled from %s)", name, entry.size, entry.source)
        return True

    def _previous_entry(self, name: str, replace: bool) -> CatalogEntry | None:
        if not (self.directory / (name + RECORD_SUFFIX)).exists():
            return None
        if not replace:
            raise CatalogError(
                f"bitstream {name!r} is already in the catalog {self.directory}; "
                "replace it explicitly (--replace) to overwrite it"
            )
        try:
            return self._load_record(name + RECORD_SUFFIX)
        except BitstreamFileError:
            return None  # a malformed record is simply overwritten


def _check_pulled_format(staged: StagedFile, name: str, platform: str, accelerator_id: str) -> FileDescription:
    """The pulled file's description; PlatformMismatch when a GBS header disagrees with the declaration."""
    try:
        header = read_gbs_header(staged.stream)
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


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _no_follow_reason(exc: OSError) -> str:
    return "it is a symbolic link, which is refused" if exc.errno == errno.ELOOP else _reason(exc)
