"""Reliability soak: kubelet restarts in a row and fuzzed input on every surface, printed as a table.

* **kubelet restarts**: the agent against the kubelet stand-in over real unix sockets, restarted
  crash-style (its streams cut, every socket in the device-plugin directory deleted, kubelet.sock
  created again) ``--restarts`` times; every third restart while Allocates are in flight, and a few
  with kubelet.sock gone for 5 s first. After each: the agent registered again (counted), and the
  first Allocate and PreStartContainer on the new registration succeed (failures counted).
* **faults**: a hung programming, a failing one, the card unplugged half-way (each ``--fault-rounds``
  times) must end in a clear error naming the pod within the kubelet's 30 s, with the agent serving
  the next container; a corrupt checkpoint at start must not stop it from serving.
* **gRPC fuzz**: ``--cases`` Allocate / GetPreferredAllocation / PreStartContainer calls whose device
  IDs are drawn from valid ones, duplicates, unknown ones, huge ones, control characters and
  non-ASCII; a rejection must be a clear status of bounded length and change no slot state.
* **extender fuzz**: ``--cases`` bodies (the captured kube-scheduler request with one place
  replaced by any JSON, or raw bytes) over real HTTP on one kept-alive connection: a 200 or a
  4xx with an ``Error``, never a 5xx or a dropped connection; the process's RSS before and after.
* **hostile sources** (``bench/hostile_pulls.py``, ``--fault-rounds`` times each): bitstream pulls from a
  slow drip, split writes, an endless body, a redirect down to plain HTTP and a plain-HTTP token realm, each
  ending in bounded time and memory, with nothing installed (or the right file) and the cache budget intact.
* **node annotations** and **pod bitstream annotations**: ``--cases`` random texts each, through
  the extender's node-state reader and the catalog's name check: no exception escapes but the one
  the contract names, messages bounded.

Usage: python bench/soak.py [--restarts 100] [--cases 10000] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import http.client
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp  # noqa: E402
from agent.deviceplugin.constants import RESOURCE_NAME  # noqa: E402
from agent.errors import InvalidBitstreamName  # noqa: E402
from agent.extender.nodestate import MalformedLog, read_published_state  # noqa: E402
from agent.files.bitstream import validate_name  # noqa: E402
from agent.node.reconfigure import ANNOTATION  # noqa: E402
from agent.simfpga import SimFabric, SimSlotInfo  # noqa: E402
from agent.simfpga.fabric import PLATFORM  # noqa: E402
from agent.slots import checkpoint  # noqa: E402
from agent.slots.model import Health  # noqa: E402
from bench.extender_handler import node_state, state_table  # noqa: E402
from bench.hostile_pulls import soak_hostile_sources  # noqa: E402
from bench.table import Row, emit, p50_p99  # noqa: E402
from tests.fakes import AgentHarness, Catalog, NodePods  # noqa: E402
from tests.integration.extender.conftest import extender_in_thread, sample  # noqa: E402

REJECTED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}
MAX_STATUS = 1200


def rss_mb() -> float:
    """This process's resident memory now."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def weird_text(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return "".join(chr(rng.randrange(0, 32)) for _ in range(rng.randrange(1, 20)))
    if kind == 1:
        return "x" * rng.choice([64, 300, 5000, 70_000])
    if kind == 2:
        return "".join(chr(rng.randrange(0x80, 0x3000)) for _ in range(rng.randrange(1, 30)))
    if kind == 3:
        return "[" * rng.randrange(1, 200_000) + "]"
    if kind == 4:
        return json.dumps(rng.choice([[], {}, [1], {"a": None}, "s", 7, None]))
    return "".join(rng.choice("abc-._/\\\"'\n ") for _ in range(rng.randrange(0, 40)))


