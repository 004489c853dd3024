"""The Grafana dashboard in daemonset/ queries only metrics the agent and the extender export."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent.extender.server import extender_metrics
from agent.node.metrics import AgentMetrics
from agent.slots.registry import SlotRegistry

DASHBOARD = Path(__file__).parents[2] / "daemonset" / "grafana-dashboard.json"


def exported_names() -> set[str]:
    agent = AgentMetrics()
    agent.watch_slots(SlotRegistry(), lambda: 0)
    extender = extender_metrics()
    names: set[str] = set()
    for registry in (agent.registry, extender.registry):
        for family in registry.collect():
            names |= {sample.name for sample in family.samples} | {family.name}
            if family.type == "histogram":
                names |= {family.name + suffix for suffix in ("_bucket", "_count", "_sum")}
            if family.type == "counter":
                names.add(family.name + "_total")
    return names


def test_every_queried_metric_is_exported() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bfpga_slot_[a-z_]+\b", target["expr"])
    }
    assert queried, "the dashboard queries no fpga_slot metric"
    assert queried <= exported_names(), sorted(queried - exported_names())


def test_the_panels_operators_need_are_there() -> None:
    titles = {panel["title"] for panel in json.loads(DASHBOARD.read_text())["panels"]}
    assert {
        "Slots per node by state",
        "Cache hit ratio (PreStartContainer)",
        "Reconfiguration time",
        "Extender latency by verb",
        "Bitstream pulls by result",
    } <= titles
