"""The extender counts and times its answers by verb and serves them as /metrics."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.extender.conftest import Cluster, ExtenderUnderTest, sample


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