# ------------------------------------------------------------------------------ restarts
async def soak_restarts(restarts: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="fs-soak-", dir="/tmp") as tmp:
        async with AgentHarness.running(Path(tmp), sim_cards=2, sim_slots_per_card=4) as harness:
            kubelet = harness.kubelet
            registered, failed_after, took_ms = 0, 0, []
            for index in range(restarts):
                before = len(kubelet.registrations)
                in_flight = []
                if index % 3 == 1:
                    conn = kubelet.plugins[RESOURCE_NAME]
                    in_flight = [
                        asyncio.ensure_future(conn.stub.Allocate(allocate_request([dev]), timeout=5))
                        for dev in sorted(conn.devices)[:4]
                    ]
                started = time.monotonic()
                if index % 34 == 33:  # kubelet.sock gone for 5 s
                    await kubelet.stop()
                    for path in kubelet.plugin_dir.iterdir():  # as a kubelet restart leaves the directory
                        if path.is_socket():
                            path.unlink(missing_ok=True)
                    await asyncio.sleep(5)
                    started = time.monotonic()  # timed from the kubelet's return
                    await kubelet.start()
                else:
                    await kubelet.restart()
                await asyncio.gather(*in_flight, return_exceptions=True)  # cut by the restart: allowed
                try:
                    await kubelet.wait_registered(before + 1, timeout_s=10)
                    registered += 1
                    took_ms.append((time.monotonic() - started) * 1000)
                    conn = kubelet.plugins[RESOURCE_NAME]
                    await kubelet.wait_for(lambda c=conn: len(c.healthy()) == len(c.devices) > 0, 5)
                    device = sorted(conn.devices)[index % len(conn.devices)]
                    await conn.stub.Allocate(allocate_request([device]), timeout=5)
                    await conn.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=[device]), timeout=30)
                except (TimeoutError, grpc.aio.AioRpcError) as exc:
                    failed_after += 1
                    print(f"restart {index}: {exc}", file=sys.stderr)
                extra = len(kubelet.registrations) - before - 1
                if extra:
                    print(f"restart {index}: {extra} extra registration(s)", file=sys.stderr)
            return [
                (f"kubelet restarts (crash-style, {restarts})", f"{registered}/{restarts} re-registered", "all"),
                ("RPCs failed after re-registration", str(failed_after), "0"),
                ("registrations beyond one per restart", str(len(kubelet.registrations) - 1 - restarts), "0"),
                ("restart to re-registered", p50_p99(took_ms, digits=1), "< 1000 ms"),
            ]


def allocate_request(ids: list[str]) -> dp.AllocateRequest:
    return dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])


# ---------------------------------------------------------------------------------- faults
def healthy_in(harness: AgentHarness) -> set[str]:
    """The slots the agent holds Healthy (what the kubelet lists once ListAndWatch caught up)."""
    return {state.slot.id for state in harness.agent.registry.snapshot() if state.health is Health.HEALTHY}


