"""OCI references ``registry[:port]/repository(:tag|@sha256:<hex>|:tag@sha256:<hex>)``, registry explicit.

The pattern is the CRD's (daemonset/fpgabitstream-crd.yaml); a test keeps them equal."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.errors import CatalogError, shown

_LABEL = r"[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?"
_PORT = r"[0-9]{1,5}"
_HOST = rf"((localhost|\[[0-9a-fA-F:.]+\]|{_LABEL}(\.{_LABEL})+)(:{_PORT})?|{_LABEL}:{_PORT})"
_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
#: The whole reference, as the CRD's pattern for spec.source.oci.
REFERENCE_PATTERN = rf"^{_HOST}/{_COMPONENT}(/{_COMPONENT})*(:{_TAG}(@{_DIGEST})?|@{_DIGEST})$"
_REFERENCE = re.compile(REFERENCE_PATTERN)
MAX_REFERENCE_LEN = 1024


@dataclass(frozen=True, slots=True)
class Reference:
    """A parsed OCI reference: where the registry is, which repository, which manifest."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def manifest(self) -> str:
        """What to ask the registry for: the digest if given (it pins the content), else the tag."""
        return self.digest or self.tag or ""

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_reference(text: str) -> Reference:
    """Parse ``text``; raise CatalogError naming it and the expected form."""
    if not isinstance(text, str) or len(text) > MAX_REFERENCE_LEN or not _REFERENCE.fullmatch(text):
        raise CatalogError(
            f"invalid OCI reference {shown(text)}: expected registry[:port]/repository:tag or "
            "registry[:port]/repository@sha256:<64 hex digits>, with lower-case repository path components"
        )
    registry, _, rest = text.partition("/")
    rest, _, digest = rest.partition("@")
    repository, _, tag = rest.partition(":")
    return Reference(registry, repository, tag or None, digest or None)
