"""An in-memory OCI registry for ``fpga-agent demo pull`` on a loopback port over plain HTTP: the few
distribution API calls a push and pull make (not one to deploy: no auth, no storage)."""

from __future__ import annotations

import hashlib
import uuid

from aiohttp import web

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
_DIGEST = r"sha256:[0-9a-f]{64}"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class DemoRegistry:
    """Blobs and manifests by repository, served with aiohttp until :meth:`stop`."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], bytes] = {}
        self._uploads: set[str] = set()
        self._runner: web.AppRunner | None = None
        self.address = ""

    async def start(self) -> str:
        """Serve on 127.0.0.1 (a free port); return ``host:port``."""
        app = web.Application()
        app.router.add_get("/v2/", self._base)
        app.router.add_route("HEAD", rf"/v2/{{name:.+}}/blobs/{{digest:{_DIGEST}}}", self._get_blob)
        app.router.add_get(rf"/v2/{{name:.+}}/blobs/{{digest:{_DIGEST}}}", self._get_blob, allow_head=False)
        app.router.add_post("/v2/{name:.+}/blobs/uploads/", self._start_upload)
        app.router.add_put("/v2/{name:.+}/blobs/uploads/{upload}", self._finish_upload)
        app.router.add_put("/v2/{name:.+}/manifests/{reference}", self._put_manifest)
        app.router.add_get("/v2/{name:.+}/manifests/{reference}", self._get_manifest)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.address = f"127.0.0.1:{port}"
        return self.address

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def tamper(self, digest: str) -> None:
        """Change one byte of a stored blob (what a corrupted store or a swapped file serves)."""
        data = bytearray(self.blobs[digest])
        data[len(data) // 2] ^= 0xFF
        self.blobs[digest] = bytes(data)

    async def _base(self, _request: web.Request) -> web.Response:
        return web.json_response({})

    async def _get_blob(self, request: web.Request) -> web.Response:
        data = self.blobs.get(request.match_info["digest"])
        if data is None:
            return web.json_response({"errors": [{"code": "BLOB_UNKNOWN"}]}, status=404)
        if request.method == "HEAD":
            return web.Response(status=200, headers={"Content-Length": str(len(data))})
        return web.Response(body=data, content_type="application/octet-stream")

    async def _start_upload(self, request: web.Request) -> web.Response:
        upload = uuid.uuid4().hex
        self._uploads.add(upload)
        location = f"/v2/{request.match_info['name']}/blobs/uploads/{upload}"
        return web.Response(status=202, headers={"Location": location})

    async def _finish_upload(self, request: web.Request) -> web.Response:
        upload = request.match_info["upload"]
        digest = request.query.get("digest", "")
        data = await request.read()
        if upload not in self._uploads or _digest(data) != digest:
            return web.json_response({"errors": [{"code": "DIGEST_INVALID"}]}, status=400)
        self._uploads.discard(upload)
        self.blobs[digest] = data
        return web.Response(status=201, headers={"Docker-Content-Digest": digest})

    async def _put_manifest(self, request: web.Request) -> web.Response:
        body = await request.read()
        digest = _digest(body)
        name = request.match_info["name"]
        self.manifests[(name, request.match_info["reference"])] = body
        self.manifests[(name, digest)] = body
        return web.Response(status=201, headers={"Docker-Content-Digest": digest})

    async def _get_manifest(self, request: web.Request) -> web.Response:
        body = self.manifests.get((request.match_info["name"], request.match_info["reference"]))
        if body is None:
            return web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, status=404)
        return web.Response(body=body, headers={"Content-Type": MANIFEST_TYPE})