async def soak_faults(rounds: int) -> list[Row]:
    """Each fault ``rounds`` times: a hung programming, a failing one, the card unplugged half-way,
    a corrupt checkpoint at start. Each must end in a clear error within the kubelet's 30 s, and the
    agent must go on serving (the next container on another card starts)."""
    results: dict[str, list[float]] = {}
    unclear: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fs-soak-", dir="/tmp") as tmp:
        root = Path(tmp)
        catalog = Catalog(root / "catalog")
        image = root / "aes.bin"
        image.write_bytes(b"aes" * 1000)
        catalog.add(image, "aes", platform=PLATFORM, accelerator_id="a" * 32)
        for index in range(rounds):
            for fault in ("hung programming", "failing programming", "card unplugged mid-programming"):
                pods = NodePods()
                async with AgentHarness.running(
                    root / f"{index}-{len(results.get(fault, []))}-{fault[:4]}",
                    catalog=catalog,
                    pods=pods,
                    sim_cards=2,
                    sim_slots_per_card=1,
                    sim_program_ms=100,
                    program_timeout_s=3.0,
                ) as harness:
                    fabric, kubelet = harness.fabric, harness.kubelet
                    if fault == "hung programming":
                        fabric.hang_next_program("simcard0", "slot0")
                        fabric.hang_next_program("simcard1", "slot0")
                    elif fault == "failing programming":
                        fabric.fail_next_program("simcard0", "slot0", "injected EIO")
                        fabric.fail_next_program("simcard1", "slot0", "injected EIO")
                    else:
                        unplugged: list[str] = []

                        def unplug_once(
                            event: object, info: SimSlotInfo, f: SimFabric = fabric, unplugged: list[str] = unplugged
                        ) -> None:
                            if info.loaded is None and not unplugged:  # programming began: pull the card
                                unplugged.append(info.card)
                                f.unplug(info.card)

                        unplug = fabric.subscribe(unplug_once)
                    started = time.monotonic()
                    try:
                        await kubelet.admit("default", "faulty", "main", RESOURCE_NAME, 1, {ANNOTATION: "aes"})
                        unclear.append(f"{fault}: the container started")
                    except grpc.aio.AioRpcError as exc:
                        results.setdefault(fault, []).append(time.monotonic() - started)
                        if "default/faulty" not in (exc.details() or ""):
                            unclear.append(f"{fault}: {exc.code().name} {(exc.details() or '')[:120]}")
                    if fault == "card unplugged mid-programming":
                        unplug()
                        for card in ("simcard0", "simcard1"):
                            fabric.plug(card)
                    kubelet.delete_pod("default", "faulty")
                    try:  # still serving: the next container starts (no programming: the other slot has a fault armed)
                        await kubelet.wait_for(lambda h=harness: set(h.conn.healthy()) == healthy_in(h), 10)
                        await kubelet.admit("default", "next", "main", RESOURCE_NAME, 1)
                    except (TimeoutError, grpc.aio.AioRpcError, RuntimeError) as exc:
                        unclear.append(f"{fault}: not serving afterwards: {exc}")
            state = root / f"{index}-corrupt" / "state"
            state.mkdir(parents=True)
            (state / checkpoint.FILE_NAME).write_bytes(b'{"version": 1, "checksum": "0", "slots": {"x": 1}}')
            started = time.monotonic()
            async with AgentHarness.running(root / f"{index}-corrupt", sim_cards=1, sim_slots_per_card=1) as harness:
                results.setdefault("corrupt checkpoint at start", []).append(time.monotonic() - started)
                admitted = await harness.kubelet.admit("default", "after", "main", RESOURCE_NAME, 1)
                if len(admitted.device_ids) != 1:
                    unclear.append("corrupt checkpoint: not serving")
        full_disk = await soak_full_disk(root / "full-disk", rounds, unclear)
    rows: list[Row] = [
        (f"fault: {fault} ({len(times)}x)", f"clear error, slowest after {max(times):.1f} s", "< 30 s")
        for fault, times in results.items()
        if fault != "corrupt checkpoint at start"
    ]
    corrupt = results.get("corrupt checkpoint at start", [])
    rows.append((f"fault: corrupt checkpoint at start ({len(corrupt)}x)", f"serving after {max(corrupt):.1f} s", "-"))
    rows.append(full_disk)
    rows.append(("faults without a clear error, or not serving afterwards", str(len(unclear)), "0"))
    for problem in unclear:
        print(problem, file=sys.stderr)
    return rows


