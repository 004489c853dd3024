"""The extender's request metrics: counted per call on plain tables, exported as Prometheus families."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from agent.extender.metrics import LATENCY_BUCKETS_S
from agent.extender.server import extender_metrics


def test_a_latency_on_a_bound_is_counted_in_that_bucket_and_every_one_above() -> None:
    metrics = extender_metrics()
    for seconds in (LATENCY_BUCKETS_S[0] / 2, LATENCY_BUCKETS_S[0], LATENCY_BUCKETS_S[2], 60.0):
        metrics.observe("/prioritize", 200, seconds)
    metrics.observe("/filter", 400, 0.001)
    metrics.observe("/healthz", 200, 0.001)  # not a scheduler call: not counted
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    buckets = {
        s.labels["le"]: s.value
        for s in families["fpga_slot_extender_request_duration_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["verb"] == "prioritize"
    }
    assert buckets[str(LATENCY_BUCKETS_S[0])] == 2
    assert buckets[str(LATENCY_BUCKETS_S[1])] == 2
    assert buckets[str(LATENCY_BUCKETS_S[2])] == 3
    assert buckets[str(LATENCY_BUCKETS_S[-1])] == 3
    assert buckets["+Inf"] == 4
    get = metrics.registry.get_sample_value
    assert get("fpga_slot_extender_request_duration_seconds_sum", {"verb": "prioritize"}) == sum(
        (LATENCY_BUCKETS_S[0] / 2, LATENCY_BUCKETS_S[0], LATENCY_BUCKETS_S[2], 60.0)
    )
    assert get("fpga_slot_extender_requests_total", {"verb": "prioritize", "code": "200"}) == 4
    assert get("fpga_slot_extender_requests_total", {"verb": "filter", "code": "400"}) == 1
    assert {s.labels["verb"] for s in families["fpga_slot_extender_requests"].samples} == {"prioritize", "filter"}


def test_before_any_call_the_families_are_exported_without_samples() -> None:
    families = {f.name: f for f in extender_metrics().registry.collect()}
    assert families["fpga_slot_extender_requests"].samples == []
    assert families["fpga_slot_extender_request_duration_seconds"].type == "histogram"
