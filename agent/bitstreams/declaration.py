"""A bitstream as the cluster declares it (an FpgaBitstream object), and the credentials to pull it.

:func:`parse_declaration` checks the object again as the CRD does and normalises its ids as the
catalog stores them; :func:`redacted_url` is what messages show of any URL."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agent.bitstreams.reference import Reference, parse_reference
from agent.errors import CatalogError, shown
from agent.files.bitstream import SCOPES, SLOT_SCOPE, is_sha256, normalize_id128, validate_name

API_GROUP = "example.com"
API_VERSION = "v1alpha1"
KIND = "FpgaBitstream"

MAX_ID_LEN = 256
MAX_URL_LEN = 2048
_PRINTABLE_ID = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")
#: spec.acceleratorId, as the CRD's pattern: printable ASCII that does not start with '-' (a tool option).
ACCELERATOR_ID_PATTERN = r"^[\x21-\x2c\x2e-\x7e]([\x20-\x7e]*[\x21-\x7e])?$"
_ACCELERATOR_ID = re.compile(ACCELERATOR_ID_PATTERN)
#: spec.source.https, as the CRD's pattern: host[:port] (no userinfo), then a path of printable ASCII.
URL_PATTERN = r"^https://[A-Za-z0-9\[][-A-Za-z0-9._~%:\[\]]*(/[!-~]*)?$"
_URL = re.compile(URL_PATTERN)
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/]*@")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SECRET = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True, slots=True)
class Credentials:
    """Pull credentials from a Secret: username and password (basic auth), or a bearer token."""

    username: str | None = None
    password: str | None = None
    token: str | None = None

    def __repr__(self) -> str:  # never print a password or token
        return f"Credentials(username={self.username!r}, password=***, token=***)"


@dataclass(frozen=True, slots=True)
class Declaration:
    """One FpgaBitstream: what the file is, and where it comes from (exactly one of oci, https)."""

    name: str
    platform: str
    accelerator_id: str
    sha256: str
    size: int
    oci: Reference | None = None
    https: str | None = None
    pull_secret: str | None = None
    prefetch: bool = False
    #: ``slot`` or ``card`` (an image for a whole card), as a catalog entry's scope
    scope: str = SLOT_SCOPE

    @property
    def host(self) -> str:
        """The host the file comes from: the registry (``host[:port]``) or the URL's host."""
        if self.oci is not None:
            return self.oci.registry
        return str(self.https).removeprefix("https://").split("/", 1)[0].rpartition("@")[2]

    @property
    def source(self) -> str:
        """The source as one string, for messages (a URL without userinfo)."""
        return f"oci://{self.oci}" if self.oci is not None else redacted_url(str(self.https))


def redacted_url(url: str) -> str:
    """``url`` as messages show it: any userinfo (``user:password@``) replaced by ``***@``."""
    return _USERINFO.sub(r"\1***@", url)


def validate_url(url: object) -> str:
    """``url`` if it is an https:// URL the agent pulls from; CatalogError naming the problem, never the userinfo."""
    if not isinstance(url, str):
        raise CatalogError(f"spec.source.https {shown(url)} is not a string")
    what = f"spec.source.https {shown(redacted_url(url))}"
    if _USERINFO.match(url):
        raise CatalogError(f"{what} carries credentials (user:password@); put them in the pull Secret")
    if _CONTROL.search(url):
        raise CatalogError(f"{what} contains control characters")
    if len(url) > MAX_URL_LEN or not _URL.fullmatch(url):
        raise CatalogError(f"{what} is not an https:// URL of at most {MAX_URL_LEN} printable ASCII characters")
    return url


def validate_secret_name(name: object) -> str:
    """``name`` if it can name a Secret; CatalogError naming it otherwise."""
    if not isinstance(name, str) or len(name) > 253 or not _SECRET.fullmatch(name):
        raise CatalogError(f"pull Secret name {shown(name)} is not a valid Secret name")
    return name


def normalize_id(raw: object, what: str, accelerator: bool = False) -> str:
    """A platform or (``accelerator``) accelerator id checked as the CRD does, normalised as the catalog stores it."""
    if not isinstance(raw, str) or len(raw) > MAX_ID_LEN or not _PRINTABLE_ID.fullmatch(raw):
        raise CatalogError(f"{what} {shown(raw)} must be 1 to {MAX_ID_LEN} printable ASCII characters")
    if accelerator and not _ACCELERATOR_ID.fullmatch(raw):
        raise CatalogError(f"{what} {shown(raw)} starts with '-', which a vendor tool would read as an option")
    return normalize_id128(raw) or raw


def parse_declaration(obj: Any) -> Declaration:
    """An FpgaBitstream object as a Declaration; CatalogError naming the object and the bad field."""
    if not isinstance(obj, dict):
        raise CatalogError(f"an {KIND} must be an object, got {shown(obj)}")
    metadata = obj.get("metadata")
    name = validate_name(metadata.get("name") if isinstance(metadata, dict) else None)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise CatalogError(f"{KIND} {name}: spec is missing")
    try:
        return _parse_spec(name, spec)
    except CatalogError as exc:
        raise CatalogError(f"{KIND} {name}: {exc}") from None


def _parse_spec(name: str, spec: dict[str, Any]) -> Declaration:
    sha256 = spec.get("sha256")
    if not is_sha256(sha256):
        raise CatalogError(f"spec.sha256 {shown(sha256)} is not 64 lower-case hex digits")
    size = spec.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise CatalogError(f"spec.size {shown(size)} is not a positive integer")
    prefetch = spec.get("prefetch", False)
    if not isinstance(prefetch, bool):
        raise CatalogError(f"spec.prefetch {shown(prefetch)} is not a boolean")
    scope = spec.get("scope", SLOT_SCOPE)
    if scope not in SCOPES:
        raise CatalogError(f"spec.scope {shown(scope)} is not one of {', '.join(SCOPES)}")
    source = spec.get("source")
    if not isinstance(source, dict):
        raise CatalogError("spec.source is missing")
    oci, https = source.get("oci"), source.get("https")
    if (oci is None) == (https is None):
        raise CatalogError("spec.source needs exactly one of oci and https")
    if https is not None:
        validate_url(https)
    pull_secret = source.get("pullSecret")
    if pull_secret is not None:
        try:
            validate_secret_name(pull_secret)
        except CatalogError as exc:
            raise CatalogError(f"spec.source.pullSecret: {exc}") from None
    return Declaration(
        name=name,
        platform=normalize_id(spec.get("platform"), "spec.platform"),
        accelerator_id=normalize_id(spec.get("acceleratorId"), "spec.acceleratorId", accelerator=True),
        sha256=sha256,
        size=size,
        oci=parse_reference(oci) if oci is not None else None,
        https=https,
        pull_secret=pull_secret,
        prefetch=prefetch,
        scope=scope,
    )


def declaration_object(declaration: Declaration) -> dict[str, Any]:
    """The FpgaBitstream object that declares ``declaration`` (what ``catalog push`` prints)."""
    source: dict[str, Any] = {"oci": str(declaration.oci)} if declaration.oci else {"https": declaration.https}
    if declaration.pull_secret:
        source["pullSecret"] = declaration.pull_secret
    spec: dict[str, Any] = {
        "platform": declaration.platform,
        "acceleratorId": declaration.accelerator_id,
        "sha256": declaration.sha256,
        "size": declaration.size,
        "source": source,
    }
    if declaration.prefetch:
        spec["prefetch"] = True
    if declaration.scope != SLOT_SCOPE:
        spec["scope"] = declaration.scope
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": declaration.name},
        "spec": spec,
    }
