"""Bitstreams from an https:// URL, streamed with aiohttp; credentials go with the first request,
redirects only to https:// (credentials only to the same origin)."""

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
        authorization = preemptive_authorization(credentials)
        headers = {"Authorization": authorization} if authorization else {}
        async with (
            transport_errors(what),
            open_following(self.session, "GET", URL(url), what, headers) as response,
        ):
            await check_status(response, what)
            yield stream_chunks(response, what)
