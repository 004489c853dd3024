"""The extender counts and times its answers by verb and serves them as /metrics."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.extender.conftest import Cluster, ExtenderUnderTest, extender_args, pod, sample
from tests.unit.extender.factories import slot


def value(extender: ExtenderUnderTest, name: str, **labels: str) -> float:
    found = extender.metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


async def test_requests_and_latency_by_verb(extender: ExtenderUnderTest) -> None:
    extender.publish(Cluster())
    for _ in range(2):
        status, _ = await extender.post("/prioritize", sample("extender-prioritize-request.json"))
        assert status == 200
    status, _ = await extender.post("/filter", sample("extender-filter-request.json"))
    assert status == 200
    status, _ = await extender.post_raw("/filter", b"{not json")
    assert status == 400
    status, _ = await extender.get("/healthz")

    assert value(extender, "fpga_slot_extender_requests_total", verb="prioritize", code="200") == 2
    assert value(extender, "fpga_slot_extender_requests_total", verb="filter", code="200") == 1
    assert value(extender, "fpga_slot_extender_requests_total", verb="filter", code="400") == 1
    assert value(extender, "fpga_slot_extender_request_duration_seconds_count", verb="prioritize") == 2
    assert value(extender, "fpga_slot_extender_request_duration_seconds_count", verb="filter") == 2

    status, text = await extender.get("/metrics")
    assert status == 200
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert {"fpga_slot_extender_requests", "fpga_slot_extender_request_duration_seconds"} <= set(families)
    # Health checks and scrapes are not scheduler calls: no verb of their own.
    verbs = {s.labels.get("verb") for s in families["fpga_slot_extender_requests"].samples}
    assert verbs == {"filter", "prioritize"}


async def test_a_change_of_the_bitstream_popularity_is_counted(extender: ExtenderUnderTest) -> None:
    cluster = Cluster()
    cluster.add("n1", [slot("s0", bitstream="a"), slot("s1")])
    cluster.add("n2", [slot("s0", bitstream="x"), slot("s1")])
    extender.publish(cluster)

    async def prioritize(index: int, bitstream: str) -> None:
        scheduled = pod(bitstream)
        scheduled["metadata"]["name"] = f"job-{index}"  # each pod counts once in the request shares
        status, _ = await extender.post("/prioritize", extender_args(scheduled, ["n1", "n2"], "names", cluster))
        assert status == 200

    for index in range(600):  # pods asking for a, b and c in turn: a steady popularity
        await prioritize(index, "abc"[index % 3])
    assert value(extender, "fpga_slot_extender_popularity_changes_total") == 0
    index = 600
    while value(extender, "fpga_slot_extender_popularity_changes_total") == 0:  # then x and y
        await prioritize(index, "xy"[index % 2])
        index += 1
        assert index < 700, "no change of the popularity counted"
    assert extender.extender.popularity_changes == 1

    status, text = await extender.get("/metrics")
    assert status == 200
    families = {family.name: family for family in text_string_to_metric_families(text)}
    (counted,) = families["fpga_slot_extender_popularity_changes"].samples
    assert counted.value == 1


async def test_answers_of_the_compiled_fast_path_are_counted_apart(extender: ExtenderUnderTest) -> None:
    cluster = Cluster()
    cluster.add("n1", [slot("s0", bitstream="aes"), slot("s1", bitstream="aes"), slot("s2")])
    cluster.add("n2", [slot("s0", bitstream="aes"), slot("s1")])
    extender.publish(cluster)
    for index in range(6):  # Python answers the first and arms the fast path for "aes"; it answers the rest
        scheduled = pod("aes")
        scheduled["metadata"]["name"] = f"job-{index}"
        args = extender_args(scheduled, ["n1", "n2"], "names", cluster)
        compact = json.dumps(args, separators=(",", ":")).encode()  # as Go writes it: what the fast path reads
        status, _ = await extender.post("/prioritize", compact)
        assert status == 200
    assert value(extender, "fpga_slot_extender_requests_total", verb="prioritize", code="200") == 6
    assert 3 <= value(extender, "fpga_slot_extender_fast_path_answers_total") < 6
    # the fast path's latency in the same histogram
    assert value(extender, "fpga_slot_extender_request_duration_seconds_count", verb="prioritize") == 6
