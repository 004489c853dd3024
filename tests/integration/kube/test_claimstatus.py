"""A claim's device status written by server-side apply, through the real kubernetes client over HTTP.

The fake API server is given the status subresource's apply here (as kube-apiserver keeps it: entries of
``status.devices`` are a map keyed by driver, pool and device; a body naming another UID is a conflict)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from kubernetes import client

from agent.demo.kubeapi import make_resource_claim
from agent.errors import KubeError
from agent.kube.claimstatus import ClaimStatusWriter, Condition, DeviceStatus
from agent.kube.core import CoreCalls

DRIVER = "fpga.example.com"
_STATUS = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/resourceclaims/(?P<name>[^/]+)/status$")


class StatusApply:
    """The apply requests the server got, and what it did with them."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.requests: list[Any] = []
        self._route = server._route

    def __call__(self, request: Any) -> tuple[int, Any]:
        match = _STATUS.match(request.path)
        if not match or request.method != "PATCH":
            return self._route(request)  # type: ignore[no-any-return]
        self.requests.append(request)
        if request.headers.get("content-type") != "application/apply-patch+yaml":
            return 415, {"kind": "Status", "code": 415, "message": "apply only"}
        key = (match["ns"], match["name"])
        with self.server._cond:
            current = self.server._objects["resourceclaims"].get(key)
            if current is None:
                return 404, {"kind": "Status", "code": 404, "message": "not found", "reason": "NotFound"}
            if request.body["metadata"].get("uid") not in (None, current["metadata"]["uid"]):
                return 409, {"kind": "Status", "code": 409, "message": "Precondition failed: UID", "reason": "Conflict"}
            claim = copy.deepcopy(current)
            entries = claim.setdefault("status", {}).setdefault("devices", [])
            for given in request.body["status"]["devices"]:
                ident = (given["driver"], given["pool"], given["device"])
                old = next((e for e in entries if (e["driver"], e["pool"], e["device"]) == ident), None)
                if old is None:
                    entries.append(given)
                else:
                    old.update(given)
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
    assert (request.query["fieldManager"], request.query["force"]) == (f"{DRIVER}/binding", "true")
    devices = {e["driver"]: e for e in read_claim(api_client)["status"]["devices"]}
    assert set(devices) == {"gpu.example.com", DRIVER}
    ours = devices[DRIVER]
    assert (ours["pool"], ours["device"], ours["data"]) == ("node-a", "c0-p0", {"bitstream": "aes-v1"})
    assert [(c["type"], c["status"], c["reason"]) for c in ours["conditions"]] == [
        (f"{DRIVER}/Programmed", "True", "Programmed")
    ]
    assert read_claim(api_client)["status"]["allocation"]["devices"]["results"][0]["device"] == "c0-p0"


@pytest.mark.parametrize(
    ("name", "uid", "message"),
    [
        pytest.param("fpga", "another-uid", "device status not written", id="replaced-claim"),
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
