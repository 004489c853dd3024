"""Bitstreams from an https:// URL, streamed with the agent's HTTP client (aiohttp).

Credentials from the pull Secret go along with the first request (basic auth, or a
bearer token): the URL is HTTPS by declaration, so they are never sent in clear.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from agent.bitstreams.declaration import Credentials
from agent.bitstreams.http import check_status, preemptive_authorization, stream_chunks, transport_errors
from agent.errors import SourceUnreachable


class HttpsSource:
    """GET a file over HTTPS, chunk by chunk."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    @asynccontextmanager
    async def open(self, url: str, credentials: Credentials | None) -> AsyncIterator[AsyncIterator[bytes]]:
        if not url.startswith("https://"):
            raise SourceUnreachable(f"{url}: only https:// URLs are pulled")
        headers = {}
        authorization = preemptive_authorization(credentials)
        if authorization:
            headers["Authorization"] = authorization
        async with transport_errors(url), self.session.get(url, headers=headers) as response:
            await check_status(response, url)
            yield stream_chunks(response, url)