async def soak_full_disk(root: Path, rounds: int, unclear: list[str]) -> Row:
    """The state directory on a full filesystem (a 256 KiB tmpfs, filled up; needs root): checkpoint
    writes fail, said once as an error naming the cause, and containers still start."""
    if os.geteuid() != 0:
        return ("fault: full disk", "not run: mounting a small filesystem needs root", "-")
    slowest = 0.0
    for index in range(rounds):
        base = root / str(index)
        state = base / "state"
        state.mkdir(parents=True)
        mount = ["mount", "-t", "tmpfs", "-o", "size=256k", "fpga-slot-soak", str(state)]
        mounted = await asyncio.to_thread(subprocess.run, mount, capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            return (
                "fault: full disk",
                f"not run: cannot mount a small filesystem ({mounted.stderr.strip()[:80]})",
                "-",
            )
        try:
            # The simulated cards' files first (as on a node whose disk filled up later), then fill it.
            SimFabric(state / "sim-dev", cards=1, slots_per_card=2, program_s=0)
            with contextlib.suppress(OSError), (state / "filler").open("wb") as filler:
                while True:
                    filler.write(b"\0" * 4096)
                    filler.flush()
            with said("agent.slots.checkpoint", "No space left") as error_said:
                started = time.monotonic()
                async with AgentHarness.running(base, sim_cards=1, sim_slots_per_card=2) as harness:
                    admitted = await harness.kubelet.admit("default", f"on-full-disk-{index}", "main", RESOURCE_NAME, 1)
                    async with asyncio.timeout(30):
                        await error_said.wait()
                    slowest = max(slowest, time.monotonic() - started)
                    if len(admitted.device_ids) != 1:
                        unclear.append("full disk: container not started")
        except TimeoutError:
            unclear.append("full disk: no error naming the cause within 30 s")
        finally:
            await asyncio.to_thread(subprocess.run, ["umount", str(state)], check=True)
    return (f"fault: full disk ({rounds}x)", f"error said, containers start; said after {slowest:.1f} s", "< 30 s")


@contextlib.contextmanager
def said(logger_name: str, text: str) -> Iterator[asyncio.Event]:
    """An Event set once ``logger_name`` logs an error containing ``text`` (from any thread)."""
    event = asyncio.Event()
    loop = asyncio.get_running_loop()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if text in record.getMessage():
                loop.call_soon_threadsafe(event.set)

    handler = Watch(logging.ERROR)
    logging.getLogger(logger_name).addHandler(handler)
    try:
        yield event
    finally:
        logging.getLogger(logger_name).removeHandler(handler)


# ------------------------------------------------------------------------------ gRPC fuzz
async def soak_grpc(cases: int, rng: random.Random) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="fs-soak-", dir="/tmp") as tmp:
        async with AgentHarness.running(Path(tmp), sim_cards=2, sim_slots_per_card=4) as harness:
            registry, stub = harness.agent.registry, harness.conn.stub
            valid = sorted(harness.conn.devices)
            counts: dict[str, int] = {}
            crashes = changed = long_status = 0
            for _ in range(cases):
                ids = [rng.choice(valid) if rng.random() < 0.6 else weird_text(rng) for _ in range(rng.randrange(0, 5))]
                rpc = rng.randrange(3)
                before, version = registry.snapshot(), registry.version
                try:
                    if rpc == 0:
                        await stub.Allocate(allocate_request(ids), timeout=10)
                    elif rpc == 1:
                        request = dp.ContainerPreferredAllocationRequest(
                            available_deviceIDs=ids, must_include_deviceIDs=ids[:1], allocation_size=len(ids)
                        )
                        await stub.GetPreferredAllocation(
                            dp.PreferredAllocationRequest(container_requests=[request]), timeout=10
                        )
                    else:
                        await stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids), timeout=30)
                    counts["OK"] = counts.get("OK", 0) + 1
                except grpc.aio.AioRpcError as exc:
                    code = exc.code()
                    counts[code.name] = counts.get(code.name, 0) + 1
                    if code not in REJECTED:
                        crashes += 1
                        print(f"unexpected {code.name}: {(exc.details() or '')[:200]}", file=sys.stderr)
                    if len(exc.details() or "") > MAX_STATUS:
                        long_status += 1
                    if registry.snapshot() != before or registry.version != version:
                        changed += 1
            shown = ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))
            return [
                (f"gRPC fuzz ({cases} calls)", shown, "-"),
                ("gRPC: crashes (status other than OK/INVALID_ARGUMENT/FAILED_PRECONDITION)", str(crashes), "0"),
                ("gRPC: state changed by a rejected call", str(changed), "0"),
                (f"gRPC: status messages over {MAX_STATUS} characters", str(long_status), "0"),
            ]


# -------------------------------------------------------------------------- extender fuzz
def mutate(body: Any, rng: random.Random) -> bytes:
    if rng.random() < 0.1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
    document = copy.deepcopy(body)
    paths: list[list[Any]] = []

    def walk(value: Any, path: list[Any]) -> None:
        paths.append(path)
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, [*path, key])
        elif isinstance(value, list):
            for index, item in enumerate(value[:5]):
                walk(item, [*path, index])

    walk(document, [])
    path = rng.choice(paths)
    replacement = rng.choice([None, True, 7, -1, 1.5, "", weird_text(rng), [], {}, [weird_text(rng)], {"a": 1}])
    if path:
        target = document
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = replacement
    else:
        document = replacement
    if rng.random() < 0.5:
        return json.dumps(document).encode()
    # as kube-scheduler sends it (Go's encoding/json: no spaces), sometimes cut or spliced
    raw = json.dumps(document, separators=(",", ":")).encode()
    splices = [b"", b'"', b",", b"]", b"}", b"\\", b" "]
    for _ in range(rng.choice([0, 0, 1, 2])):
        at = rng.randrange(len(raw) + 1)
        put = rng.choice([*splices, weird_text(rng).encode()])
        raw = raw[:at] + put + raw[at + rng.randrange(3) :]
    return raw


