"""The hardware the agent runs on (``--backend``): one discovery source and the programmers for its slots."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.config import Config
from agent.discovery.base import CompositeSource, DeviceSource, Enumeration
from agent.discovery.dfl import dfl_source
from agent.discovery.fpga_region import fpga_region_source
from agent.discovery.sim import SimSource
from agent.discovery.static import static_source
from agent.errors import ConfigError
from agent.programming.base import Programmer
from agent.programming.command import CommandProgrammer
from agent.programming.commandspec import missing_tool
from agent.programming.dfl import DflProgrammer
from agent.programming.fpga_region import FpgaRegionProgrammer
from agent.programming.sim import SimProgrammer
from agent.simfpga import SimFabric

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backend:
    """A discovery source and the programmers (by slot backend) for the same hardware."""

    source: DeviceSource
    programmers: Mapping[str, Programmer] = field(default_factory=dict)
    fabric: SimFabric | None = None
    #: the vendor tools programming static slots (``--command-programmers``), None without any; at start they read
    #: back what the slots hold
    commands: CommandProgrammer | None = None


def build_backend(config: Config) -> Backend:
    """The backend the configuration names; ``auto`` runs every hardware backend side by side."""
    if config.backend == "sim":
        try:
            fabric = SimFabric(
                config.sim_dev_dir,
                config.sim_cards,
                config.sim_slots_per_card,
                config.sim_program_ms / 1000,
                device_nodes=config.sim_device_nodes == "char",
            )
        except PermissionError as exc:
            raise ConfigError(
                f"--sim-device-nodes char: cannot create the simulated slots' character devices in "
                f"{config.sim_dev_dir} ({exc.strerror}): that needs root, as the DaemonSet runs the agent; "
                "--sim-device-nodes file makes regular files instead, which no container can be given"
            ) from None
        return Backend(SimSource(fabric), {"sim": SimProgrammer(fabric)}, fabric)
    for spec in config.command_programmers:  # every vendor tool must be in this image, checked at start
        problem = missing_tool(spec)
        if problem is not None:
            raise ConfigError(
                f"--command-programmers {spec.where}.{problem}: install the vendor tool in the agent's image "
                "or mount it into its container"
            )
    commands = CommandProgrammer(config.command_programmers) if config.command_programmers else None
    regions = FpgaRegionProgrammer(
        base_images=dict(config.fpga_region_base_images), held_file=config.state_dir / "fpga-region-cards.json"
    )
    hardware: dict[str, DeviceSource] = {
        "dfl": dfl_source(),
        "fpga-region": fpga_region_source(regions.held),
        "static": static_source(
            config.static_slots,
            None if commands is None else commands.reported,
            None if commands is None else commands.whole_card,
        ),
    }
    programmers: dict[str, Programmer] = {"dfl": DflProgrammer(), "fpga-region": regions}
    if commands is not None:
        programmers["static"] = commands
    if config.backend == "auto":
        sources = [hardware["dfl"], hardware["fpga-region"]]
        if config.static_slots:
            sources.append(hardware["static"])
        return Backend(CompositeSource("auto", sources), programmers, commands=commands)
    chosen = {name: p for name, p in programmers.items() if name == config.backend}
    return Backend(hardware[config.backend], chosen, commands=commands if "static" in chosen else None)


def log_enumeration(source: DeviceSource, enumeration: Enumeration) -> None:
    """One line for what was found (per backend); skipped devices are logged by the sources' watch."""
    counts = Counter(slot.backend for slot in enumeration.slots)
    found = ", ".join(f"{name} {count}" for name, count in sorted(counts.items())) or "none"
    logger.info("backend %s found %d slots (%s)", source.name, len(enumeration.slots), found)
    if not enumeration.slots:
        logger.warning(
            "no FPGA slots found by backend %s (no usable DFL port, FPGA-manager region or static slot): "
            "registering with 0 slots; hot-plugged cards are picked up when udev reports them",
            source.name,
        )
