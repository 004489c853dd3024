"""The shipped kube-scheduler configuration (daemonset/scheduler-config.yaml) fits the extender we serve."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import load_config
from agent.deviceplugin.constants import RESOURCE_NAME
from agent.extender.wire import SLOT_RESOURCE
from tests.integration.extender.conftest import Cluster, ExtenderUnderTest, extender_args, pod
from tests.unit.extender.factories import slot

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

CONFIG_FILE = Path(__file__).parents[3] / "daemonset" / "scheduler-config.yaml"
SERVICE_URL = "https://fpga-slot-extender.fpga-slot.svc:8888"
#: Fields of kubescheduler.config.k8s.io/v1 (a typo would be rejected by kube-scheduler's strict decoding).
TOP_LEVEL_FIELDS = {
    "apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "enableProfiling",
    "enableContentionProfiling", "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
    "profiles", "extenders", "delayCacheUntilActive",
}  # fmt: skip
EXTENDER_FIELDS = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "bindVerb", "weight", "enableHTTPS", "tlsConfig",
    "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable",
}  # fmt: skip
TLS_FIELDS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
VERBS = ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb")


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CONFIG_FILE.read_text())
    return loaded


@pytest.fixture(scope="module")
def extender_config(config: dict[str, Any]) -> dict[str, Any]:
    (extender,) = config["extenders"]
    result: dict[str, Any] = extender
    return result


def test_is_a_v1_scheduler_configuration_with_known_fields(
    config: dict[str, Any], extender_config: dict[str, Any]
) -> None:
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert set(config) <= TOP_LEVEL_FIELDS
    assert set(extender_config) <= EXTENDER_FIELDS


def test_runs_beside_the_default_scheduler_without_touching_it(config: dict[str, Any]) -> None:
    """One profile of its own: extenders apply to every profile, and default-scheduler belongs to the cluster."""
    assert [profile["schedulerName"] for profile in config["profiles"]] == ["fpga-scheduler"]
    election = config["leaderElection"]
    assert election["leaderElect"] is True
    assert election["resourceName"] == "fpga-scheduler"  # not kube-scheduler's own lease


def test_points_at_the_extender_service_on_the_default_listen_port(extender_config: dict[str, Any]) -> None:
    assert extender_config["urlPrefix"] == SERVICE_URL
    assert extender_config["urlPrefix"].endswith(f":{load_config({}, {}).listen.port}")


def test_calls_the_extender_over_https_showing_its_client_certificate(extender_config: dict[str, Any]) -> None:
    """The extender answers only clients with a certificate of the install's CA; the scheduler checks the
    extender's against that CA (never ``insecure``)."""
    assert extender_config["enableHTTPS"] is True
    tls = extender_config["tlsConfig"]
    assert set(tls) <= TLS_FIELDS
    assert "insecure" not in tls
    assert {"certFile", "keyFile", "caFile"} <= set(tls)


def test_ships_prioritize_only_and_says_how_to_add_filter(extender_config: dict[str, Any]) -> None:
    assert extender_config["prioritizeVerb"] == "prioritize"
    assert "filterVerb" not in extender_config
    assert re.search(r"^#\s+filterVerb: filter$", CONFIG_FILE.read_text(), re.MULTILINE)


def test_the_managed_resource_is_the_one_the_device_plugin_advertises(extender_config: dict[str, Any]) -> None:
    assert extender_config["managedResources"] == [{"name": RESOURCE_NAME, "ignoredByScheduler": False}]
    assert SLOT_RESOURCE == RESOURCE_NAME == "example.com/fpga-slot"


def test_names_only_ignorable_bounded_and_weighted(extender_config: dict[str, Any]) -> None:
    assert extender_config["nodeCacheCapable"] is True
    assert extender_config["ignorable"] is True
    assert re.fullmatch(r"\d+(ms|s)", extender_config["httpTimeout"])
    assert isinstance(extender_config["weight"], int)
    assert extender_config["weight"] > 0  # kube-scheduler rejects a prioritize verb without a positive weight


@pytest.mark.parametrize("verb", ["prioritizeVerb", "filterVerb"])
async def test_every_verb_the_file_names_or_suggests_is_served(extender_config: dict[str, Any], verb: str) -> None:
    """The scheduler POSTs to urlPrefix + "/" + verb, with NodeNames (nodeCacheCapable)."""
    name = extender_config.get(verb, "filter")  # filter is the one the comment suggests
    cluster = Cluster()
    cluster.add("n1", [slot("s0", bitstream="aes")])
    cluster.add("n2", [slot("s0")])
    async with ExtenderUnderTest() as extender:
        extender.publish(cluster)
        status, answer = await extender.post("/" + name, extender_args(pod("aes"), ["n1", "n2"], "names", cluster))
    assert status == 200
    if verb == "prioritizeVerb":
        assert answer == [{"Host": "n1", "Score": 3}]  # 10 vs 7, shifted to the floor
    else:
        assert answer["NodeNames"] == ["n1", "n2"]


def test_the_fpga_profile_packs_slots() -> None:
    """bench/cluster_sim.py reads this: FPGA slots are scored MostAllocated, so free loaded slots stay free."""
    config = yaml.safe_load(CONFIG_FILE.read_text())
    (profile,) = config["profiles"]
    (fit,) = [p for p in profile["pluginConfig"] if p["name"] == "NodeResourcesFit"]
    strategy = fit["args"]["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    assert strategy["resources"] == [{"name": "example.com/fpga-slot", "weight": 1}]
