"""``fpga-agent demo extender``: the real scheduler extender scoring a few nodes' FpgaNodeStates, narrated."""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from agent.config import Config
from agent.demo import say
from agent.extender.nodestate import NodeSlots, read_published_state
from agent.extender.server import Extender, bound_port, build_app, start
from agent.extender.table import StateTable
from agent.output.tables import format_table
from agent.slots.published import state_object

PLATFORM = "9a3d7c8e11114f0a8d1b0123456789ab"
CATALOG = {"aes-v1": PLATFORM, "sha-v2": PLATFORM}
HOUR_S = 3600


def _slot(sid: str, bitstream: str | None, *, free: bool = True, idle_s: int | None = None) -> dict[str, Any]:
    return {
        "id": sid,
        "card": "card0",
        "numa": 0,
        "platform": PLATFORM,
        "bitstream": bitstream,
        "accelerator": None,
        "free": free,
        "healthy": True,
        "lastUsed": None if idle_s is None else int(time.time()) - idle_s,
    }


#: node -> (its published slots or None for a node without an agent, what the demo says about it)
NODES: dict[str, tuple[list[dict[str, Any]] | None, str]] = {
    "node-a": ([_slot("card0-slot0", "aes-v1"), _slot("card0-slot1", None)], "aes-v1 loaded in a free slot"),
    "node-b": ([_slot("card0-slot0", None)], "an empty slot"),
    "node-c": ([_slot("card0-slot0", "sha-v2", idle_s=2 * HOUR_S)], "sha-v2, idle for two hours"),
    "node-d": ([_slot("card0-slot0", "sha-v2", idle_s=10)], "sha-v2, used 10 s ago"),
    "node-e": ([_slot("card0-slot0", "aes-v1", free=False)], "aes-v1 loaded, but the slot is held"),
    "node-f": (None, "no agent: publishes nothing"),
}


def _table() -> StateTable:
    """The table as the extender's watch fills it: the nodes that publish an FpgaNodeState, and the rest."""
    table = StateTable()
    states: dict[str, NodeSlots | None] = {}
    for name, (slots, _) in NODES.items():
        obj = state_object(name, "fpga-slot", {"nodeName": name, "slots": slots, "bitstreams": CATALOG})
        states[name] = None if slots is None else read_published_state(obj)[1]
    table.replace(states)
    return table


def _pod(bitstream: str | None, count: int = 1) -> dict[str, Any]:
    notes = {} if bitstream is None else {"example.com/fpga-bitstream": bitstream}
    slots = {"example.com/fpga-slot": str(count)}
    return {
        "metadata": {"name": "demo", "namespace": "default", "uid": "demo-uid", "annotations": notes},
        "spec": {"containers": [{"name": "main", "resources": {"limits": slots, "requests": slots}}]},
    }


async def run_extender_demo(base: Config) -> int:
    """Score the nodes above for two pods over real HTTP; returns the process exit code."""
    extender = Extender(_table(), base.score_weights, answer_limit=base.answer_limit)
    server = await start(build_app(extender), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{bound_port(server)}"
    try:
        say("1. The extender, on the slot state six nodes publish (their FpgaNodeState objects)")
        say("", f"listening on {url}; score weights {base.score_weights}")
        async with aiohttp.ClientSession() as session:
            for step, bitstream in (("2", "aes-v1"), ("3", None)):
                asked = f"bitstream {bitstream}" if bitstream else "no bitstream"
                say(f"{step}. kube-scheduler asks /prioritize for a pod with {asked}")
                body = {"Pod": _pod(bitstream), "Nodes": None, "NodeNames": list(NODES)}
                async with session.post(f"{url}/prioritize", json=body) as response:
                    answer = await response.json()
                scores = {entry["Host"]: entry["Score"] for entry in answer}
                rows: list[dict[str, object]] = [
                    {"node": name, "holds": text, "score": scores.get(name, 0)} for name, (_, text) in NODES.items()
                ]
                print(format_table(["node", "holds", "score"], rows), flush=True)
            say("", "the lowest score is left out of the answer (0); kube-scheduler adds the rest to its own")
            say("4. /filter for a pod with bitstream aes-v1 on 2 slots: nodes without 2 slots of its platform fail")
            body = {"Pod": _pod("aes-v1", 2), "Nodes": None, "NodeNames": list(NODES)}
            async with session.post(f"{url}/filter", json=body) as response:
                result = await response.json()
            say("", f"kept: {', '.join(result.get('NodeNames') or []) or 'none'}")
            failed = {**(result.get("FailedNodes") or {}), **(result.get("FailedAndUnresolvableNodes") or {})}
            for name, reason in sorted(failed.items()):
                say("", f"filtered out {name}: {reason}")
    finally:
        await server.cleanup()
    say("done")
    return 0
