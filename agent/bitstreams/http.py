"""HTTP for pulls: aiohttp errors wrapped as SourceUnreachable, SourceAuthError and SourceNotFound, auth
headers, whole small bodies, redirects checked hop by hop (never leaving HTTPS), and the HTTPS source."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from yarl import URL

from agent.bitstreams.declaration import Credentials, redacted_url
from agent.errors import SourceAuthError, SourceNotFound, SourceUnreachable, shown

#: Bytes read from the network per chunk while streaming a bitstream.
CHUNK_BYTES = 1 << 20
#: A response body we read whole (a manifest, an error, a token) is cut at this size.
MAX_SMALL_BODY_BYTES = 4 << 20
#: Default timeouts: connecting, and silence between two reads of one response.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
#: Redirects followed for one request (registries redirect blobs to their storage once).
MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


def client_timeout() -> aiohttp.ClientTimeout:
    """No limit on a whole download (bitstreams are large), but on connecting and on silence."""
    return aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S)


def basic_authorization(credentials: Credentials) -> str:
    pair = f"{credentials.username or ''}:{credentials.password or ''}"
    return "Basic " + base64.b64encode(pair.encode()).decode("ascii")


async def read_small_body(response: aiohttp.ClientResponse, what: str) -> bytes:
    """The whole body of a small response; SourceUnreachable past MAX_SMALL_BODY_BYTES."""
    declared = response.content_length
    if declared is not None and declared > MAX_SMALL_BODY_BYTES:
        raise SourceUnreachable(f"{what}: the answer is {declared} bytes, more than {MAX_SMALL_BODY_BYTES}")
    parts: list[bytes] = []
    received = 0
    async with transport_errors(what):
        while chunk := await response.content.read(MAX_SMALL_BODY_BYTES + 1 - received):
            parts.append(chunk)
            received += len(chunk)
            if received > MAX_SMALL_BODY_BYTES:
                raise SourceUnreachable(f"{what}: the answer is larger than {MAX_SMALL_BODY_BYTES} bytes")
    return b"".join(parts)


async def check_status(response: aiohttp.ClientResponse, what: str) -> None:
    """Raise the error for a non-2xx answer, with the source's own words where it gave some."""
    status = response.status
    if 200 <= status <= 299:
        return
    detail = (await response.content.read(512)).decode("utf-8", "replace").strip().replace("\n", " ")
    said = f"HTTP {status} {response.reason or ''}".rstrip() + (f": {detail[:300]}" if detail else "")
    if status in (401, 403):
        raise SourceAuthError(f"{what}: the credentials were refused ({said})")
    if status == 404:
        raise SourceNotFound(f"{what}: not found ({said})")
    raise SourceUnreachable(f"{what}: {said}")


@asynccontextmanager
async def transport_errors(what: str) -> AsyncIterator[None]:
    """Wrap connection, TLS and timeout errors as SourceUnreachable naming ``what``."""
    try:
        yield
    except aiohttp.ClientSSLError as exc:
        raise SourceUnreachable(f"{what}: TLS failed: {exc}") from exc
    except aiohttp.ClientConnectionError as exc:
        raise SourceUnreachable(f"{what}: cannot connect: {exc or type(exc).__name__}") from exc
    except aiohttp.ClientPayloadError as exc:
        raise SourceUnreachable(f"{what}: the transfer broke off: {exc}") from exc
    except aiohttp.ClientError as exc:
        raise SourceUnreachable(f"{what}: {type(exc).__name__}: {exc}") from exc
    except TimeoutError as exc:
        raise SourceUnreachable(f"{what}: timed out") from exc


@asynccontextmanager
async def open_following(
    session: aiohttp.ClientSession,
    method: str,
    url: URL,
    what: str,
    headers: dict[str, str] | None = None,
    data: object = None,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """The response to ``method url``, redirects of a GET or HEAD followed one hop at a time.

    A hop from ``https://`` to anything else is refused (SourceUnreachable); the Authorization header goes
    only to the first request's origin, and userinfo in a Location is dropped.
    """
    sent = dict(headers or {})
    origin = url.origin()
    for _ in range(MAX_REDIRECTS + 1):
        async with session.request(method, url, headers=sent, data=data, allow_redirects=False) as response:
            location = response.headers.get("Location")
            if response.status not in REDIRECT_STATUSES or method not in ("GET", "HEAD") or not location:
                yield response
                return
            try:
                target = url.join(URL(location))
            except ValueError:
                raise SourceUnreachable(f"{what}: a redirect to an unusable Location {shown(location)}") from None
        if url.scheme == "https" and target.scheme != "https":
            raise SourceUnreachable(
                f"{what}: {redacted_url(str(url))} redirects to {redacted_url(str(target))}; "
                "only https:// is followed from an https:// source"
            )
        if target.scheme not in ("https", "http"):
            raise SourceUnreachable(f"{what}: redirected to {redacted_url(str(target))}, not an HTTP URL")
        if target.origin() != origin:
            sent.pop("Authorization", None)
        url = target.with_user(None)
    raise SourceUnreachable(f"{what}: more than {MAX_REDIRECTS} redirects")


async def stream_chunks(response: aiohttp.ClientResponse, what: str) -> AsyncIterator[bytes]:
    """A response's body chunk by chunk, transport errors wrapped."""
    async with transport_errors(what):
        async for chunk in response.content.iter_chunked(CHUNK_BYTES):
            yield chunk


class HttpsSource:
    """GET a file from an https:// URL, chunk by chunk; credentials go unasked, and only to the URL's origin."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    @asynccontextmanager
    async def open(self, url: str, credentials: Credentials | None) -> AsyncIterator[AsyncIterator[bytes]]:
        what = redacted_url(url)
        if not url.startswith("https://"):
            raise SourceUnreachable(f"{what}: only https:// URLs are pulled")
        headers: dict[str, str] = {}
        if credentials is not None and credentials.token:
            headers["Authorization"] = f"Bearer {credentials.token}"
        elif credentials is not None and credentials.username is not None:
            headers["Authorization"] = basic_authorization(credentials)
        async with (
            transport_errors(what),
            open_following(self.session, "GET", URL(url), what, headers) as response,
        ):
            await check_status(response, what)
            yield stream_chunks(response, what)