def soak_extender(cases: int, rng: random.Random) -> list[Row]:
    """Mangled requests over HTTP about a one-slot pod, on nodes with published state: an intact request gets
    as far as the one-slot index and the promises, not only the parser."""
    names = [f"fake-fpga-{i}" for i in range(1, 41)]
    cache = state_table(names)
    captured = sample("extender-prioritize-request.json")
    captured["Pod"]["metadata"]["annotations"] = {ANNOTATION: "bs-3"}
    captured["NodeNames"] = names[::2]
    counts: dict[int, int] = {}
    crashes = scored = 0
    gc.collect()
    rss_before = rss_mb()
    with extender_in_thread(cache) as url:
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        for index in range(cases):
            path = "/prioritize" if index % 2 else "/filter"
            body = mutate(captured, rng)
            try:
                connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = response.read()
                counts[response.status] = counts.get(response.status, 0) + 1
                if path == "/prioritize" and response.status == 200 and answer != b"[]":
                    scored += 1
                if response.status >= 500 or (response.status >= 400 and b"Error" not in answer):
                    crashes += 1
            except (OSError, http.client.HTTPException) as exc:
                crashes += 1
                print(f"extender: {type(exc).__name__}: {exc}", file=sys.stderr)
                connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.close()
    shown = ", ".join(f"{status} {count}" for status, count in sorted(counts.items()))
    return [
        (f"extender fuzz ({cases} bodies over HTTP)", shown, "-"),
        ("extender: 5xx, answers without Error, dropped connections", str(crashes), "0"),
        ("extender: prioritize answers that scored nodes (requests intact enough to be scored)", str(scored), "-"),
        ("process RSS before / after the extender fuzz", f"{rss_before:.0f} / {rss_mb():.0f} MB", "bounded"),
    ]


def weird_value(rng: random.Random) -> object:
    """A JSON value as a hostile writer might put in an FpgaNodeState: weird text, parsed where it parses."""
    text = weird_text(rng)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def soak_node_states(cases: int, rng: random.Random) -> list[Row]:
    escaped = 0
    log = MalformedLog()
    for index in range(cases):
        obj = node_state(index, f"n{index}")
        spec = obj["spec"]
        field = rng.choice(["slots", "bitstreams", "nodeName", "slot", "slot"])
        if field == "slot":
            spec["slots"][rng.randrange(len(spec["slots"]))][rng.choice(list(spec["slots"][0]))] = weird_value(rng)
        else:
            spec[field] = weird_value(rng)
        try:
            read_published_state(obj, log=log)
        except Exception as exc:  # the count is the result
            escaped += 1
            print(f"FpgaNodeState: {type(exc).__name__}", file=sys.stderr)
    names_escaped = long_messages = 0
    for _ in range(cases):
        try:
            validate_name(weird_text(rng))
        except InvalidBitstreamName as exc:
            if len(str(exc)) > 400 or "\n" in str(exc):
                long_messages += 1
        except Exception:
            names_escaped += 1
    return [
        (f"FpgaNodeState fuzz ({cases})", f"{escaped} exceptions escaped", "0"),
        (f"bitstream annotation fuzz ({cases})", f"{names_escaped} unexpected exceptions", "0"),
        ("bitstream name errors longer than 400 characters or multi-line", str(long_messages), "0"),
    ]


async def main_async(args: argparse.Namespace) -> list[Row]:
    rng = random.Random(args.seed)
    started = time.monotonic()
    rows = await soak_restarts(args.restarts)
    rows += await soak_faults(args.fault_rounds)
    rows += await soak_grpc(args.cases, rng)
    rows += await asyncio.to_thread(soak_extender, args.cases, rng)
    rows += soak_node_states(args.cases, rng)
    rows += await soak_hostile_sources(args.fault_rounds)
    rows.append(("soak duration", f"{time.monotonic() - started:.0f} s", "-"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=100)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--fault-rounds", type=int, default=5, help="times each fault is injected")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="10 restarts, 500 cases")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.restarts, args.cases, args.fault_rounds = 10, 500, 1
    logging.basicConfig(level=logging.ERROR)  # rejections are expected here, thousands of them
    emit(asyncio.run(main_async(args)), as_json=args.json)


if __name__ == "__main__":
    main()
