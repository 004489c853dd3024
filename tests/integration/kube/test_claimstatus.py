"""A claim's device status written by JSON patch, through the real kubernetes client over HTTP.

The fake API server is given the status subresource's JSON patch here (``test``, ``add``, ``replace`` as
kube-apiserver applies them; a failed ``test`` is a 422)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from kubernetes import client

from agent.errors import KubeError
from agent.kube.claims import ClaimStatusWriter, Condition, DeviceStatus
from agent.kube.core import CoreCalls
from tests.fakeapi import make_resource_claim

DRIVER = "fpga.example.com"
_STATUS = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/resourceclaims/(?P<name>[^/]+)/status$")


class StatusApply:
    """The status patches the server got, and what it did with them; ``interfere`` changes the claim once just
    before a patch is applied (another writer in between)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.requests: list[Any] = []
        self.interfere = False
        self._route = server._route

    def __call__(self, request: Any) -> tuple[int, Any]:
        match = _STATUS.match(request.path)
        if not match or request.method != "PATCH":
            return self._route(request)  # type: ignore[no-any-return]
        self.requests.append(request)
        if request.headers.get("content-type") != "application/json-patch+json":
            return 415, {"kind": "Status", "code": 415, "message": "JSON patch only"}
        key = (match["ns"], match["name"])
        with self.server._cond:
            current = self.server._objects["resourceclaims"].get(key)
            if current is None:
                return 404, {"kind": "Status", "code": 404, "message": "not found", "reason": "NotFound"}
            if self.interfere:
                self.interfere = False
                current = self.server._store("resourceclaims", key, copy.deepcopy(current))
            claim = copy.deepcopy(current)
            for op in request.body:
                parts = op["path"].strip("/").split("/")
                parent = claim
                for part in parts[:-1]:
                    parent = parent[int(part)] if isinstance(parent, list) else parent[part]
                last = parts[-1]
                if op["op"] == "test":
                    if parent.get(last) != op["value"]:
                        message = f"testing value {op['path']} failed: test failed"
                        return 422, {"kind": "Status", "code": 422, "message": message, "reason": "Invalid"}
                elif op["op"] == "add" and last == "-":
                    parent.append(op["value"])
                elif isinstance(parent, list):
                    parent[int(last)] = op["value"]
                else:
                    parent[last] = op["value"]
            return 200, self.server._store("resourceclaims", key, claim)


@pytest.fixture
def applied(apiserver: Any, monkeypatch: pytest.MonkeyPatch) -> StatusApply:
    handler = StatusApply(apiserver)
    monkeypatch.setattr(apiserver, "_route", handler)
    return handler


def put_claim(apiserver: Any, name: str = "fpga") -> dict[str, Any]:
    claim = make_resource_claim(name, namespace="default", driver=DRIVER, devices=[("fpga", "node-a", "c0-p0")])
    claim["status"]["devices"] = [{"driver": "gpu.example.com", "pool": "node-a", "device": "g0"}]
    stored: dict[str, Any] = apiserver.put_resource_claim(claim)
    return stored


def read_claim(api_client: client.ApiClient, name: str = "fpga") -> dict[str, Any]:
    got: dict[str, Any] = CoreCalls(api_client).read_namespaced_resource_claim(name, "default")
    return got


def test_our_entry_is_applied_beside_other_drivers_and_read_back(
    apiserver: Any, api_client: client.ApiClient, applied: StatusApply
) -> None:
    uid = put_claim(apiserver)["metadata"]["uid"]
    writer = ClaimStatusWriter(api_client, DRIVER, f"{DRIVER}/binding")
    ready = Condition(f"{DRIVER}/Programmed", True, "Programmed", "holds aes-v1 (programmed)")
    writer.apply("default", "fpga", uid, [DeviceStatus("node-a", "c0-p0", (ready,), {"bitstream": "aes-v1"})])
    (request,) = applied.requests
    assert request.query["fieldManager"] == f"{DRIVER}/binding"
    devices = {e["driver"]: e for e in read_claim(api_client)["status"]["devices"]}
    assert set(devices) == {"gpu.example.com", DRIVER}
    ours = devices[DRIVER]
    assert (ours["pool"], ours["device"], ours["data"]) == ("node-a", "c0-p0", {"bitstream": "aes-v1"})
    assert [(c["type"], c["status"], c["reason"]) for c in ours["conditions"]] == [
        (f"{DRIVER}/Programmed", "True", "Programmed")
    ]
    assert read_claim(api_client)["status"]["allocation"]["devices"]["results"][0]["device"] == "c0-p0"


def test_a_claim_changed_between_read_and_patch_is_read_again(
    apiserver: Any, api_client: client.ApiClient, applied: StatusApply
) -> None:
    uid = put_claim(apiserver)["metadata"]["uid"]
    applied.interfere = True
    ClaimStatusWriter(api_client, DRIVER, f"{DRIVER}/prepare").apply(
        "default", "fpga", uid, [DeviceStatus("node-a", "c0-p0", (), {"bitstream": "aes-v1"})]
    )
    assert len(applied.requests) == 2
    devices = {e["driver"]: e for e in read_claim(api_client)["status"]["devices"]}
    assert devices[DRIVER]["data"] == {"bitstream": "aes-v1"}


@pytest.mark.parametrize(
    ("name", "uid", "message"),
    [
        pytest.param("fpga", "another-uid", "was replaced", id="replaced-claim"),
        pytest.param("gone", "u", "does not exist", id="gone"),
        pytest.param("Bad_Name", "u", "cannot exist", id="not-a-name"),
    ],
)
def test_a_write_that_cannot_land_is_a_clear_error_and_changes_nothing(
    apiserver: Any, api_client: client.ApiClient, applied: StatusApply, name: str, uid: str, message: str
) -> None:
    put_claim(apiserver)
    before = read_claim(api_client)["status"]
    writer = ClaimStatusWriter(api_client, DRIVER, f"{DRIVER}/prepare")
    with pytest.raises(KubeError, match=message):
        writer.apply("default", name, uid, [DeviceStatus("node-a", "c0-p0", (), {"bitstream": "x"})])
    assert read_claim(api_client)["status"] == before
