"""Bitstreams from an https:// URL, streamed with the agent's HTTP client (aiohttp).

Credentials from the pull Secret go along with the first request (basic auth, or a
bearer token): the URL is HTTPS by declaration, and redirects are followed only to
other https:// URLs (the credentials only to the same origin), so they are never sent
in clear. Messages name the URL without any userinfo.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from yarl import URL

from agent.bitstreams.declaration import Credentials, redacted_url
from agent.bitstreams.http import (
    check_status,
    open_following,
    preemptive_authorization,
    stream_chunks,
    transport_errors,
)
from agent.errors import SourceUnreachable


class HttpsSource:
    """GET a file over HTTPS, chunk by chunk."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    @asynccontextmanager
    async def open(self, url: str, credentials: Credentials | None) -> AsyncIterator[AsyncIterator[bytes]]:
        what = redacted_url(url)
        if not url.startswith("https://"):
            raise SourceUnreachable(f"{what}: only https:// URLs are pulled")
        headers = {}
        authorization = preemptive_authorization(credentials)
        if authorization:
            headers["Authorization"] = authorization
        async with (
            transport_errors(what),
            open_following(self.session, "GET", URL(url), what, headers) as response,
        ):
            await check_status(response, what)
            yield stream_chunks(response, what)
